import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { Outcome, SummaryRequest } from '../../src/support/summary-contract.ts';
import {
  measureRequest,
  prepareRunRequest,
  recordCorrection,
  recordModelTurn,
  recordToolCall,
  recordToolResult,
  recoverRunContext,
  startRun,
  storeResult,
  type CheckpointSummaryItem,
  type PreparedRunRequest,
  type ResultMeta,
  type RunRequest,
  type RunRequestItem,
} from '../../src/run/index.ts';
import { summaryNote } from '../../src/run/checkpoint-item.ts';
import { createTestDatabase } from '../support/db.ts';
import {
  createConversation,
  filler,
  INPUT,
  ok,
  prng,
  recordingSummarizer,
  SMALL_POLICY,
  type Prng,
  prepareChecked,
} from './support/fixtures.ts';

/**
 * Property-based tests over generated Run histories. Each seed generates a
 * history (request, corrections, model turns with 0-3 tool calls, settled /
 * failed / unknown / pending effects, large and small results, externalized
 * results and versions) and runs the agent loop against it, calling
 * prepareRunRequest at random points. Every call is checked against the
 * invariants below. Canary strings mark user text and summaries, so a leak
 * into summarizer input is visible.
 */
const SEEDS = Number(process.env.RUN_PROPERTY_SEEDS ?? 200);
const CHUNKED_SEEDS = Math.max(8, Math.round(SEEDS / 2));
const PARALLEL = 8;

const db = await createTestDatabase();
const pool = db.pool;
const scope = 'prop';

type Behaviour = 'reliable' | 'flaky';
/**
 * `one`: SMALL_POLICY, whose summarizer input is never the limit (one summary covers any candidate).
 * `chunked`: a small summarizer input, so one summary covers a few groups and a call may make several
 * checkpoints along a plan (the flaky summarizer also with a small per-call limit).
 */
type Variant = 'one' | 'chunked';

interface Model {
  seed: number;
  runId: string;
  variant: Variant;
  policy: Omit<typeof SMALL_POLICY, 'keepRecentGroups' | 'maxSummaryInputBytes'> & {
    keepRecentGroups: number;
    maxSummaryInputBytes: number;
    maxSummariesPerPrepare?: number;
    grounding: 'flag';
  };
  protectedTexts: string[];
  /** proposal id -> settlement status now */
  units: Map<string, 'dispatched' | 'settled' | 'failed' | 'unknown'>;
  modelSeqs: number[];
  calls: { request: SummaryRequest; pending: Set<string> }[];
  externals: ResultMeta[];
  failures: string[];
  /** The last prepared request (nothing is recorded after it): recovery must rebuild it. */
  last: (PreparedRunRequest & { request: RunRequest }) | null;
}

async function generate(seed: number, behaviour: Behaviour, variant: Variant = 'one'): Promise<Model> {
  const r = prng(seed * 1_000_003 + (behaviour === 'flaky' ? 17 : 0) + (variant === 'chunked' ? 31 : 0));
  // The summaries carry invented canaries (SUMMARY-CANARY-seed-n): recorded by the grounding check, not rejected.
  const policy: Model['policy'] = { ...SMALL_POLICY, keepRecentGroups: r.int(1, 3), grounding: 'flag' };
  if (variant === 'chunked') {
    policy.maxSummaryInputBytes = r.int(3, 12) * 1024;
    // The reliable runs must finish their plans in one call (the oracle below expects it).
    policy.maxSummariesPerPrepare = behaviour === 'reliable' ? 64 : r.int(1, 4);
  }
  const conversationId = await createConversation(pool, scope);
  const requestText = filler(r, r.int(20, 1500), `USER-CANARY-REQ-${seed}`);
  const { runId } = await startRun({ pool, scope, conversationId, request: requestText });
  const m: Model = {
    seed,
    runId,
    variant,
    policy,
    protectedTexts: [requestText],
    units: new Map(),
    modelSeqs: [],
    calls: [],
    externals: [],
    failures: [],
    last: null,
  };
  const summarizer = recordingSummarizer((request, n) => {
    m.calls.push({ request, pending: new Set([...m.units].filter(([, s]) => s === 'dispatched').map(([id]) => id)) });
    return reply(behaviour, r, request, seed, n);
  });

  const groups = r.int(3, 20);
  for (let g = 0; g < groups; g++) {
    if (r.chance(0.15)) {
      const text = filler(r, r.int(5, 800), `USER-CANARY-COR-${seed}-${m.protectedTexts.length}`);
      await recordCorrection({ pool, runId, scope, text });
      m.protectedTexts.push(text);
    }
    if (r.chance(0.1)) {
      const previous = m.externals.length > 0 && r.chance(0.5) ? r.pick(m.externals).resultId : undefined;
      m.externals.push(
        await storeResult({ pool, runId, scope, resultId: previous, content: filler(r, r.int(100, 6000)), label: `doc ${g}` }),
      );
    }
    // Pending effects settle later, sometimes.
    for (const [id, s] of m.units) {
      if (s === 'dispatched' && r.chance(0.4)) await settle(m, r, id, r.chance(0.7) ? 'settled' : 'unknown');
    }
    const ids = Array.from({ length: r.int(0, 3) }, (_, u) => `p${g}_${u}`);
    const { seq } = await recordModelTurn({
      pool,
      runId,
      scope,
      text: filler(r, r.int(0, 3000), `MODEL-${g}`),
      toolCalls: ids.map((id) => ({ id, name: r.pick(['search', 'read', 'calc']), input: { q: filler(r, r.int(1, 60)) } })),
    });
    m.modelSeqs.push(seq);
    for (const id of ids) {
      m.units.set(id, 'dispatched');
      const roll = r.next();
      // The dispatch is recorded on its own, or together with the settlement.
      if (roll < 0.05 || r.chance(0.5)) await recordToolCall({ pool, runId, scope, proposalId: id, dispatchId: `d-${id}` });
      if (roll < 0.05) continue; // pending for now
      await settle(m, r, id, roll < 0.8 ? 'settled' : roll < 0.9 ? 'failed' : 'unknown');
    }
    if (r.chance(0.35) || g === groups - 1) {
      const prepared = await prepareChecked({ pool, runId, scope, ...INPUT, policy, summarizer, budget: { finalizationRequests: 0 } });
      await check(m, prepared, behaviour);
      m.last = prepared;
    }
  }
  await checkFinal(m, behaviour);
  return m;
}

async function settle(m: Model, r: Prng, id: string, s: 'settled' | 'failed' | 'unknown') {
  const big = r.next();
  const size = big < 0.7 ? r.int(20, 1500) : big < 0.95 ? r.int(2000, 9000) : r.int(10_000, 20_000);
  if (s === 'settled' && m.externals.length > 0 && r.chance(0.1)) {
    await recordToolResult({
      pool,
      runId: m.runId,
      scope,
      proposalId: id,
      dispatchId: `d-${id}`,
      settlement: 'settled',
      resultRef: r.pick(m.externals),
    });
  } else {
    await recordToolResult({
      pool,
      runId: m.runId,
      scope,
      proposalId: id,
      dispatchId: `d-${id}`,
      settlement: s,
      content: s === 'unknown' ? undefined : filler(r, size, `RESULT-${id}`),
      error: s === 'settled' ? undefined : `${s}: upstream said no`,
    });
  }
  m.units.set(id, s);
}

function reply(behaviour: Behaviour, r: Prng, request: SummaryRequest, seed: number, n: number): Outcome {
  const text = `SUMMARY-CANARY-${seed}-${n} ` + 'w'.repeat(r.int(10, 80));
  const fit = text.slice(0, request.maxChars);
  if (behaviour === 'reliable') return ok(fit);
  const roll = r.next();
  if (roll < 0.55) return ok(fit);
  if (roll < 0.65) return { kind: 'invalid', reason: 'tool_use', model: 'test/recorder@1', usage: null, requestId: null };
  if (roll < 0.8) return { kind: 'unknown', reason: 'connection cut', requestId: null };
  if (roll < 0.9) return { kind: 'deferred', reason: 'overloaded', retryAfterMs: null };
  return ok('長'.repeat(request.maxChars!)); // within maxChars, maybe over the byte room or the cap
}

export const STATS = { prepares: 0, nonFitting: 0, committed: 0, referenced: 0, oracleChecked: 0 };

async function check(m: Model, { request, report }: PreparedRunRequest & { request: RunRequest }, behaviour: Behaviour): Promise<void> {
  const fail = (what: string) => m.failures.push(`seed ${m.seed} (${behaviour}): ${what}`);
  const { policy } = m;

  // The measure is exact.
  if (report.bytes !== measureRequest(request)) fail(`measured ${report.bytes} != ${measureRequest(request)}`);

  // Every protected original, verbatim and in order.
  const protectedItems = request.messages.filter((i) => i.kind === 'user_request' || i.kind === 'correction');
  if (JSON.stringify(protectedItems.map((i) => i.text)) !== JSON.stringify(m.protectedTexts))
    fail('protected originals differ from what was recorded');
  const revisions = protectedItems.map((i) => (i.kind === 'correction' ? i.revision : 0));
  if (revisions.some((rev, i) => rev !== i)) fail(`revisions out of order: ${revisions}`);

  // No tool unit is ever split: each model turn is followed by exactly its own units.
  const visibleTurns = new Set<number>();
  for (let i = 0; i < request.messages.length; i++) {
    const item = request.messages[i]!;
    if (item.kind === 'tool_result') {
      fail(`tool_result ${item.proposalId} without its model turn`);
      continue;
    }
    if (item.kind !== 'model_turn') continue;
    visibleTurns.add(item.seq);
    for (const [k, call] of item.toolCalls.entries()) {
      const unit = request.messages[i + 1 + k];
      if (unit?.kind !== 'tool_result' || unit.proposalId !== call.id || unit.seq !== item.seq)
        fail(`unit ${call.id} separated from its call`);
    }
    i += item.toolCalls.length;
  }
  const { rows: cps } = await pool.query(
    `select id, segment, from_seq::float8 as f, to_seq::float8 as t, compacted_seqs::float8[] as seqs from sourcebound.run_checkpoints where run_id = $1 order by segment`,
    [m.runId],
  );
  const compacted = new Set<number>(cps.flatMap((c) => c.seqs));
  for (const seq of m.modelSeqs) {
    if (visibleTurns.has(seq) === compacted.has(seq))
      fail(`model turn ${seq} is ${visibleTurns.has(seq) ? 'both shown and compacted' : 'lost'}`);
  }
  const summaries = request.messages.filter((i): i is CheckpointSummaryItem => i.kind === 'checkpoint_summary');
  if (summaries.map((s) => s.checkpointId).join() !== cps.map((c) => c.id).join())
    fail('summaries shown differ from committed checkpoints');

  // The newest groups are intact: never compacted, never referenced.
  const recent = m.modelSeqs.slice(-policy.keepRecentGroups);
  for (const seq of recent) if (compacted.has(seq)) fail(`recent turn ${seq} compacted`);
  for (const item of request.messages) {
    if (
      item.kind === 'tool_result' &&
      recent.includes(item.seq) &&
      item.reference &&
      item.body === undefined &&
      m.units.get(item.proposalId) !== undefined
    ) {
      const externalized = m.externals.some((e) => e.resultId === item.reference!.resultId);
      // Fitting reaches into the newest groups only after every older body is a reference.
      if (
        !externalized &&
        report.references.some((r) => r.proposalId === item.proposalId) &&
        !report.steps.some((st) => st.step === 'excerpt_recent' || st.step === 'reference_recent')
      )
        fail(`recent unit ${item.proposalId} replaced by a reference`);
    }
  }

  // Every checkpoint made by this call saved at least the minimum; the report lists each decision.
  for (const s of report.steps) {
    if (s.step === 'compaction' && s.bytesBefore - s.bytesAfter < policy.minSavingBytes)
      fail(`a checkpoint saved ${s.bytesBefore - s.bytesAfter} bytes`);
  }
  if (report.compaction !== report.compactions.at(-1)) fail('report.compaction is not the last decision');
  const committedNow = report.compactions.filter((c) => c.decision === 'committed').length;
  if (report.steps.filter((s) => s.step === 'compaction').length !== committedNow) fail('compaction steps differ from committed decisions');
  if (report.compactions.filter((c) => c.summaryRequestId !== null).length > (policy.maxSummariesPerPrepare ?? 16))
    fail('more summaries than the per-call limit');

  // Fits, or says why not; and when a fitting solution exists, it fits.
  if (report.fits !== report.bytes <= policy.thresholdBytes) fail('fits flag disagrees with bytes');
  if (!report.fits && !report.reason) fail('does not fit and gives no reason');
  STATS.prepares++;
  if (!report.fits) STATS.nonFitting++;
  if (report.compaction.decision === 'committed') STATS.committed++;
  if (report.references.length > 0) STATS.referenced++;
  if (behaviour === 'reliable' && !report.fits) {
    const bound = feasibleUpperBound(request, m, cps.at(-1)?.t ?? 0, m.variant === 'chunked');
    STATS.oracleChecked++;
    if (process.env.RUN_PROPERTY_DEBUG) console.log(m.seed, report.bytes, bound, report.reason);
    if (bound.plain <= policy.thresholdBytes)
      fail(`a fitting request without compaction exists (<= ${bound.plain}) but got ${report.bytes}: ${report.reason}`);
    if (bound.compacted !== null && bound.compacted <= policy.targetBytes)
      fail(`a compacted request of <= ${bound.compacted} exists but got ${report.bytes}: ${report.reason}`);
  }
}

/**
 * Upper bounds of requests that are valid and constructible from this one,
 * measured as sent (measureRequest): the newest groups and every protected
 * item as they are, every older body replaced by a reference (with a note of
 * 100 bytes), and (for `compacted`) the contiguous settled prefix after the
 * newest checkpoint replaced by one summary of 100 bytes of text and an
 * account of its tool calls of 1,100 bytes (more than the bounded account can
 * take); with `perGroup` (a bounded summarizer input, so several summaries),
 * by one such summary per group (the most summaries any cut of the prefix can
 * need).
 */
function feasibleUpperBound(request: RunRequest, m: Model, afterSeq: number, perGroup = false) {
  const groups: { seq: number; items: RunRequestItem[]; settled: boolean; first: number }[] = [];
  for (const [i, item] of request.messages.entries()) {
    if (item.kind === 'model_turn') groups.push({ seq: item.seq, items: [item], settled: true, first: i });
    else if (item.kind === 'tool_result') {
      const g = groups.at(-1)!;
      g.items.push(item);
      if (item.status === 'proposed' || item.status === 'dispatched') g.settled = false;
    }
  }
  const older = groups.slice(0, Math.max(0, groups.length - m.policy.keepRecentGroups));
  const referenced = (item: RunRequestItem): RunRequestItem => {
    if (item.kind !== 'tool_result' || (item.body === undefined && item.excerpt === undefined)) return item;
    const ref = item.reference ?? {
      resultId: randomUUID(),
      version: 99,
      bytes: 99_999_999,
      lines: 9_999_999,
      sha256: 'f'.repeat(64),
      label: null,
      note: '',
    };
    return { ...item, body: undefined, excerpt: undefined, reference: { ...ref, note: 'n'.repeat(100) } };
  };
  const olderSet = new Set(older.flatMap((g) => g.items));
  const plainMessages = request.messages.map((item) => (olderSet.has(item) ? referenced(item) : item));
  const plain = measureRequest({ ...request, messages: plainMessages });

  let prefix = 0;
  while (prefix < older.length && older[prefix]!.settled && older[prefix]!.seq > afterSeq) prefix++;
  if (prefix === 0) return { plain, compacted: null };
  const summaryOf = (): CheckpointSummaryItem => ({
    kind: 'checkpoint_summary',
    checkpointId: randomUUID(),
    segment: 99,
    fromSeq: 10 ** 9,
    toSeq: 10 ** 9,
    authoritative: false,
    // Every answer of this summarizer carries its invented canary (grounding 'flag'): the note names it.
    note: summaryNote([`identifier:SUMMARY-CANARY-${m.seed}-9999`]),
    text: 'w'.repeat(100),
    toolUnits: 0,
    toolCalls: 'x'.repeat(1100),
  });
  const replaced = new Set(older.slice(0, prefix).flatMap((g) => g.items));
  const starts = new Set(older.slice(0, prefix).map((g) => g.items[0]));
  const compactedMessages: RunRequestItem[] = [];
  for (const item of plainMessages.map((x, i) => [x, request.messages[i]!] as const)) {
    const [shown, original] = item;
    if (!replaced.has(original)) compactedMessages.push(shown);
    else if (perGroup ? starts.has(original) : original === older[0]!.items[0]) compactedMessages.push(summaryOf());
  }
  return { plain, compacted: measureRequest({ ...request, messages: compactedMessages }) };
}

async function checkFinal(m: Model, behaviour: Behaviour) {
  const fail = (what: string) => m.failures.push(`seed ${m.seed} (${behaviour}): ${what}`);
  // Cold recovery rebuilds exactly the last request (nothing was recorded after it).
  const recovered = await recoverRunContext({ pool, runId: m.runId, scope, ...INPUT, policy: m.policy });
  if (JSON.stringify(recovered.request) !== JSON.stringify(m.last!.request)) fail('recovery rebuilds a different request');
  // No summarizer input ever held user text, an earlier summary, or a pending effect; failed
  // and unknown effects are labelled so.
  for (const { request, pending } of m.calls) {
    for (const item of request.items) {
      if (/USER-CANARY|SUMMARY-CANARY/.test(item.text)) fail(`summarizer input ${item.id} contains user text or a summary`);
      if (!item.id.startsWith('tool:')) continue;
      const id = item.id.slice(5);
      if (pending.has(id)) fail(`pending unit ${id} was summarized`);
      const s = m.units.get(id);
      if (s === 'unknown' && !/Settlement: UNKNOWN/.test(item.text)) fail(`unknown unit ${id} not labelled unknown`);
      if (s === 'failed' && !/Settlement: FAILED/.test(item.text)) fail(`failed unit ${id} not labelled failed`);
    }
  }
  // Checkpoints never overlap and form one chain.
  const { rows: cps } = await pool.query(
    `select id, segment, predecessor_id, from_seq::float8 as f, to_seq::float8 as t from sourcebound.run_checkpoints where run_id = $1 order by segment`,
    [m.runId],
  );
  for (let i = 1; i < cps.length; i++) {
    if (cps[i].f <= cps[i - 1].t || cps[i].predecessor_id !== cps[i - 1].id) fail(`checkpoint ${i + 1} overlaps or breaks the chain`);
  }
  // Attempts are bounded per identity; after an unknown outcome the same material is never
  // sent again under a new identity (seed 004). Different material (a later boundary once the
  // run has grown) is a new candidate and may be tried.
  const { rows: rs } = await pool.query(
    `select identity_key, predecessor_id, status, spent, attempt, source_hash, compacted_seqs::text as seqs from sourcebound.run_summary_requests where run_id = $1 order by dispatched_at, attempt`,
    [m.runId],
  );
  const spent = new Map<string, number>();
  const lastSpent = new Map<string, { status: string; identity: string; material: string }>();
  for (const r of rs) {
    const pred = r.predecessor_id ?? '-';
    const prev = lastSpent.get(pred);
    const material = `${r.source_hash}|${r.seqs}`;
    if (prev?.status === 'unknown' && prev.identity !== r.identity_key && prev.material === material) {
      fail('an unknown outcome was followed by a new identity for the same material');
    }
    if (r.spent) {
      spent.set(r.identity_key, (spent.get(r.identity_key) ?? 0) + 1);
      lastSpent.set(pred, { status: r.status, identity: r.identity_key, material });
    }
    if (r.status === 'dispatched') fail('a receipt was left in flight');
  }
  for (const [k, n] of spent) if (n > 2) fail(`identity ${k} spent ${n} attempts`);
  if (behaviour === 'reliable' && rs.some((r) => r.status !== 'ok')) fail('reliable summarizer produced a non-ok receipt');
}

async function runSeeds(
  behaviour: Behaviour,
  seeds: number,
  variant: Variant = 'one',
): Promise<{ failures: string[]; calls: number; checkpoints: number; chains: number }> {
  const failures: string[] = [];
  let calls = 0;
  let next = 0;
  const runIds: string[] = [];
  const worker = async () => {
    while (next < seeds) {
      const seed = next++;
      const m = await generate(seed, behaviour, variant);
      failures.push(...m.failures);
      calls += m.calls.length;
      runIds.push(m.runId);
    }
  };
  await Promise.all(Array.from({ length: PARALLEL }, worker));
  const { rows } = await pool.query(
    `select count(*)::int as n, count(distinct k.run_id) filter (where k.segment > 1)::int as chains
     from sourcebound.run_checkpoints k where k.run_id = any($1::uuid[])`,
    [runIds],
  );
  return { failures, calls, checkpoints: rows[0].n, chains: rows[0].chains };
}

describe('generated run histories', () => {
  it(`hold every invariant over ${SEEDS} seeds with a reliable summarizer`, async () => {
    const result = await runSeeds('reliable', SEEDS);
    if (process.env.RUN_PROPERTY_DEBUG) console.log(STATS);
    expect(result.failures).toEqual([]);
    // The generator does exercise compaction.
    expect(result.calls).toBeGreaterThan(SEEDS / 4);
    expect(result.checkpoints).toBeGreaterThan(SEEDS / 4);
  }, 600_000);

  it(`hold every invariant over ${SEEDS} seeds with a flaky summarizer (invalid, unknown, deferred, oversized)`, async () => {
    const result = await runSeeds('flaky', SEEDS);
    expect(result.failures).toEqual([]);
    expect(result.calls).toBeGreaterThan(SEEDS / 4);
  }, 600_000);

  it(`hold every invariant over ${CHUNKED_SEEDS} seeds with a bounded summarizer input (several checkpoints a call), reliable summarizer`, async () => {
    const result = await runSeeds('reliable', CHUNKED_SEEDS, 'chunked');
    expect(result.failures).toEqual([]);
    expect(result.checkpoints).toBeGreaterThan(CHUNKED_SEEDS / 2);
    // The generator does exercise chains of checkpoints.
    expect(result.chains).toBeGreaterThan(CHUNKED_SEEDS / 8);
  }, 600_000);

  it(`hold every invariant over ${CHUNKED_SEEDS} seeds with a bounded summarizer input and a per-call limit, flaky summarizer`, async () => {
    const result = await runSeeds('flaky', CHUNKED_SEEDS, 'chunked');
    expect(result.failures).toEqual([]);
    expect(result.calls).toBeGreaterThan(CHUNKED_SEEDS / 4);
  }, 600_000);
});
