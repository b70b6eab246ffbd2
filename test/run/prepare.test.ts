import { describe, expect, it } from 'vitest';
import { createOfflineSummarizer, OFFLINE_MODEL } from '../../src/gateway/offline.ts';
import { RUN_PROMPT_VERSION } from '../../src/gateway/prompts.ts';
import type { Outcome, SummaryRequest } from '../../src/support/summary-contract.ts';
import {
  measureRequest,
  prepareRunRequest,
  readResult,
  readRunBudget,
  recordCorrection,
  recordModelTurn,
  recordToolCall,
  recordToolResult,
  recoverRunContext,
  storeResult,
  toAnthropicRequest,
  type PrepareRunRequestOptions,
  type RunRequestItem,
} from '../../src/run/index.ts';
import { SUMMARY_BYTES_PER_CALL, SUMMARY_BYTES_PER_TURN, SUMMARY_FLOOR_BYTES } from '../../src/run/compaction-plan.ts';
import { createTestDatabase } from '../support/db.ts';
import { buildRun, forbiddenSummarizer, INPUT, ok, recordingSummarizer, SMALL_POLICY, prepareChecked } from './support/fixtures.ts';

const db = await createTestDatabase();
const pool = db.pool;
const scope = 'tenant-a';

function prepare(runId: string, extra: Partial<PrepareRunRequestOptions> = {}) {
  return prepareChecked({ pool, runId, scope, ...INPUT, policy: SMALL_POLICY, ...extra });
}

const kinds = (items: readonly RunRequestItem[]) => items.map((i) => i.kind);

async function checkpoints(runId: string) {
  const { rows } = await pool.query(`select * from sourcebound.run_checkpoints where run_id = $1 order by segment`, [runId]);
  return rows;
}

async function receipts(runId: string) {
  const { rows } = await pool.query(`select * from sourcebound.run_summary_requests where run_id = $1 order by dispatched_at, attempt`, [
    runId,
  ]);
  return rows;
}

describe('measuring the request', () => {
  it('builds the complete request and measures exactly its serialized bytes plus the reserve', async () => {
    const { runId } = await buildRun(pool, { groups: 2, turnBytes: 200, resultBytes: 300 });
    await recordCorrection({ pool, runId, scope, text: 'USER-CANARY-CORRECTION: only fund C' });
    await storeResult({ pool, runId, scope, content: 'a table', label: 'holdings' });
    const summarizer = forbiddenSummarizer();
    const { request, report } = await prepare(runId, { summarizer });
    expect(kinds(request.messages)).toEqual(['user_request', 'model_turn', 'tool_result', 'model_turn', 'tool_result', 'correction']);
    expect(request.model).toBe(INPUT.model);
    expect(request.system).toBe(INPUT.system);
    expect(request.tools).toEqual(INPUT.tools);
    expect(request.resultCatalog).toHaveLength(1);
    expect(report.bytes).toBe(measureRequest(request));
    // What is measured is the body sent to the provider (issue 12, defect 2), not the internal shape.
    expect(report.bytes).toBe(Buffer.byteLength(JSON.stringify(toAnthropicRequest(request))) + SMALL_POLICY.responseReserveBytes);
    expect(report.compaction.decision).toBe('not_needed');
    expect(report.fits).toBe(true);
    expect(summarizer.calls).toBe(0);
  });

  it('shows a pending tool call as pending, and an unknown one as unknown, never as completed', async () => {
    const { runId } = await buildRun(pool, {
      groups: 3,
      turnBytes: 100,
      resultBytes: 100,
      settlement: (g) => (g === 1 ? 'unknown' : g === 2 ? 'pending' : 'settled'),
    });
    const { request } = await prepare(runId);
    const statuses = request.messages.filter((m) => m.kind === 'tool_result').map((m) => m.kind === 'tool_result' && m.status);
    expect(statuses).toEqual(['settled', 'unknown', 'dispatched']);
  });
});

describe('reversible fitting', () => {
  it('shrinks the catalog, then replaces older rereadable bodies by references, keeping recent groups intact', async () => {
    const { runId, proposals } = await buildRun(pool, { groups: 8, turnBytes: 200, resultBytes: 4000 });
    for (let v = 0; v < 3; v++)
      await storeResult({
        pool,
        runId,
        scope,
        resultId: v === 0 ? undefined : (await storeResult({ pool, runId, scope, content: 'seed' })).resultId,
        content: `version ${v}`,
        label: 'L'.repeat(200),
      });
    const { request, report } = await prepare(runId, { summarizer: forbiddenSummarizer() });
    expect(report.steps.map((s) => s.step)).toEqual(['measure', 'shrink_catalog', 'reference_results']);
    expect(report.bytes).toBeLessThanOrEqual(SMALL_POLICY.targetBytes);
    expect(report.bytes).toBe(measureRequest(request));
    expect(report.catalog).toBe('compact');
    expect(report.compaction.decision).toBe('not_needed');
    // Oldest first; the two newest groups keep their bodies.
    const referenced = report.references.map((r) => r.proposalId);
    expect(referenced[0]).toBe(proposals[0]![0]);
    for (const recent of proposals.slice(-2).flat()) expect(referenced).not.toContain(recent);
    const units = request.messages.filter((m) => m.kind === 'tool_result');
    for (const u of units) {
      if (u.kind !== 'tool_result') continue;
      if (referenced.includes(u.proposalId)) {
        expect(u.body).toBeUndefined();
        // The reference rereads the exact body.
        const back = await readResult({ pool, runId, scope, resultId: u.reference!.resultId, version: u.reference!.version });
        expect(back.content).toMatch(new RegExp(`^RESULT-${u.proposalId}`));
        expect(back.sha256).toBe(u.reference!.sha256);
      } else {
        expect(u.body).toMatch(new RegExp(`^RESULT-${u.proposalId}`));
      }
    }
  });
});

describe('semantic compaction', () => {
  it('summarizes older settled work through the summarizer and commits an immutable checkpoint', async () => {
    const { runId, proposals } = await buildRun(pool, {
      groups: 12,
      turnBytes: 2500,
      resultBytes: 300,
      unitsPerGroup: 2,
      settlement: (g, u) => (g === 1 && u === 1 ? 'unknown' : g === 2 && u === 0 ? 'failed' : 'settled'),
    });
    await recordCorrection({ pool, runId, scope, text: 'USER-CANARY-CORRECTION-1' });
    const summarizer = recordingSummarizer();
    const { request, report } = await prepare(runId, { summarizer });
    expect(report.compaction).toMatchObject({ decision: 'committed', outcome: 'ok', attempt: 1, refused: null });
    expect(report.fits).toBe(true);
    expect(report.bytes).toBeLessThanOrEqual(SMALL_POLICY.targetBytes);
    expect(report.steps.at(-1)).toMatchObject({ step: 'compaction', bytesAfter: report.bytes });
    expect(summarizer.calls).toHaveLength(1);
    const call = summarizer.calls[0]!;
    expect(call.promptVersion).toBe(RUN_PROMPT_VERSION);
    expect(call.maxChars).toBe(report.compaction.summaryAllowance);
    expect(call.deadlineMs).toBe(120_000);
    expect(call.signal).toBeInstanceOf(AbortSignal);
    const material = call.items.map((i) => i.text).join('\n');
    expect(material).not.toMatch(/USER-CANARY/);
    // Failed and unknown effects are labelled as such.
    expect(call.items.find((i) => i.id === `tool:${proposals[1]![1]}`)!.text).toMatch(/UNKNOWN.*must not be described as completed/);
    expect(call.items.find((i) => i.id === `tool:${proposals[2]![0]}`)!.text).toMatch(/FAILED/);
    // The newest two groups are never candidates; a group's units always travel with it.
    const seqs = report.compaction.candidate!.seqs;
    expect(seqs.length).toBe(10);
    expect(call.items.filter((i) => i.id.startsWith('turn:')).map((i) => Number(i.id.slice(5)))).toEqual(seqs);
    expect(call.items.filter((i) => i.id.startsWith('tool:'))).toHaveLength(20);

    expect(kinds(request.messages)).toEqual([
      'user_request',
      'checkpoint_summary',
      'model_turn',
      'tool_result',
      'tool_result',
      'model_turn',
      'tool_result',
      'tool_result',
      'correction',
    ]);
    const summary = request.messages[1]!;
    expect(summary).toMatchObject({
      kind: 'checkpoint_summary',
      authoritative: false,
      segment: 1,
      fromSeq: seqs[0],
      toSeq: seqs.at(-1),
      text: 'Summary 1: 30 items, turn:' + seqs[0] + ', tool:tu_0_0, tool:tu_0_1.',
    });

    const [cp] = await checkpoints(runId);
    expect(cp).toMatchObject({
      id: report.compaction.checkpointId,
      scope,
      segment: 1,
      predecessor_id: null,
      correction_revision: 1,
      model_route: INPUT.model,
      summary_request_id: report.compaction.summaryRequestId,
      summary_model: 'test/recorder@1',
      prompt_version: 'run-compaction@2',
      summary: summary.kind === 'checkpoint_summary' ? summary.text : null,
      source_hash: report.compaction.candidate!.sourceHash,
    });
    expect(cp.compacted_seqs.map(Number)).toEqual(seqs);
    expect(cp.source_hashes).toHaveLength(10);
    expect(cp.tool_result_refs).toHaveLength(20);
    expect(cp.tool_result_refs[3]).toMatchObject({ proposalId: 'tu_1_1', settlement: 'unknown', resultId: null });

    // Immutable in the database.
    await expect(pool.query(`update sourcebound.run_checkpoints set summary = 'rewritten' where id = $1`, [cp.id])).rejects.toThrow(
      /immutable/,
    );
    await expect(pool.query(`delete from sourcebound.run_checkpoints where id = $1`, [cp.id])).rejects.toThrow(/cannot be deleted/);
    await expect(pool.query(`update sourcebound.run_summary_requests set status = 'unknown' where run_id = $1`, [runId])).rejects.toThrow(
      /immutable/,
    );

    // Cold recovery rebuilds exactly this request with no model call.
    const forbidden = forbiddenSummarizer();
    const recovered = await recoverRunContext({ pool, runId, scope, ...INPUT, policy: SMALL_POLICY });
    expect(recovered.request).toEqual(request);
    expect(recovered.report.receipts).toEqual([
      expect.objectContaining({ id: report.compaction.summaryRequestId, status: 'ok', checkpointId: cp.id }),
    ]);
    const next = await prepare(runId, { summarizer: forbidden });
    expect(next.request).toEqual(request);
    expect(next.report.compaction.decision).toBe('not_needed');
    expect(forbidden.calls).toBe(0);

    // Erasing the run erases its checkpoints (the only way).
    await pool.query('delete from sourcebound.runs where id = $1', [runId]);
    expect(await checkpoints(runId)).toEqual([]);
  });

  it('chains checkpoints over fresh, non-overlapping ranges and never feeds a summary back', async () => {
    const { runId } = await buildRun(pool, { groups: 12, turnBytes: 2500, resultBytes: 100 });
    const summarizer = recordingSummarizer((req, n) => ok(`SUMMARY-CANARY-${n} of ${req.items.length} items`));
    // The canaries are invented identifiers: recorded by the grounding check (flag), not rejected.
    const first = await prepare(runId, { summarizer, policy: { ...SMALL_POLICY, grounding: 'flag' } });
    expect(first.report.compaction.decision).toBe('committed');
    const r = { next: 0 };
    for (let g = 0; g < 10; g++) {
      await recordModelTurn({
        pool,
        runId,
        scope,
        text: `MODEL-TURN-late-${g} ` + 'w'.repeat(2500),
        toolCalls: [{ id: `late_${g}`, name: 'search', input: {} }],
      });
      await recordToolCall({ pool, runId, scope, proposalId: `late_${g}`, dispatchId: `d-late-${g}` });
      await recordToolResult({ pool, runId, scope, proposalId: `late_${g}`, settlement: 'settled', content: `late result ${r.next++}` });
    }
    const second = await prepare(runId, { summarizer, policy: { ...SMALL_POLICY, grounding: 'flag' } });
    expect(second.report.compaction.decision).toBe('committed');
    expect(summarizer.calls).toHaveLength(2);
    expect(summarizer.calls[1]!.items.map((i) => i.text).join('\n')).not.toMatch(/SUMMARY-CANARY|USER-CANARY/);
    const cps = await checkpoints(runId);
    expect(cps.map((c) => c.segment)).toEqual([1, 2]);
    expect(cps[1].predecessor_id).toBe(cps[0].id);
    expect(Number(cps[1].from_seq)).toBeGreaterThan(Number(cps[0].to_seq));
    expect(kinds(second.request.messages).slice(0, 3)).toEqual(['user_request', 'checkpoint_summary', 'checkpoint_summary']);
    // The database refuses an overlapping or out-of-chain checkpoint.
    await expect(
      pool.query(
        `insert into sourcebound.run_checkpoints (run_id, conversation_id, scope, segment, predecessor_id, correction_revision, model_route, from_seq, to_seq, compacted_seqs, source_hashes, source_hash, hash_version, tool_result_refs, summary_request_id, summary_model, prompt_version, summary, summary_bytes)
       select run_id, conversation_id, scope, 3, id, 0, 'm', from_seq, to_seq, compacted_seqs, source_hashes, source_hash, 1, '[]', summary_request_id, 'm', prompt_version, summary, summary_bytes
       from sourcebound.run_checkpoints where id = $1`,
        [cps[1].id],
      ),
    ).rejects.toThrow(/overlaps/);
  });

  it('rejects a summary that fails the net-benefit gate, keeps the original, records why, and never judges it again', async () => {
    // The room: a twin Run (the same bytes) shows the floor of its one-checkpoint plan; this Run's
    // target leaves 1,000 bytes above it. The summary is allowed 512 bytes (the work it replaces,
    // 10 calls in 10 turns, is at SUMMARY_FLOOR_BYTES) and the summarizer writes exactly the 512
    // characters it is told, each 3 bytes: 1,536 bytes, over the room, so the gate refuses it.
    const shape = { groups: 12, turnBytes: 2500, resultBytes: 100 } as const;
    const twin = await buildRun(pool, shape);
    const probe = await prepare(twin.runId, { summarizer: recordingSummarizer() });
    const twinPlan = probe.report.compactions[0]!.plan!;
    expect(twinPlan.checkpoints).toBe(1);
    const policy = { ...SMALL_POLICY, summaryCapBytes: 50_000, targetBytes: twinPlan.floorBytes + 1000 };
    expect(policy.targetBytes).toBeLessThan(SMALL_POLICY.thresholdBytes);

    const { runId } = await buildRun(pool, shape);
    const summarizer = recordingSummarizer((req) => ok('基'.repeat(req.maxChars!)));
    const before = await prepare(runId, { summarizer, policy });
    expect(before.report.compaction).toMatchObject({
      decision: 'rejected',
      outcome: 'ok',
      summaryAllowance: SUMMARY_FLOOR_BYTES,
      summaryMaxChars: SUMMARY_FLOOR_BYTES,
      summaryBytes: 3 * SUMMARY_FLOOR_BYTES,
    });
    // The room this Run's plan leaves: more than the allowance, less than the summary.
    const plan = before.report.compaction.plan!;
    expect(plan.checkpoints).toBe(1);
    expect(policy.targetBytes - plan.floorBytes).toBeGreaterThan(SUMMARY_FLOOR_BYTES);
    expect(policy.targetBytes - plan.floorBytes).toBeLessThan(3 * SUMMARY_FLOOR_BYTES);
    expect(before.report.compaction.reason).toBe(`over_target:${before.report.compaction.bytesWithSummary}>${policy.targetBytes}`);
    expect(before.report.compaction.bytesWithSummary).toBeGreaterThan(policy.targetBytes);
    expect(before.report.fits).toBe(false);
    expect(before.report.reason).toMatch(/compaction rejected/);
    expect(kinds(before.request.messages)).not.toContain('checkpoint_summary');
    expect(await checkpoints(runId)).toEqual([]);
    const [receipt] = await receipts(runId);
    expect(receipt).toMatchObject({ status: 'ok', spent: true, attempt: 1, reason: before.report.compaction.reason });
    // Again: the stored answer is not judged again, and that material is never sent again. Every
    // compactable group is in it: no later boundary yet, so nothing is sent, and the report says why.
    const again = await prepare(runId, { summarizer, policy });
    expect(again.report.compaction).toMatchObject({
      decision: 'skipped',
      summaryRequestId: null,
      refused: {
        identityKey: before.report.compaction.candidate!.identityKey,
        summaryRequestId: receipt.id,
        summaryBytes: 3 * SUMMARY_FLOOR_BYTES,
        reason: before.report.compaction.reason,
      },
    });
    expect(again.report.compaction.reason).toMatch(
      new RegExp(`^refused:${before.report.compaction.candidate!.identityKey}: .*never sent again`),
    );
    expect(summarizer.calls).toHaveLength(1);
  });

  it('allows a summary only as many bytes as the work it replaces, however much room there is (issue 12, 10,000 calls)', async () => {
    // Room and cap far above it: the allowance is 6 B a tool call + 12 B a turn, at least 512 B.
    const policy = { ...SMALL_POLICY, summaryCapBytes: 50_000 };
    const summarizer = recordingSummarizer(() => ok('Earlier searches and their results.'));
    const small = await buildRun(pool, { groups: 12, turnBytes: 2500, resultBytes: 100 });
    const a = await prepare(small.runId, { summarizer, policy });
    expect(a.report.compaction.candidate).toMatchObject({ seqs: expect.any(Array), toolUnits: 10 });
    expect(a.report.compaction).toMatchObject({ decision: 'committed', summaryAllowance: SUMMARY_FLOOR_BYTES });
    const many = await buildRun(pool, { groups: 12, turnBytes: 1500, resultBytes: 40, unitsPerGroup: 12 });
    const b = await prepare(many.runId, { summarizer, policy });
    const c = b.report.compaction.candidate!;
    expect(c.toolUnits).toBe(12 * c.seqs.length);
    expect(b.report.compaction).toMatchObject({
      decision: 'committed',
      summaryAllowance: SUMMARY_BYTES_PER_CALL * c.toolUnits + SUMMARY_BYTES_PER_TURN * c.seqs.length,
    });
    expect(b.report.compaction.summaryAllowance).toBeGreaterThan(SUMMARY_FLOOR_BYTES);
  });

  it('does not compact when the finalization reserve would be touched', async () => {
    const { runId } = await buildRun(pool, { groups: 12, turnBytes: 2500, resultBytes: 100, budget: { requests: 1 } });
    const summarizer = recordingSummarizer();
    const { report } = await prepare(runId, { summarizer });
    expect(report.compaction).toMatchObject({ decision: 'skipped', reason: 'finalization_reserve' });
    expect(summarizer.calls).toHaveLength(0);
    expect(await receipts(runId)).toEqual([]);
    expect(await readRunBudget({ pool, runId, scope })).toMatchObject({ requestsReserved: 0, tokensReserved: 0, requestsUsed: 0 });
    // With a bigger reserve asked of a bigger budget, the same rule.
    const big = await buildRun(pool, { groups: 12, turnBytes: 2500, resultBytes: 100, budget: { requests: 5, tokens: 1_000_000 } });
    const refused = await prepare(big.runId, { summarizer, budget: { finalizationRequests: 4, finalizationTokens: 999_000 } });
    expect(refused.report.compaction.reason).toBe('finalization_reserve');
    const allowed = await prepare(big.runId, {
      summarizer,
      budget: { finalizationRequests: 4, finalizationTokens: 1000, summaryTokens: 5000 },
    });
    expect(allowed.report.compaction.decision).toBe('committed');
    // Reserved before dispatch, settled after: the provider's usage is what is charged.
    expect(await readRunBudget({ pool, runId: big.runId, scope })).toMatchObject({
      requestsUsed: 1,
      tokensUsed: 120,
      requestsReserved: 0,
      tokensReserved: 0,
    });
  });

  it('settles every outcome against the budget: deferred and config cost nothing, unknown costs its reservation', async () => {
    const outcomes: Outcome[] = [
      { kind: 'deferred', reason: 'overloaded', retryAfterMs: null },
      { kind: 'config', reason: 'no key', status: 401 },
      { kind: 'invalid', reason: 'tool_use', model: 'm', usage: { inputTokens: 10, outputTokens: 5 }, requestId: 'r1' },
    ];
    const { runId } = await buildRun(pool, { groups: 12, turnBytes: 2500, resultBytes: 100, budget: { requests: 20, tokens: 1_000_000 } });
    const summarizer = recordingSummarizer((_, n) => outcomes[n - 1]!);
    for (const o of outcomes) {
      const { report } = await prepare(runId, { summarizer, budget: { summaryTokens: 777 } });
      expect(report.compaction).toMatchObject({ decision: 'failed', outcome: o.kind });
    }
    expect((await receipts(runId)).map((r) => [r.status, r.spent])).toEqual([
      ['deferred', false],
      ['config', false],
      ['invalid', true],
    ]);
    expect(await readRunBudget({ pool, runId, scope })).toMatchObject({
      requestsUsed: 1,
      tokensUsed: 15,
      requestsReserved: 0,
      tokensReserved: 0,
    });
  });

  it('keeps an unknown outcome unknown: one more attempt under the same identity, never a third, and the database refuses one', async () => {
    const { runId } = await buildRun(pool, { groups: 12, turnBytes: 2500, resultBytes: 100, budget: { requests: 50, tokens: 1_000_000 } });
    const summarizer = recordingSummarizer((_req, n) =>
      n <= 2 ? { kind: 'unknown', reason: 'connection cut after send', requestId: null } : ok(`Healthy summary ${n}.`),
    );
    const a = await prepare(runId, { summarizer, budget: { summaryTokens: 1000 } });
    expect(a.report.compaction).toMatchObject({ decision: 'failed', outcome: 'unknown', attempt: 1 });
    // More work arrives: the candidate would grow, but the unknown dispatch pins its identity.
    await recordModelTurn({ pool, runId, scope, text: 'x'.repeat(2500), toolCalls: [{ id: 'more', name: 's', input: {} }] });
    await recordToolResult({ pool, runId, scope, proposalId: 'more', dispatchId: 'd-more', settlement: 'settled', content: 'r' });
    const b = await prepare(runId, { summarizer, budget: { summaryTokens: 1000 } });
    expect(b.report.compaction).toMatchObject({ decision: 'failed', outcome: 'unknown', attempt: 2 });
    expect(b.report.compaction.candidate!.identityKey).toBe(a.report.compaction.candidate!.identityKey);
    const rs = await receipts(runId);
    expect(rs.map((r) => [r.status, r.attempt, r.identity_key === rs[0].identity_key])).toEqual([
      ['unknown', 1, true],
      ['unknown', 2, true],
    ]);
    // Each unknown is charged its whole reservation.
    expect(await readRunBudget({ pool, runId, scope })).toMatchObject({ requestsUsed: 2, tokensUsed: 2000, requestsReserved: 0 });
    // The database itself refuses a third dispatch of that identity.
    await expect(
      pool.query(
        `insert into sourcebound.run_summary_requests (run_id, conversation_id, scope, identity_key, attempt, from_seq, to_seq, compacted_seqs, source_hash, hash_version, model, prompt_version, max_chars, input_bytes, reserved_requests, reserved_tokens, lease_expires_at)
       select run_id, conversation_id, scope, identity_key, 3, from_seq, to_seq, compacted_seqs, source_hash, 1, model, prompt_version, 1, 1, 0, 0, now() from sourcebound.run_summary_requests where id = $1`,
        [rs[0].id],
      ),
    ).rejects.toThrow(/two attempts/);
  });

  it('makes progress after two unknown outcomes: never that material again, a later boundary once the run grows (issue 12, defect 6)', async () => {
    const { runId } = await buildRun(pool, { groups: 12, turnBytes: 2500, resultBytes: 100 });
    const summarizer = recordingSummarizer((_req, n) =>
      n <= 2 ? { kind: 'unknown', reason: 'HTTP 500 after send', requestId: null } : ok(`Healthy summary ${n}.`),
    );
    const a = await prepare(runId, { summarizer });
    const b = await prepare(runId, { summarizer });
    expect([a.report.compaction.attempt, b.report.compaction.attempt]).toEqual([1, 2]);
    const exhausted = a.report.compaction.candidate!;
    // The provider is healthy again, but the run has not grown: that material is never sent again.
    const c = await prepare(runId, { summarizer });
    expect(c.report.compaction).toMatchObject({
      decision: 'skipped',
      exhausted: {
        identityKey: exhausted.identityKey,
        attempts: 2,
        lastOutcome: 'unknown',
        fromSeq: exhausted.fromSeq,
        toSeq: exhausted.toSeq,
      },
    });
    expect(c.report.compaction.reason).toMatch(new RegExp(`^exhausted:${exhausted.identityKey}: .*never sent again`));
    expect(summarizer.calls).toHaveLength(2);
    // The run grows: a later boundary (the same groups and the next) is different material.
    await recordModelTurn({ pool, runId, scope, text: 'y'.repeat(2500), toolCalls: [{ id: 'more', name: 's', input: {} }] });
    await recordToolResult({ pool, runId, scope, proposalId: 'more', dispatchId: 'd-more', settlement: 'settled', content: 'r' });
    const d = await prepare(runId, { summarizer });
    expect(d.report.compaction).toMatchObject({ decision: 'committed', attempt: 1, exhausted: { identityKey: exhausted.identityKey } });
    expect(d.report.compaction.candidate!.fromSeq).toBe(exhausted.fromSeq);
    expect(d.report.compaction.candidate!.toSeq).toBeGreaterThan(exhausted.toSeq);
    expect(d.report.fits).toBe(true);
    expect(summarizer.calls).toHaveLength(3);
    const rs = await receipts(runId);
    expect(rs.filter((r) => r.identity_key === exhausted.identityKey)).toHaveLength(2);
  });

  it('bounds the summary request by its deadline and by cancellation: both are unknown outcomes', async () => {
    const hang = recordingSummarizer(() => new Promise<Outcome>(() => {}));
    const one = await buildRun(pool, { groups: 12, turnBytes: 2500, resultBytes: 100 });
    const timed = await prepare(one.runId, { summarizer: hang, policy: { ...SMALL_POLICY, summaryDeadlineMs: 30 } });
    expect(timed.report.compaction).toMatchObject({ decision: 'failed', outcome: 'unknown', reason: 'deadline_exceeded:30ms' });
    expect(hang.calls[0]!.signal!.aborted).toBe(true);

    const two = await buildRun(pool, { groups: 12, turnBytes: 2500, resultBytes: 100 });
    const controller = new AbortController();
    const cancelling = recordingSummarizer(() => {
      controller.abort();
      return new Promise<Outcome>(() => {});
    });
    const cancelled = await prepare(two.runId, { summarizer: cancelling, signal: controller.signal });
    expect(cancelled.report.compaction).toMatchObject({ decision: 'failed', outcome: 'unknown', reason: 'cancelled_after_send' });
    // Aborted before anything was sent: no receipt, no call.
    const none = recordingSummarizer();
    const skipped = await prepare(two.runId, { summarizer: none, signal: AbortSignal.abort() });
    expect(skipped.report.compaction.decision).toBe('skipped');
    expect(none.calls).toHaveLength(0);
  });

  it('serializes concurrent preparers: one summary request, the other reports it in flight', async () => {
    const { runId } = await buildRun(pool, { groups: 12, turnBytes: 2500, resultBytes: 100 });
    let release!: (o: Outcome) => void;
    let entered!: () => void;
    const inCall = new Promise<void>((r) => (entered = r));
    const summarizer = recordingSummarizer(() => {
      entered();
      return new Promise<Outcome>((r) => (release = r));
    });
    const first = prepare(runId, { summarizer });
    await inCall;
    const second = await prepare(runId, { summarizer });
    expect(second.report.compaction).toMatchObject({ decision: 'skipped', reason: 'summary_in_flight' });
    release(ok('the summary'));
    expect((await first).report.compaction.decision).toBe('committed');
    expect(summarizer.calls).toHaveLength(1);
    const many = await Promise.all(Array.from({ length: 5 }, () => prepare(runId, { summarizer })));
    expect(many.every((m) => m.report.compaction.decision === 'not_needed')).toBe(true);
  });

  it('reports busy when another preparer holds the run lock, and still returns the request from records', async () => {
    const { runId } = await buildRun(pool, { groups: 12, turnBytes: 2500, resultBytes: 100 });
    const holder = await pool.connect();
    try {
      await holder.query('begin');
      await holder.query('select pg_advisory_xact_lock(74205, hashtext($1))', [runId]);
      const summarizer = recordingSummarizer();
      const { request, report } = await prepare(runId, { summarizer });
      expect(report.compaction).toMatchObject({ decision: 'skipped', reason: 'busy: another preparer holds the run' });
      expect(report.bytes).toBe(measureRequest(request));
      expect(summarizer.calls).toHaveLength(0);
    } finally {
      await holder.query('commit');
      holder.release();
    }
  });

  it('refuses a run of another scope and an unusable policy', async () => {
    const { runId } = await buildRun(pool, { groups: 1, turnBytes: 10, resultBytes: 10 });
    await expect(prepareChecked({ pool, runId, scope: 'tenant-b', ...INPUT })).rejects.toThrow(/not found in scope/);
    await expect(recoverRunContext({ pool, runId, scope: 'tenant-b', ...INPUT })).rejects.toThrow(/not found in scope/);
    await expect(prepare(runId, { policy: { targetBytes: 10, thresholdBytes: 5 } })).rejects.toThrow(/must not exceed/);
    await expect(prepare(runId, { policy: { maxAttempts: 3 } })).rejects.toThrow(/maxAttempts/);
  });

  it('never compacts past unsettled work, nor the most recent groups', async () => {
    const { runId } = await buildRun(pool, {
      groups: 12,
      turnBytes: 2500,
      resultBytes: 100,
      settlement: (g) => (g === 0 ? 'pending' : 'settled'),
    });
    const summarizer = recordingSummarizer();
    const blocked = await prepare(runId, { summarizer });
    expect(blocked.report.compaction).toMatchObject({ decision: 'skipped' });
    expect(blocked.report.compaction.reason).toMatch(/^open_tool_unit:/);
    expect(blocked.report.fits).toBe(false);
    expect(blocked.report.reason).toMatch(/over the threshold.*open_tool_unit/);
    const recent = await buildRun(pool, { groups: 2, turnBytes: 14000, resultBytes: 100 });
    const onlyRecent = await prepare(recent.runId, { summarizer });
    expect(onlyRecent.report.compaction.reason).toBe('only_recent_work');
    expect(summarizer.calls).toHaveLength(0);
  });

  it('stops new checkpoints when disabled and keeps using committed ones', async () => {
    const { runId } = await buildRun(pool, { groups: 12, turnBytes: 2500, resultBytes: 100 });
    const summarizer = recordingSummarizer();
    const committed = await prepare(runId, { summarizer });
    expect(committed.report.compaction.decision).toBe('committed');
    for (let g = 0; g < 10; g++) await recordModelTurn({ pool, runId, scope, text: 'y'.repeat(2500) });
    const disabled = await prepare(runId, { summarizer, policy: { ...SMALL_POLICY, enabled: false } });
    expect(disabled.report.compaction.decision).toBe('disabled');
    expect(disabled.report.checkpointsUsed).toEqual([committed.report.compaction.checkpointId]);
    expect(kinds(disabled.request.messages)[1]).toBe('checkpoint_summary');
    expect(summarizer.calls).toHaveLength(1);
  });
});

describe('summary text hygiene', () => {
  it('stores a summary with a lone surrogate as U+FFFD so recovery matches, and refuses a NUL', async () => {
    const { runId } = await buildRun(pool, { groups: 12, turnBytes: 2500, resultBytes: 100 });
    const lone = await prepare(runId, { summarizer: recordingSummarizer(() => ok('half a pair: \ud83d end')) });
    expect(lone.report.compaction.decision).toBe('committed');
    const recovered = await recoverRunContext({ pool, runId, scope, ...INPUT, policy: SMALL_POLICY });
    expect(recovered.request).toEqual(lone.request);
    expect(lone.request.messages[1]).toMatchObject({ text: 'half a pair: \ufffd end' });
    const other = await buildRun(pool, { groups: 12, turnBytes: 2500, resultBytes: 100 });
    const nul = await prepare(other.runId, { summarizer: recordingSummarizer(() => ok('a\u0000b')) });
    expect(nul.report.compaction).toMatchObject({ decision: 'failed', outcome: 'invalid', reason: 'contract:unstorable_text:U+0000' });
  });

  it('refuses a summary of invisible characters only, as the gateway does (a summarizer used without it)', async () => {
    const { runId } = await buildRun(pool, { groups: 12, turnBytes: 2500, resultBytes: 100 });
    const blank = await prepare(runId, { summarizer: recordingSummarizer(() => ok('\u200b\u2060\ufeff\u3164\u2800')) });
    expect(blank.report.compaction).toMatchObject({ decision: 'failed', outcome: 'invalid', reason: 'contract:empty_text' });
  });
});

describe('hooks', () => {
  it('observe a frozen report; a hook that throws or mutates changes nothing', async () => {
    const seen: string[] = [];
    const results = [];
    for (const variant of ['none', 'hostile'] as const) {
      const { runId } = await buildRun(pool, { groups: 12, turnBytes: 2500, resultBytes: 100, request: 'same request' });
      const summarizer = recordingSummarizer((req) => ok(`summary of ${req.items.length} items`));
      const hooks =
        variant === 'none'
          ? undefined
          : {
              onBeforeCompaction: (o: any) => {
                seen.push(`before:${o.compaction.decision}`);
                expect(Object.isFrozen(o.compaction.candidate.seqs)).toBe(true);
                o.compaction.candidate.seqs.push(999_999); // throws: frozen
              },
              onAfterCompaction: async (o: any) => {
                seen.push(`after:${o.compaction.decision}`);
                try {
                  o.compaction.decision = 'rejected';
                } catch {
                  seen.push('mutation refused');
                }
                throw new Error('hook failure');
              },
            };
      const { request, report } = await prepare(runId, { summarizer, hooks });
      results.push({ request, report, inputs: summarizer.calls.map((c) => c.items.map((i) => i.text)), cps: await checkpoints(runId) });
    }
    const [plain, hostile] = results;
    expect(seen).toEqual(['before:pending', 'after:committed', 'mutation refused']);
    expect(hostile!.report.hookErrors).toHaveLength(2);
    expect(hostile!.report.compaction.decision).toBe('committed');
    expect(hostile!.report.compaction.candidate!.seqs).toHaveLength(plain!.report.compaction.candidate!.seqs.length);
    expect(hostile!.inputs.map((i) => i.length)).toEqual(plain!.inputs.map((i) => i.length));
    expect(hostile!.cps[0].summary).toBe(plain!.cps[0].summary);
    expect(hostile!.report.bytes).toBe(plain!.report.bytes);
  });
});

describe('with the offline summarizer of the gateway', () => {
  it('commits a checkpoint whose model identity is the offline one', async () => {
    const { runId } = await buildRun(pool, { groups: 12, turnBytes: 2500, resultBytes: 100 });
    const { report, request } = await prepare(runId, { summarizer: createOfflineSummarizer({ maxChars: 6000 }) });
    expect(report.compaction.reason).toBeNull();
    expect(report.compaction.decision).toBe('committed');
    const [cp] = await checkpoints(runId);
    expect(cp.summary_model).toBe(OFFLINE_MODEL);
    expect(cp.summary).not.toMatch(/USER-CANARY/);
    expect(report.bytes).toBe(measureRequest(request));
  });
});

export type { SummaryRequest };
