import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { prepareRunRequest, recoverRunContext } from '../../src/run/index.ts';
import { createTestDatabase } from '../support/db.ts';
import { buildRun, forbiddenSummarizer, INPUT, recordingSummarizer, SMALL_POLICY, prepareChecked } from './support/fixtures.ts';

const db = await createTestDatabase();
const pool = db.pool;
const scope = 'tenant-a';
const CHILD = fileURLToPath(new URL('./support/crash-child.ts', import.meta.url));
const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/**
 * Runs the child until it announces `event`, then SIGKILLs it and waits for
 * its exit. Event-driven: no sleeps.
 */
async function killAt(
  runId: string,
  mode: 'in-call' | 'after-commit' | 'in-second-call',
  event: string,
  policy?: object,
): Promise<Record<string, unknown>> {
  const args = [CHILD, db.url, runId, scope, mode, ...(policy ? [JSON.stringify(policy)] : [])];
  const child = spawn(process.execPath, ['--import', 'tsx', ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  const exited = new Promise<NodeJS.Signals | null>((resolve) => child.once('exit', (_code, signal) => resolve(signal)));
  const lines = createInterface({ input: child.stdout });
  const announced = await new Promise<Record<string, unknown>>((resolve, reject) => {
    lines.on('line', (line) => {
      const parsed = JSON.parse(line) as Record<string, unknown>;
      if (parsed.event === event) resolve(parsed);
    });
    exited.then(() => reject(new Error(`child exited before ${event}: ${stderr}`)));
  });
  child.kill('SIGKILL');
  expect(await exited).toBe('SIGKILL');
  return announced;
}

async function rows(table: string, runId: string) {
  const { rows } = await pool.query(`select * from sourcebound.${table} where run_id = $1 order by 1`, [runId]);
  return rows;
}

describe('a process killed during run compaction', () => {
  it('after the summary request was sent and before commit: the receipt stays, recovery sends nothing, the outcome stays unknown', async () => {
    const { runId } = await buildRun(pool, { groups: 12, turnBytes: 2500, resultBytes: 100 });
    const original = await recoverRunContext({ pool, runId, scope, ...INPUT, policy: SMALL_POLICY });
    await killAt(runId, 'in-call', 'sent');

    const [receipt] = await rows('run_summary_requests', runId);
    expect(receipt).toMatchObject({ status: 'dispatched', attempt: 1 });
    expect(await rows('run_checkpoints', runId)).toEqual([]);

    // Recovery rebuilds the same request from records, with a summarizer that throws on any call.
    const forbidden = forbiddenSummarizer();
    const recovered = await recoverRunContext({ pool, runId, scope, ...INPUT, policy: SMALL_POLICY, summarizer: forbidden });
    expect(recovered.request).toEqual(original.request);
    expect(recovered.report.inFlight).toEqual([receipt.id]);
    expect(recovered.report.receipts).toEqual([expect.objectContaining({ id: receipt.id, status: 'dispatched', checkpointId: null })]);
    // While its lease runs, nobody sends another summary for this run.
    const during = await prepareChecked({ pool, runId, scope, ...INPUT, policy: SMALL_POLICY, summarizer: forbidden });
    expect(during.report.compaction).toMatchObject({ decision: 'skipped', reason: 'summary_in_flight' });
    expect(forbidden.calls).toBe(0);

    // Past its lease, recovery settles it as unknown (spent, reservation charged), still sending nothing.
    const later = () => Date.now() + SMALL_POLICY_LEASE_MS + 1000;
    const afterLease = await recoverRunContext({ pool, runId, scope, ...INPUT, policy: SMALL_POLICY, summarizer: forbidden, clock: later });
    expect(afterLease.report.expiredReceipts).toEqual([receipt.id]);
    expect(afterLease.request).toEqual(original.request);
    expect(forbidden.calls).toBe(0);
    const [settled] = await rows('run_summary_requests', runId);
    expect(settled).toMatchObject({ status: 'unknown', spent: true });
    expect(settled.reason).toMatch(/lease_expired/);

    // The unknown stays unknown: the one retry allowed is the same identity (attempt 2), never a new one.
    const retry = recordingSummarizer();
    const next = await prepareChecked({ pool, runId, scope, ...INPUT, policy: SMALL_POLICY, summarizer: retry, clock: later });
    expect(next.report.compaction).toMatchObject({ decision: 'committed', attempt: 2 });
    const all = await rows('run_summary_requests', runId);
    expect(all.map((r) => [r.status, r.attempt, r.identity_key])).toEqual(
      expect.arrayContaining([
        ['unknown', 1, receipt.identity_key],
        ['ok', 2, receipt.identity_key],
      ]),
    );
  });

  it('after commit and before acknowledgement: recovery finds the checkpoint through its receipt and nothing is sent twice', async () => {
    const { runId } = await buildRun(pool, { groups: 12, turnBytes: 2500, resultBytes: 100 });
    const announced = await killAt(runId, 'after-commit', 'committed');
    expect(announced.decision).toBe('committed');

    const forbidden = forbiddenSummarizer();
    const recovered = await recoverRunContext({ pool, runId, scope, ...INPUT, policy: SMALL_POLICY, summarizer: forbidden });
    expect(recovered.report.checkpointsUsed).toEqual([announced.checkpointId]);
    expect(recovered.report.receipts).toEqual([
      expect.objectContaining({ status: 'ok', spent: true, checkpointId: announced.checkpointId }),
    ]);
    expect(recovered.report.fits).toBe(true);
    expect(recovered.request.messages[1]).toMatchObject({ kind: 'checkpoint_summary', text: 'summary written by the child' });

    const next = await prepareChecked({ pool, runId, scope, ...INPUT, policy: SMALL_POLICY, summarizer: forbidden });
    expect(next.report.compaction.decision).toBe('not_needed');
    expect(next.request).toEqual(recovered.request);
    expect(forbidden.calls).toBe(0);
    expect(await rows('run_summary_requests', runId)).toHaveLength(1);
    expect(await rows('run_checkpoints', runId)).toHaveLength(1);
  });
});

describe('a process killed between two summaries of one plan', () => {
  it('keeps the first checkpoint, leaves the second request unknown, and the next calls finish the plan under the same identity', async () => {
    // Several times over the threshold, with a summarizer input that covers a few groups: a plan of several checkpoints.
    const policy = { ...SMALL_POLICY, thresholdBytes: 48 * 1024, targetBytes: 40 * 1024, maxSummaryInputBytes: 24 * 1024 };
    const { runId } = await buildRun(pool, { groups: 60, turnBytes: 2500, resultBytes: 3000 });
    const sent = await killAt(runId, 'in-second-call', 'sent', policy);
    expect(sent.event).toBe('sent');

    const [first] = await rows('run_checkpoints', runId);
    const receipts = await rows('run_summary_requests', runId);
    expect(receipts.map((r) => r.status).sort()).toEqual(['dispatched', 'ok']);
    const second = receipts.find((r) => r.status === 'dispatched');
    // The second request was made on top of the first checkpoint.
    expect(second.predecessor_id).toBe(first.id);
    expect(await rows('run_checkpoints', runId)).toHaveLength(1);

    // Recovery: the request with the first checkpoint, nothing sent; while the lease runs nobody sends another summary.
    const forbidden = forbiddenSummarizer();
    const recovered = await recoverRunContext({ pool, runId, scope, ...INPUT, policy, summarizer: forbidden });
    expect(recovered.report.checkpointsUsed).toEqual([first.id]);
    expect(recovered.report.inFlight).toEqual([second.id]);
    expect(recovered.request.messages[1]).toMatchObject({ kind: 'checkpoint_summary', checkpointId: first.id });
    const during = await prepareChecked({ pool, runId, scope, ...INPUT, policy, summarizer: forbidden });
    expect(during.report.compaction).toMatchObject({ decision: 'skipped', reason: 'summary_in_flight' });
    expect(during.request).toEqual(recovered.request);
    expect(forbidden.calls).toBe(0);

    // Past the lease: unknown, retried once under its identity, and the plan is finished.
    const later = () => Date.now() + SMALL_POLICY_LEASE_MS + 1000;
    const retry = recordingSummarizer();
    const next = await prepareChecked({ pool, runId, scope, ...INPUT, policy, summarizer: retry, clock: later });
    expect(next.report.expiredReceipts).toEqual([second.id]);
    expect(next.report.compactions[0]).toMatchObject({ decision: 'committed', attempt: 2 });
    expect(next.report.compactions[0]!.candidate!.identityKey).toBe(second.identity_key);
    expect(next.report.fits).toBe(true);
    const all = await rows('run_summary_requests', runId);
    expect(
      all
        .filter((r) => r.identity_key === second.identity_key)
        .map((r) => [r.status, r.attempt])
        .sort(),
    ).toEqual([
      ['ok', 2],
      ['unknown', 1],
    ]);
    expect((await recoverRunContext({ pool, runId, scope, ...INPUT, policy, clock: later })).request).toEqual(next.request);
  });
});

/** The default deadline plus grace: SMALL_POLICY keeps them. */
const SMALL_POLICY_LEASE_MS = 120_000 + 30_000;
