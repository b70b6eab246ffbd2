import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { prepareRunRequest, recoverRunContext } from '../../src/run/index.ts';
import { createTestDatabase } from '../support/db.ts';
import { buildRun, forbiddenSummarizer, INPUT, recordingSummarizer, SMALL_POLICY } from './support/fixtures.ts';

const db = await createTestDatabase();
const pool = db.pool;
const scope = 'tenant-a';
const CHILD = fileURLToPath(new URL('./support/crash-child.ts', import.meta.url));
const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/**
 * Runs the child until it announces `event`, then SIGKILLs it and waits for
 * its exit. Event-driven: no sleeps.
 */
async function killAt(runId: string, mode: 'in-call' | 'after-commit', event: string): Promise<Record<string, unknown>> {
  const child = spawn(process.execPath, ['--import', 'tsx', CHILD, db.url, runId, scope, mode], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
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
    const during = await prepareRunRequest({ pool, runId, scope, ...INPUT, policy: SMALL_POLICY, summarizer: forbidden });
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
    const next = await prepareRunRequest({ pool, runId, scope, ...INPUT, policy: SMALL_POLICY, summarizer: retry, clock: later });
    expect(next.report.compaction).toMatchObject({ decision: 'committed', attempt: 2 });
    const all = await rows('run_summary_requests', runId);
    expect(all.map((r) => [r.status, r.attempt, r.identity_key])).toEqual(
      expect.arrayContaining([['unknown', 1, receipt.identity_key], ['ok', 2, receipt.identity_key]]));
  });

  it('after commit and before acknowledgement: recovery finds the checkpoint through its receipt and nothing is sent twice', async () => {
    const { runId } = await buildRun(pool, { groups: 12, turnBytes: 2500, resultBytes: 100 });
    const announced = await killAt(runId, 'after-commit', 'committed');
    expect(announced.decision).toBe('committed');

    const forbidden = forbiddenSummarizer();
    const recovered = await recoverRunContext({ pool, runId, scope, ...INPUT, policy: SMALL_POLICY, summarizer: forbidden });
    expect(recovered.report.checkpointsUsed).toEqual([announced.checkpointId]);
    expect(recovered.report.receipts).toEqual([expect.objectContaining({ status: 'ok', spent: true, checkpointId: announced.checkpointId })]);
    expect(recovered.report.fits).toBe(true);
    expect(recovered.request.messages[1]).toMatchObject({ kind: 'checkpoint_summary', text: 'summary written by the child' });

    const next = await prepareRunRequest({ pool, runId, scope, ...INPUT, policy: SMALL_POLICY, summarizer: forbidden });
    expect(next.report.compaction.decision).toBe('not_needed');
    expect(next.request).toEqual(recovered.request);
    expect(forbidden.calls).toBe(0);
    expect(await rows('run_summary_requests', runId)).toHaveLength(1);
    expect(await rows('run_checkpoints', runId)).toHaveLength(1);
  });
});

/** The default deadline plus grace: SMALL_POLICY keeps them. */
const SMALL_POLICY_LEASE_MS = 120_000 + 30_000;
