/**
 * A process that is SIGKILLed by test/run/crash.test.ts at a chosen point of
 * prepareRunRequest. It announces the point on stdout (one JSON line) and
 * then waits forever, so the kill always lands exactly there.
 *   mode `in-call`:        the summary request was sent (receipt committed), no answer yet.
 *   mode `after-commit`:   the checkpoint is committed, prepareRunRequest has not returned.
 *   mode `in-second-call`: the first summary of a plan was answered (its checkpoint committed),
 *                          the second one was sent, no answer yet.
 * An optional fifth argument is the policy as JSON (default SMALL_POLICY).
 */
import pg from 'pg';
import { prepareRunRequest } from '../../../src/run/index.ts';
import { INPUT, ok, SMALL_POLICY } from './fixtures.ts';

const [url, runId, scope, mode, policyJson] = process.argv.slice(2) as [
  string,
  string,
  string,
  'in-call' | 'after-commit' | 'in-second-call',
  string | undefined,
];
const policy = policyJson ? JSON.parse(policyJson) : SMALL_POLICY;
let calls = 0;
const pool = new pg.Pool({ connectionString: url, max: 2 });
pool.on('error', () => {});
// Nothing below resolves: keep the event loop alive until the kill.
setInterval(() => {}, 1 << 30);
const announce = (event: Record<string, unknown>) => process.stdout.write(`${JSON.stringify(event)}\n`);

await prepareRunRequest({
  pool,
  runId,
  scope,
  ...INPUT,
  policy,
  summarizer: {
    model: 'test/recorder@1',
    summarize: async (request) => {
      calls++;
      if (mode === 'in-call' || (mode === 'in-second-call' && calls === 2)) {
        announce({ event: 'sent', items: request.items.length });
        return new Promise(() => {});
      }
      return ok('summary written by the child');
    },
  },
  hooks: {
    onAfterCompaction: (o) => {
      announce({ event: 'committed', checkpointId: o.compaction.checkpointId, decision: o.compaction.decision });
      if (mode === 'in-second-call') return;
      return new Promise(() => {});
    },
  },
});
announce({ event: 'returned' });
