import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import type { Summarizer, SummaryRequest } from '../../src/support/summary-contract.ts';
import {
  recordModelTurn,
  recordToolCall,
  recordToolResult,
  recoverRunContext,
  type RunCompactionReport,
  type PrepareRunRequestOptions,
  type RunCompactionPolicy,
} from '../../src/run/index.ts';
import { createTestDatabase } from '../support/db.ts';
import { gatewayFor } from '../support/gateway.ts';
import { behaviours, startMessagesServer, type Behaviour } from '../support/messages-server.ts';
import { buildRun, INPUT, prepareChecked, SMALL_POLICY } from './support/fixtures.ts';

/**
 * A summary the net-benefit gate refused is judged once: its refusal (and
 * why) is recorded on its receipt, the answer is never judged again, and the
 * next candidate is a later boundary (issue 12, the stall after a refused
 * checkpoint). Through the real gateway, the real SDK and the local Messages
 * server; each answer is scripted for the request it answers.
 */
const db = await createTestDatabase();
const pool = db.pool;
const scope = 'tenant-a';
const GOOD = 'Earlier searches of fund fees and their results.';
const server = await startMessagesServer({ defaultBehaviour: behaviours.text(GOOD) });
afterAll(() => server.close());
beforeEach(() => server.reset());

/** The real gateway, with the server told what to answer just before each request (null: the default, GOOD). */
function scripted(answer: (request: SummaryRequest, n: number) => Behaviour | null): Summarizer & { requests: SummaryRequest[] } {
  const gateway = gatewayFor(server);
  const requests: SummaryRequest[] = [];
  return {
    model: gateway.model,
    requests,
    summarize(request) {
      requests.push(request);
      const b = answer(request, requests.length);
      if (b) server.enqueue(b);
      return gateway.summarize(request);
    },
  };
}

async function receipts(runId: string) {
  const { rows } = await pool.query(
    `select id, identity_key, status, reason, compacted_seqs::float8[] as seqs from sourcebound.run_summary_requests where run_id = $1 order by dispatched_at, attempt`,
    [runId],
  );
  return rows;
}

/** One more work group, as the agent loop records it. */
async function grow(runId: string, n: number) {
  await recordModelTurn({
    pool,
    runId,
    scope,
    text: `MODEL-TURN-late-${n} ${'w'.repeat(2500)}`,
    toolCalls: [{ id: `late_${n}`, name: 'search', input: { q: `late ${n}` } }],
  });
  await recordToolCall({ pool, runId, scope, proposalId: `late_${n}`, dispatchId: `d-late-${n}` });
  await recordToolResult({
    pool,
    runId,
    scope,
    proposalId: `late_${n}`,
    settlement: 'settled',
    content: `late result ${n} ${'r'.repeat(3000)}`,
  });
}

/** Summaries of several chunks (12 KiB of input each) bring the request to the target; room to spare under it. */
const CHUNKED = {
  ...SMALL_POLICY,
  thresholdBytes: 48 * 1024,
  targetBytes: 40 * 1024,
  summaryCapBytes: 50_000,
  maxSummaryInputBytes: 12 * 1024,
} satisfies Partial<RunCompactionPolicy>;
const SHAPE = { groups: 24, turnBytes: 2500, resultBytes: 3000 } as const;

describe('a summary the net-benefit gate refused', () => {
  it('is judged once; a later boundary is summarized and committed, and the request shrinks', async () => {
    // The saving of the plan's first chunk with a summary of GOOD, from a twin Run (the same bytes).
    const twin = await buildRun(pool, SHAPE);
    const probe = await prepareChecked({ pool, runId: twin.runId, scope, ...INPUT, policy: CHUNKED, summarizer: scripted(() => null) });
    const [first] = probe.report.steps.filter((s) => s.step === 'compaction');
    // Saved with an empty summary: the chunk's floor bytes less its summary item.
    const chunkSaving = first!.bytesBefore - first!.bytesAfter + Buffer.byteLength(GOOD);
    // The minimum sits 1,000 bytes under that: the first summary is allowed 512 bytes and, written in
    // 3-byte characters (the summarizer keeps to its characters, not its bytes), saves 536 bytes too few.
    const policy = { ...CHUNKED, minSavingBytes: chunkSaving - 1000 };
    const prepare = (runId: string, summarizer: Summarizer, extra: Partial<PrepareRunRequestOptions> = {}) =>
      prepareChecked({ pool, runId, scope, ...INPUT, policy, summarizer, ...extra });

    server.reset();
    const { runId } = await buildRun(pool, SHAPE);
    const summarizer = scripted((req, n) => (n === 1 ? behaviours.text('基'.repeat(req.maxChars!)) : null));
    const a = await prepare(runId, summarizer);
    expect(a.report.compactions).toHaveLength(1);
    const refusal = a.report.compaction;
    expect(refusal).toMatchObject({ decision: 'rejected', outcome: 'ok', summaryAllowance: 512, summaryBytes: 1536 });
    expect(refusal.reason).toMatch(/^insufficient_saving:\d+<\d+$/);
    expect(refusal.plan!.checkpoints).toBeGreaterThan(1);
    expect(server.count).toBe(1);
    // The refusal and its reason are on the receipt.
    expect(await receipts(runId)).toEqual([
      expect.objectContaining({ id: refusal.summaryRequestId, status: 'ok', reason: refusal.reason }),
    ]);

    // The agent loop goes on: the Run grows, and the next turn asks for its next request. The stored
    // answer is not judged again: the candidate is a later boundary (the same first turn, and further),
    // and it and the rest of the plan are summarized and committed. The request shrinks.
    await grow(runId, 0);
    const b = await prepare(runId, summarizer);
    expect(b.report.compactions[0]).toMatchObject({
      decision: 'committed',
      refused: {
        identityKey: refusal.candidate!.identityKey,
        summaryRequestId: refusal.summaryRequestId,
        summaryBytes: 1536,
        reason: refusal.reason,
      },
    });
    expect(b.report.compactions[0]!.candidate!.fromSeq).toBe(refusal.candidate!.fromSeq);
    expect(b.report.compactions[0]!.candidate!.toSeq).toBeGreaterThan(refusal.candidate!.toSeq);
    expect(b.report.compactions.filter((c) => c.decision === 'committed').length).toBeGreaterThan(1);
    expect(b.report.bytes).toBeLessThan(a.report.bytes - 3 * policy.minSavingBytes);
    expect(b.report.fits).toBe(true);
    expect(summarizer.requests).toHaveLength(1 + b.report.compactions.length);
    // Its last chunk saves too little: the request was barely over the target, and fitting gives
    // bodies back to a request the summary takes under it. A refusal again, of a good answer.
    const second = b.report.compaction;
    expect(second).toMatchObject({ decision: 'rejected', outcome: 'ok', summaryBytes: Buffer.byteLength(GOOD) });
    expect(second.reason).toMatch(/^insufficient_saving:/);

    // The Run grows. Until it has grown enough for an answer that large to save the minimum, nothing
    // is sent and nothing is judged, and the report says which answer was refused and why; then a
    // later boundary is summarized and committed, and the request is at the target.
    const waited: RunCompactionReport[] = [];
    let c = b;
    for (let turn = 1; turn <= 6; turn++) {
      await grow(runId, turn);
      c = await prepare(runId, summarizer);
      if (c.report.compaction.decision !== 'skipped') break;
      waited.push(...c.report.compactions);
    }
    expect(waited.length).toBeGreaterThan(0);
    for (const w of waited) {
      expect(w).toMatchObject({
        decision: 'skipped',
        refused: { identityKey: second.candidate!.identityKey, summaryRequestId: second.summaryRequestId, reason: second.reason },
      });
      expect(w.reason).toMatch(
        new RegExp(
          `^refused:${second.candidate!.identityKey}: turns ${second.candidate!.fromSeq}-${second.candidate!.toSeq}: .*would save at most \\d+\\)$`,
        ),
      );
    }
    expect(c.report.compactions).toEqual([
      expect.objectContaining({ decision: 'committed', refused: expect.objectContaining({ identityKey: second.candidate!.identityKey }) }),
    ]);
    expect(c.report.compaction.candidate!.fromSeq).toBe(second.candidate!.fromSeq);
    expect(c.report.compaction.candidate!.toSeq).toBeGreaterThan(second.candidate!.toSeq);
    expect(c.report.bytes).toBeLessThanOrEqual(policy.targetBytes);

    // Each answer was judged once, when it came back: one model request per decision about a summary,
    // and each refused material was sent once.
    expect(summarizer.requests).toHaveLength(1 + b.report.compactions.length + 1);
    const rs = await receipts(runId);
    expect(rs).toHaveLength(summarizer.requests.length);
    expect(rs.filter((r) => r.reason !== null).map((r) => [r.id, r.reason])).toEqual([
      [refusal.summaryRequestId, refusal.reason],
      [second.summaryRequestId, second.reason],
    ]);
    // Cold recovery rebuilds that request.
    expect((await recoverRunContext({ pool, runId, scope, ...INPUT, policy })).request).toEqual(c.request);
  });
});
