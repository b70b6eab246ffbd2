import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { prepareRunRequest } from '../../src/run/index.ts';
import { createTestDatabase } from '../support/db.ts';
import { gatewayFor } from '../support/gateway.ts';
import { behaviours, startMessagesServer } from '../support/messages-server.ts';
import { buildRun, INPUT, SMALL_POLICY } from './support/fixtures.ts';

/**
 * Run checkpoints go through the same grounding check (src/grounding.ts) as
 * conversation summaries: here through the gateway, the real SDK and the
 * local Messages server, with the model's answer scripted.
 */
const db = await createTestDatabase();
const pool = db.pool;
const scope = 'tenant-a';
const server = await startMessagesServer();
afterAll(() => server.close());
beforeEach(() => server.reset());

async function receipts(runId: string) {
  const { rows } = await pool.query(
    `select status, spent, reason, grounding_checked, grounding_ungrounded from sourcebound.run_summary_requests where run_id = $1 order by dispatched_at, attempt`, [runId]);
  return rows;
}
async function checkpointCount(runId: string): Promise<number> {
  const { rows } = await pool.query<{ n: number }>('select count(*)::int as n from sourcebound.run_checkpoints where run_id = $1', [runId]);
  return rows[0]!.n;
}

// The work's material never holds these: each is an invented figure.
const INVENTED = 'The search found the fee is 0.93% as of 2024-03-06 for order INV-58213.';

describe('grounding of run checkpoints', () => {
  it('reject (default): an answer with an invented figure is invalid, spends its attempt and commits no checkpoint', async () => {
    const { runId } = await buildRun(pool, { groups: 12, turnBytes: 2500, resultBytes: 100 });
    server.enqueue(behaviours.text(INVENTED));
    const { report } = await prepareRunRequest({ pool, runId, scope, ...INPUT, policy: SMALL_POLICY, summarizer: gatewayFor(server) });
    expect(server.count).toBe(1);
    expect(report.compaction).toMatchObject({ decision: 'failed', outcome: 'invalid' });
    expect(report.compaction.reason).toMatch(/^ungrounded: 3 fact\(s\) not in the material: number:0\.93%, date:2024-03-06, identifier:INV-58213$/);
    expect(await checkpointCount(runId)).toBe(0);
    expect(await receipts(runId)).toEqual([{
      status: 'invalid', spent: true, reason: expect.stringMatching(/^ungrounded/),
      grounding_checked: ['number:0.93%', 'date:2024-03-06', 'identifier:INV-58213'],
      grounding_ungrounded: ['number:0.93%', 'date:2024-03-06', 'identifier:INV-58213'],
    }]);
  });

  it('flag: the checkpoint is committed and its receipt records the ungrounded facts', async () => {
    const { runId } = await buildRun(pool, { groups: 12, turnBytes: 2500, resultBytes: 100 });
    server.enqueue(behaviours.text(INVENTED));
    const { report } = await prepareRunRequest({ pool, runId, scope, ...INPUT, policy: { ...SMALL_POLICY, grounding: 'flag' }, summarizer: gatewayFor(server) });
    expect(report.compaction.decision).toBe('committed');
    expect(await checkpointCount(runId)).toBe(1);
    const [receipt] = await receipts(runId);
    expect(receipt).toMatchObject({ status: 'ok', spent: true, grounding_ungrounded: ['number:0.93%', 'date:2024-03-06', 'identifier:INV-58213'] });
  });

  it('a grounded answer is committed with its check recorded', async () => {
    const { runId } = await buildRun(pool, { groups: 12, turnBytes: 2500, resultBytes: 100 });
    server.enqueue(behaviours.text('Earlier work searched funds and read their fee tables.'));
    const { report } = await prepareRunRequest({ pool, runId, scope, ...INPUT, policy: SMALL_POLICY, summarizer: gatewayFor(server) });
    expect(report.compaction.decision).toBe('committed');
    expect((await receipts(runId))[0]).toMatchObject({ status: 'ok', grounding_checked: [], grounding_ungrounded: [] });
  });
});
