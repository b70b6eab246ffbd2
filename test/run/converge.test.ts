import { describe, expect, it } from 'vitest';
import type { Outcome } from '../../src/support/summary-contract.ts';
import {
  measureRequest,
  prepareRunRequest,
  readRunBudget,
  recordCorrection,
  recoverRunContext,
  type CheckpointSummaryItem,
  type PrepareRunRequestOptions,
  type RunCompactionPolicy,
  type RunRequestItem,
  type ToolResultItem,
} from '../../src/run/index.ts';
import { SUMMARY_FLOOR_BYTES } from '../../src/run/compaction-plan.ts';
import { createTestDatabase } from '../support/db.ts';
import { buildRun, forbiddenSummarizer, INPUT, ok, recordingSummarizer, SMALL_POLICY, prepareChecked } from './support/fixtures.ts';

/**
 * A Run many times over the threshold, where one summary (its input bounded
 * by maxSummaryInputBytes) cannot bring the request to the target: the
 * compaction plan makes several checkpoints, oldest settled work first, and
 * the Run converges. SMALL_POLICY with a small summarizer input, so each
 * summary covers a few groups (the same proportions as the defaults on a Run
 * of several MiB).
 */
const db = await createTestDatabase();
const pool = db.pool;
const scope = 'tenant-a';

const CHUNKED = {
  ...SMALL_POLICY,
  thresholdBytes: 48 * 1024,
  targetBytes: 40 * 1024,
  maxSummaryInputBytes: 24 * 1024,
} satisfies Partial<RunCompactionPolicy>;
/** 60 groups of a 2.5 KB turn and a 3 KB result: about 4x the threshold after reversible fitting. */
const LARGE = { groups: 60, turnBytes: 2500, resultBytes: 3000 } as const;

function prepare(runId: string, extra: Partial<PrepareRunRequestOptions> = {}) {
  return prepareChecked({ pool, runId, scope, ...INPUT, policy: CHUNKED, ...extra });
}

async function checkpoints(runId: string) {
  const { rows } = await pool.query(
    `select id, segment, predecessor_id, from_seq::float8 as "fromSeq", to_seq::float8 as "toSeq", compacted_seqs::float8[] as seqs,
       summary_request_id, summary, tool_result_refs from sourcebound.run_checkpoints where run_id = $1 order by segment`,
    [runId],
  );
  return rows;
}

async function receipts(runId: string) {
  const { rows } = await pool.query(
    `select id, identity_key, attempt, status, spent, predecessor_id, compacted_seqs::float8[] as seqs, max_chars, input_bytes
     from sourcebound.run_summary_requests where run_id = $1 order by dispatched_at, attempt`,
    [runId],
  );
  return rows;
}

async function modelSeqs(runId: string): Promise<number[]> {
  const { rows } = await pool.query(
    `select seq::float8 as seq from sourcebound.run_turns where run_id = $1 and kind = 'model' order by seq`,
    [runId],
  );
  return rows.map((r) => r.seq);
}

const inputBytes = (items: readonly { id: string; text: string }[]) =>
  items.reduce((n, i) => n + Buffer.byteLength(i.id) + Buffer.byteLength(i.text), 0);
const summariesOf = (items: readonly RunRequestItem[]) => items.filter((i): i is CheckpointSummaryItem => i.kind === 'checkpoint_summary');

describe('a Run many times over the threshold', () => {
  it('converges in one call: several non-overlapping checkpoints, oldest settled work first, each summarizer input bounded', async () => {
    const { runId, proposals } = await buildRun(pool, { ...LARGE, budget: { requests: 100, tokens: 10_000_000 } });
    await recordCorrection({ pool, runId, scope, text: 'USER-CANARY-CORRECTION: only EU funds' });
    // Reversible fitting alone leaves it far over the threshold.
    const fitted = await prepare(runId, { policy: { ...CHUNKED, enabled: false } });
    expect(fitted.report.bytes).toBeGreaterThan(3.5 * CHUNKED.thresholdBytes);

    const summarizer = recordingSummarizer((req, n) => ok(`SUMMARY-CANARY-${n}: ${req.items.length} items of earlier work.`));
    const seen: string[] = [];
    const hooks = {
      onBeforeCompaction: (o: { compaction: { decision: string } }) => void seen.push(`before:${o.compaction.decision}`),
      onAfterCompaction: (o: { compaction: { decision: string } }) => void seen.push(`after:${o.compaction.decision}`),
    };
    // The canaries are invented identifiers: recorded by the grounding check (flag), not rejected.
    const { request, report } = await prepare(runId, { summarizer, hooks, policy: { ...CHUNKED, grounding: 'flag' } });

    expect(report.fits).toBe(true);
    expect(report.reason).toBeNull();
    expect(report.bytes).toBeLessThanOrEqual(CHUNKED.targetBytes);
    expect(report.bytes).toBe(measureRequest(request));
    const k = report.compactions.length;
    expect(k).toBeGreaterThan(2);
    expect(k).toBeLessThanOrEqual(16);
    expect(report.compactions.map((c) => c.decision)).toEqual(Array(k).fill('committed'));
    expect(report.compaction).toEqual(report.compactions.at(-1));
    // The plan was made before anything was sent, and it held: k checkpoints, as planned.
    expect(report.compactions[0]!.plan).toMatchObject({ checkpoints: k, reachable: true });
    expect(report.compactions[0]!.plan!.floorBytes + k * CHUNKED.minSummaryBytes).toBeLessThanOrEqual(CHUNKED.targetBytes);
    // Every checkpoint saved at least the minimum, and is its own step of the report.
    const steps = report.steps.filter((s) => s.step === 'compaction');
    expect(steps).toHaveLength(k);
    for (const s of steps) expect(s.bytesBefore - s.bytesAfter).toBeGreaterThanOrEqual(CHUNKED.minSavingBytes);
    expect(steps[0]!.bytesBefore).toBe(fitted.report.bytes);
    expect(steps.at(-1)!.bytesAfter).toBe(report.bytes);
    expect(seen).toEqual(Array.from({ length: k }, () => ['before:pending', 'after:committed']).flat());

    // One summary request per checkpoint; each input bounded, never user text or an earlier summary.
    expect(summarizer.calls).toHaveLength(k);
    for (const call of summarizer.calls) {
      expect(inputBytes(call.items)).toBeLessThanOrEqual(CHUNKED.maxSummaryInputBytes);
      expect(call.items.map((i) => i.text).join('\n')).not.toMatch(/USER-CANARY|SUMMARY-CANARY/);
      expect(call.maxChars).toBeGreaterThanOrEqual(CHUNKED.minSummaryBytes);
      expect(call.maxChars).toBeLessThanOrEqual(CHUNKED.summaryCapBytes);
    }

    // A chain of immutable checkpoints over contiguous, non-overlapping ranges from the oldest work,
    // each bound to its own ok receipt (attempt 1) made on top of the one before.
    const cps = await checkpoints(runId);
    const rs = await receipts(runId);
    const seqs = await modelSeqs(runId);
    expect(cps.map((c) => c.segment)).toEqual(Array.from({ length: k }, (_, i) => i + 1));
    expect(rs.map((r) => [r.status, r.spent, r.attempt])).toEqual(Array(k).fill(['ok', true, 1]));
    const compacted = cps.flatMap((c) => c.seqs);
    expect(compacted).toEqual(seqs.slice(0, compacted.length));
    for (const [i, cp] of cps.entries()) {
      expect(cp.predecessor_id).toBe(i === 0 ? null : cps[i - 1].id);
      expect(cp.summary_request_id).toBe(rs[i].id);
      expect(rs[i].predecessor_id).toBe(cp.predecessor_id);
      expect(rs[i].seqs).toEqual(cp.seqs);
      expect(cp.summary).toBe(`SUMMARY-CANARY-${i + 1}: ${summarizer.calls[i]!.items.length} items of earlier work.`);
      // Whole groups: every tool unit of every compacted turn, with its result reference.
      const groups = cp.seqs.map((s: number) => seqs.indexOf(s));
      expect(cp.tool_result_refs.map((r: { proposalId: string }) => r.proposalId)).toEqual(groups.flatMap((g: number) => proposals[g]!));
    }
    // The newest groups are intact and never compacted; the request shows the summaries in order.
    const recent = seqs.slice(-CHUNKED.keepRecentGroups);
    for (const s of recent) expect(compacted).not.toContain(s);
    for (const id of proposals.slice(-CHUNKED.keepRecentGroups).flat()) {
      const unit = request.messages.find((m): m is ToolResultItem => m.kind === 'tool_result' && m.proposalId === id);
      expect(unit?.body).toMatch(new RegExp(`^RESULT-${id}`));
    }
    expect(summariesOf(request.messages).map((s) => s.checkpointId)).toEqual(cps.map((c) => c.id));
    expect(request.messages[0]).toMatchObject({ kind: 'user_request', text: 'USER-CANARY-REQUEST: compare the funds.' });
    expect(request.messages.filter((m) => m.kind === 'correction')).toEqual([
      expect.objectContaining({ revision: 1, text: 'USER-CANARY-CORRECTION: only EU funds' }),
    ]);

    // Every summary was reserved and settled against the budget; nothing stays reserved.
    expect(await readRunBudget({ pool, runId, scope })).toMatchObject({
      requestsUsed: k,
      tokensUsed: 120 * k,
      requestsReserved: 0,
      tokensReserved: 0,
    });

    // Cold recovery rebuilds exactly this request; the next call has nothing to do.
    const recovered = await recoverRunContext({ pool, runId, scope, ...INPUT, policy: CHUNKED });
    expect(recovered.request).toEqual(request);
    expect(recovered.report.receipts.map((r) => r.checkpointId)).toEqual(cps.map((c) => c.id));
    const forbidden = forbiddenSummarizer();
    const next = await prepare(runId, { summarizer: forbidden });
    expect(next.request).toEqual(request);
    expect(next.report.compaction.decision).toBe('not_needed');
    expect(forbidden.calls).toBe(0);
  });

  it('stops at the first summary that is not committed, keeps the committed ones, and retries an unknown one under its own identity', async () => {
    const { runId } = await buildRun(pool, LARGE);
    const fitted = await prepare(runId, { policy: { ...CHUNKED, enabled: false } });
    const unknown: Outcome = { kind: 'unknown', reason: 'connection cut after send', requestId: null };
    const summarizer = recordingSummarizer((_, n) => (n === 3 ? unknown : ok(`summary ${n}`)));

    const first = await prepare(runId, { summarizer });
    expect(first.report.compactions.map((c) => c.decision)).toEqual(['committed', 'committed', 'failed']);
    expect(first.report.compaction).toMatchObject({ decision: 'failed', outcome: 'unknown', attempt: 1 });
    expect(first.report.fits).toBe(false);
    expect(first.report.reason).toMatch(/and 2 new checkpoint\(s\).*compaction failed/);
    expect(fitted.report.bytes - first.report.bytes).toBeGreaterThanOrEqual(2 * CHUNKED.minSavingBytes);
    expect(first.report.checkpointsUsed).toHaveLength(2);
    expect(summarizer.calls).toHaveLength(3);
    // What was committed is what recovery rebuilds.
    expect((await recoverRunContext({ pool, runId, scope, ...INPUT, policy: CHUNKED })).request).toEqual(first.request);

    // The next call sends the unknown one again, under the same identity (attempt 2), and goes on with the plan.
    const second = await prepare(runId, { summarizer });
    expect(second.report.compactions[0]).toMatchObject({ decision: 'committed', attempt: 2 });
    expect(second.report.compactions[0]!.candidate!.identityKey).toBe(first.report.compaction.candidate!.identityKey);
    expect(second.report.compactions.every((c) => c.decision === 'committed')).toBe(true);
    expect(second.report.fits).toBe(true);
    const rs = await receipts(runId);
    const pinned = rs.filter((r) => r.identity_key === first.report.compaction.candidate!.identityKey);
    expect(pinned.map((r) => [r.status, r.attempt])).toEqual([
      ['unknown', 1],
      ['ok', 2],
    ]);
    expect(rs.filter((r) => r.status !== 'ok')).toHaveLength(1);
    expect((await checkpoints(runId)).length).toBe(2 + second.report.compactions.length);
    expect((await recoverRunContext({ pool, runId, scope, ...INPUT, policy: CHUNKED })).request).toEqual(second.request);
  });

  it('finishes the plan over several calls when it needs more summaries than one call may make', async () => {
    const { runId } = await buildRun(pool, LARGE);
    const policy = { ...CHUNKED, maxSummariesPerPrepare: 2 };
    const summarizer = recordingSummarizer();
    const first = await prepare(runId, { summarizer, policy });
    const planned = first.report.compactions[0]!.plan!.checkpoints;
    expect(planned).toBeGreaterThan(2);
    expect(first.report.compactions.map((c) => c.decision)).toEqual(['committed', 'committed', 'skipped']);
    expect(first.report.compaction.reason).toMatch(/^summary_limit:2/);
    const calls = [first];
    while (!calls.at(-1)!.report.fits && calls.length < 10) calls.push(await prepare(runId, { summarizer, policy }));
    // Bounded: at most two summaries a call, and the plan is done in as many calls as it needs.
    expect(calls.at(-1)!.report.fits).toBe(true);
    // Each call plans again from what is committed (exact sizes): never more calls than the first plan said.
    expect(calls.length).toBeGreaterThan(1);
    expect(calls.length).toBeLessThanOrEqual(Math.ceil(planned / 2));
    for (const c of calls) expect(c.report.compactions.filter((x) => x.summaryRequestId !== null).length).toBeLessThanOrEqual(2);
    expect(summarizer.calls.length).toBeLessThanOrEqual(planned);
    expect(await checkpoints(runId)).toHaveLength(summarizer.calls.length);
    expect((await recoverRunContext({ pool, runId, scope, ...INPUT, policy })).request).toEqual(calls.at(-1)!.request);
  });

  it('sends nothing when the whole plan cannot be paid for without touching the finalization reserve', async () => {
    // The plan's size, from a Run that cannot afford even one summary (the same history: buildRun is seeded).
    const probe = await buildRun(pool, { ...LARGE, budget: { requests: 1 } });
    const refused = await prepare(probe.runId, { summarizer: recordingSummarizer() });
    expect(refused.report.compaction).toMatchObject({ decision: 'skipped', reason: 'finalization_reserve' });
    const k = refused.report.compaction.plan!.checkpoints;
    expect(k).toBeGreaterThan(2);

    // k requests: the plan would take them all and leave none for finalization. Nothing is spent.
    const short = await buildRun(pool, { ...LARGE, budget: { requests: k } });
    const none = recordingSummarizer();
    const skipped = await prepare(short.runId, { summarizer: none });
    expect(skipped.report.compaction).toMatchObject({ decision: 'skipped', reason: 'finalization_reserve' });
    expect(skipped.report.compactions).toHaveLength(1);
    expect(none.calls).toHaveLength(0);
    expect(await receipts(short.runId)).toEqual([]);
    expect(await readRunBudget({ pool, runId: short.runId, scope })).toMatchObject({ requestsUsed: 0, requestsReserved: 0 });

    // k + 1: the plan is carried out and one request is left for finalization.
    const enough = await buildRun(pool, { ...LARGE, budget: { requests: k + 1 } });
    const done = await prepare(enough.runId, { summarizer: recordingSummarizer() });
    expect(done.report.fits).toBe(true);
    expect(done.report.compactions).toHaveLength(k);
    expect(await readRunBudget({ pool, runId: enough.runId, scope })).toMatchObject({
      requestsLimit: k + 1,
      requestsUsed: k,
      requestsReserved: 0,
    });
  });

  it('rejects a summary longer than its share of the room, so the rest of the plan stays reachable', async () => {
    // Few, large chunks, and a tight room: a twin Run (the same bytes) shows the floor of its plan
    // (k checkpoints); this Run's target leaves 200 bytes a summary above that floor. The first
    // summary's allowance is then its share of the room (200 B, under the 512 B the work it replaces
    // would allow); the summarizer writes the characters it is told, each 4 bytes: 800 bytes, and
    // the rest of the plan could no longer reach the target.
    const shape = { groups: 24, turnBytes: 2500, resultBytes: 3000 } as const;
    const wide = { ...CHUNKED, summaryCapBytes: 50_000, maxSummaryInputBytes: 24 * 1024 };
    const twin = await buildRun(pool, shape);
    const probe = await prepare(twin.runId, {
      summarizer: recordingSummarizer(() => ok('Earlier searches and their results.')),
      policy: wide,
    });
    const twinPlan = probe.report.compactions[0]!.plan!;
    const k = twinPlan.checkpoints;
    expect(k).toBeGreaterThan(1);
    expect(k).toBeLessThanOrEqual(3);
    const policy = { ...wide, targetBytes: twinPlan.floorBytes + 200 * k };

    const { runId } = await buildRun(pool, shape);
    const summarizer = recordingSummarizer((req) => ok('📈'.repeat(req.maxChars!)));
    const { report } = await prepare(runId, { summarizer, policy });
    const plan = report.compaction.plan!;
    expect(plan.checkpoints).toBe(k);
    const share = Math.floor((policy.targetBytes - plan.floorBytes) / k);
    expect(share).toBeLessThan(SUMMARY_FLOOR_BYTES);
    expect(report.compaction).toMatchObject({ summaryAllowance: share, summaryMaxChars: share, summaryBytes: 4 * share });
    expect(report.compactions.map((c) => c.decision)).toEqual(['rejected']);
    expect(report.compaction.reason).toMatch(/^over_plan:/);
    expect(await checkpoints(runId)).toEqual([]);
    // The next call does not judge that answer again, and never sends that material again: its
    // candidate is a later boundary (the same first turn, and further).
    const again = await prepare(runId, { summarizer, policy });
    const first = again.report.compactions[0]!;
    expect(first.refused).toMatchObject({
      identityKey: report.compaction.candidate!.identityKey,
      summaryRequestId: report.compaction.summaryRequestId,
      reason: report.compaction.reason,
    });
    for (const c of again.report.compactions) expect(c.summaryRequestId).not.toBe(report.compaction.summaryRequestId);
    expect(first.candidate!.fromSeq).toBe(report.compaction.candidate!.fromSeq);
    expect(first.candidate!.toSeq).toBeGreaterThan(report.compaction.candidate!.toSeq);
    expect(first.decision).toBe('committed');
    expect(summarizer.calls).toHaveLength(1 + again.report.compactions.filter((c) => c.summaryRequestId !== null).length);
  });
});

describe('a Run whose floor is over the target', () => {
  it('sends nothing when the protected originals alone are over it, and says so', async () => {
    const { runId } = await buildRun(pool, LARGE);
    await recordCorrection({ pool, runId, scope, text: `USER-CANARY-CORRECTION ${'keep every word of this. '.repeat(2000)}` });
    const summarizer = recordingSummarizer();
    const { report } = await prepare(runId, { summarizer });
    expect(report.fits).toBe(false);
    expect(report.compaction).toMatchObject({ decision: 'skipped' });
    expect(report.compaction.reason).toMatch(/^insufficient_room: with all \d+ compactable group\(s\) summarized in \d+ checkpoint\(s\)/);
    expect(report.compaction.plan).toMatchObject({ reachable: false });
    expect(report.compaction.plan!.floor.protected).toBeGreaterThan(CHUNKED.targetBytes);
    const f = report.compaction.plan!.floor;
    expect(f.envelope + f.protected + f.summaries + f.work).toBe(report.compaction.plan!.floorBytes);
    expect(report.reason).toMatch(/over the threshold.*insufficient_room.*protected originals \d+/);
    expect(summarizer.calls).toHaveLength(0);
    expect(await receipts(runId)).toEqual([]);
  });

  it('keeps what a checkpoint says of its tool calls bounded, so many compacted calls still fit (issue 12, defect 7)', async () => {
    // 24 groups of 10 small tool units. Per-call references in each summary (about 126 bytes a
    // call) used to hold more than the target: insufficient_room, for ever.
    const { runId } = await buildRun(pool, {
      groups: 24,
      turnBytes: 1200,
      resultBytes: 40,
      unitsPerGroup: 10,
      settlement: (g, u) => (u === 3 ? 'failed' : u === 4 ? 'unknown' : 'settled'),
    });
    const summarizer = recordingSummarizer();
    const policy = { ...SMALL_POLICY, maxSummaryInputBytes: 12 * 1024 };
    const { report, request } = await prepare(runId, { summarizer, policy });
    expect(report.fits).toBe(true);
    expect(report.compactions.some((c) => c.decision === 'committed')).toBe(true);
    const items = request.messages.filter((m) => m.kind === 'checkpoint_summary');
    expect(items.length).toBeGreaterThan(0);
    for (const item of items) {
      if (item.kind !== 'checkpoint_summary') continue;
      expect(item.toolUnits).toBeGreaterThanOrEqual(10);
      // Bounded: counts, the first failed and unknown ids, and where to list the rest.
      expect(Buffer.byteLength(item.toolCalls)).toBeLessThan(700);
      expect(item.toolCalls).toMatch(/FAILED: tu_\d+_3/);
      expect(item.toolCalls).toMatch(/UNKNOWN \(effect unknown\): tu_\d+_4/);
      expect(item.toolCalls).toContain(`read_result {"checkpoint": ${item.segment}}`);
    }
  });
});
