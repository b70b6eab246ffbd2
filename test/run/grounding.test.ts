import { createHash } from 'node:crypto';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { SUMMARY_NOTE, warningReserve } from '../../src/run/checkpoint-item.ts';
import {
  prepareRunRequest,
  recoverRunContext,
  type CheckpointSummaryItem,
  type RunCompactionPolicy,
  type RunRequest,
} from '../../src/run/index.ts';
import { createTestDatabase } from '../support/db.ts';
import { gatewayFor } from '../support/gateway.ts';
import { behaviours, startMessagesServer } from '../support/messages-server.ts';
import { recoverInColdProcess } from './support/cold-recovery.ts';
import { buildRun, INPUT, ok, prepareChecked, recordingSummarizer, SMALL_POLICY } from './support/fixtures.ts';

/**
 * Run checkpoints go through the same grounding check (src/grounding/index.ts) as
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
    `select status, spent, reason, grounding_checked, grounding_ungrounded from sourcebound.run_summary_requests where run_id = $1 order by dispatched_at, attempt`,
    [runId],
  );
  return rows;
}
async function checkpointCount(runId: string): Promise<number> {
  const { rows } = await pool.query<{ n: number }>('select count(*)::int as n from sourcebound.run_checkpoints where run_id = $1', [runId]);
  return rows[0]!.n;
}

// The work's material never holds these: each is an invented figure.
const INVENTED = 'The search found the fee is 0.93% as of 2024-03-06 for order INV-58213.';
const SEVEN = 'Fees 0.93%, 1.25% and 2.5%; dates 2024-03-06 and 2023-11-30; orders INV-58213 and INV-77120.';
const FLAG = { ...SMALL_POLICY, grounding: 'flag' } satisfies Partial<RunCompactionPolicy>;

const summariesOf = (request: RunRequest) => request.messages.filter((m): m is CheckpointSummaryItem => m.kind === 'checkpoint_summary');
const sha256 = (body: unknown) => createHash('sha256').update(JSON.stringify(body), 'utf8').digest('hex');

describe('grounding of run checkpoints', () => {
  it('reject (default): an answer with an invented figure is invalid, spends its attempt and commits no checkpoint', async () => {
    const { runId } = await buildRun(pool, { groups: 12, turnBytes: 2500, resultBytes: 100 });
    server.enqueue(behaviours.text(INVENTED));
    const { report } = await prepareRunRequest({ pool, runId, scope, ...INPUT, policy: SMALL_POLICY, summarizer: gatewayFor(server) });
    expect(server.count).toBe(1);
    expect(report.compaction).toMatchObject({ decision: 'failed', outcome: 'invalid' });
    expect(report.compaction.reason).toMatch(
      /^ungrounded: 3 fact\(s\) not in the material: number:0\.93%, date:2024-03-06, identifier:INV-58213$/,
    );
    expect(await checkpointCount(runId)).toBe(0);
    expect(await receipts(runId)).toEqual([
      {
        status: 'invalid',
        spent: true,
        reason: expect.stringMatching(/^ungrounded/),
        grounding_checked: ['number:0.93%', 'date:2024-03-06', 'identifier:INV-58213'],
        grounding_ungrounded: ['number:0.93%', 'date:2024-03-06', 'identifier:INV-58213'],
      },
    ]);
  });

  it('flag: the checkpoint is committed, its receipt records the ungrounded facts, and its note in the request names them', async () => {
    const { runId } = await buildRun(pool, { groups: 12, turnBytes: 2500, resultBytes: 100 });
    server.enqueue(behaviours.text(INVENTED));
    const prepared = await prepareChecked({ pool, runId, scope, ...INPUT, policy: FLAG, summarizer: gatewayFor(server) });
    expect(prepared.report.compaction.decision).toBe('committed');
    expect(await checkpointCount(runId)).toBe(1);
    const [receipt] = await receipts(runId);
    expect(receipt).toMatchObject({
      status: 'ok',
      spent: true,
      grounding_ungrounded: ['number:0.93%', 'date:2024-03-06', 'identifier:INV-58213'],
    });
    // The conversation label's rule: the facts as written, without their kind.
    const [item] = summariesOf(prepared.request);
    expect(item!.note).toBe(
      `${SUMMARY_NOTE} Warning: these figures are not in the work it summarizes and may be wrong: 0.93%; 2024-03-06; INV-58213.`,
    );
    expect(item!.ungrounded).toEqual(['number:0.93%', 'date:2024-03-06', 'identifier:INV-58213']);
    expect(JSON.stringify(prepared.body)).toContain('may be wrong: 0.93%; 2024-03-06; INV-58213.]');
    // Cold recovery reads the facts from the receipt: the same request, byte for byte, in this process and in a fresh one.
    const recovered = await recoverRunContext({ pool, runId, scope, ...INPUT, policy: FLAG });
    expect(recovered.request).toEqual(prepared.request);
    expect(JSON.stringify(recovered.body)).toBe(JSON.stringify(prepared.body));
    const cold = await recoverInColdProcess(db.url, runId, scope, { ...INPUT, policy: FLAG });
    expect(cold).toEqual({ sha256: sha256(prepared.body), bytes: Buffer.byteLength(JSON.stringify(prepared.body)) });
    // The next preparation of the Run carries the same note (nothing to do: under the target).
    const next = await prepareChecked({ pool, runId, scope, ...INPUT, policy: FLAG, summarizer: gatewayFor(server) });
    expect(next.report.compaction.decision).toBe('not_needed');
    expect(JSON.stringify(next.body)).toBe(JSON.stringify(prepared.body));
    expect(server.count).toBe(1);
  });

  it('flag: the note names five ungrounded facts and counts the rest', async () => {
    const { runId } = await buildRun(pool, { groups: 12, turnBytes: 2500, resultBytes: 100 });
    server.enqueue(behaviours.text(SEVEN));
    const prepared = await prepareChecked({ pool, runId, scope, ...INPUT, policy: FLAG, summarizer: gatewayFor(server) });
    expect(prepared.report.compaction.decision).toBe('committed');
    const [item] = summariesOf(prepared.request);
    expect(item!.ungrounded).toHaveLength(7);
    expect(item!.note).toBe(
      `${SUMMARY_NOTE} Warning: these figures are not in the work it summarizes and may be wrong: 0.93%; 1.25%; 2.5%; 2024-03-06; 2023-11-30 and 2 more.`,
    );
    const cold = await recoverInColdProcess(db.url, runId, scope, { ...INPUT, policy: FLAG });
    expect(cold.sha256).toBe(sha256(prepared.body));
  });

  it('flag: a grounded answer keeps the note every checkpoint had, to the byte', async () => {
    const { runId } = await buildRun(pool, { groups: 12, turnBytes: 2500, resultBytes: 100 });
    server.enqueue(behaviours.text('Earlier work searched funds and read their fee tables.'));
    const prepared = await prepareChecked({ pool, runId, scope, ...INPUT, policy: FLAG, summarizer: gatewayFor(server) });
    expect(prepared.report.compaction.decision).toBe('committed');
    const [item] = summariesOf(prepared.request);
    expect(item!.note).toBe(SUMMARY_NOTE);
    expect(item).not.toHaveProperty('ungrounded');
    expect(JSON.stringify(prepared.body)).not.toContain('Warning');
  });

  it('flag: the gate measures the warning with the summary; a flagged answer it refused is not reused under reject', async () => {
    // A tight room (a twin Run's floor + 300 bytes): the summarizer is told the allowance less the
    // room kept for a warning naming one fact; an answer within that limit naming seven invented
    // facts has a larger warning, and does not fit the room with it.
    const shape = { groups: 12, turnBytes: 2500, resultBytes: 100 } as const;
    const twin = await buildRun(pool, shape);
    const probe = await prepareChecked({
      pool,
      runId: twin.runId,
      scope,
      ...INPUT,
      policy: SMALL_POLICY,
      summarizer: recordingSummarizer(() => ok('Earlier searches.')),
    });
    const policy = { ...FLAG, targetBytes: probe.report.compactions[0]!.plan!.floorBytes + 300 };
    const { runId } = await buildRun(pool, shape);
    const reserve = warningReserve({ ...SMALL_POLICY, grounding: 'flag' } as RunCompactionPolicy);
    expect(reserve).toBeGreaterThan(100);
    const answer = `${SEVEN} ${'Earlier work searched funds and read their fee tables. '.repeat(4)}`.slice(0, 300 - reserve).trimEnd();
    server.enqueue(behaviours.text(answer));
    const flagged = await prepareChecked({ pool, runId, scope, ...INPUT, policy, summarizer: gatewayFor(server) });
    expect(flagged.report.compaction).toMatchObject({
      decision: 'rejected',
      outcome: 'ok',
      summaryAllowance: 300,
      summaryMaxChars: 300 - reserve,
      summaryBytes: Buffer.byteLength(answer),
    });
    expect(flagged.report.compaction.reason).toMatch(/^over_target:/);
    expect(await checkpointCount(runId)).toBe(0);
    // Under flag the refused answer is not judged again, and there is no later boundary yet: no new request.
    const again = await prepareChecked({ pool, runId, scope, ...INPUT, policy, summarizer: gatewayFor(server) });
    expect(again.report.compaction).toMatchObject({
      decision: 'skipped',
      refused: { summaryBytes: Buffer.byteLength(answer), reason: flagged.report.compaction.reason },
    });
    expect(server.count).toBe(1);
    // Under reject it is not an answer at all: the identity's second attempt is sent.
    server.enqueue(behaviours.text('Earlier work searched funds and read their fee tables.'));
    const strict = await prepareChecked({
      pool,
      runId,
      scope,
      ...INPUT,
      policy: { ...policy, grounding: 'reject' },
      summarizer: gatewayFor(server),
    });
    expect(server.count).toBe(2);
    expect(strict.report.compaction).toMatchObject({ decision: 'committed', refused: null, attempt: 2 });
    expect(summariesOf(strict.request)[0]!.note).toBe(SUMMARY_NOTE);
  });

  it('a grounded answer is committed with its check recorded', async () => {
    const { runId } = await buildRun(pool, { groups: 12, turnBytes: 2500, resultBytes: 100 });
    server.enqueue(behaviours.text('Earlier work searched funds and read their fee tables.'));
    const { report } = await prepareRunRequest({ pool, runId, scope, ...INPUT, policy: SMALL_POLICY, summarizer: gatewayFor(server) });
    expect(report.compaction.decision).toBe('committed');
    expect((await receipts(runId))[0]).toMatchObject({ status: 'ok', grounding_checked: [], grounding_ungrounded: [] });
  });
});
