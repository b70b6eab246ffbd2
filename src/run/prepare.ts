import type pg from 'pg';
import { runBudgetEnsure, runBudgetReserve } from '../db/queries/run-budget.ts';
import type { CheckpointRow } from '../db/queries/run-checkpoints.ts';
import { runLockTry, runLockWait } from '../db/queries/run-history.ts';
import { runSummaryRequestInsert, runSummaryRequestSettle, runSummaryRequestsExpire } from '../db/queries/run-receipts.ts';
import { runResultExcerpts } from '../db/queries/run-results.ts';
import { runStateLoad, type RunState } from '../db/queries/run-state.ts';
import { RUN_PROMPT_VERSION } from '../gateway/prompts.ts';
import type { MaterialItem, Summarizer } from '../gateway/types.ts';
import {
  blockingUnit, candidateOver, excerptRefs, planCompaction, selectCandidate, summaryMaterial, type Candidate, type MaterialSizes, type Plan,
} from './candidate.ts';
import { isUniqueViolation, RunNotFoundError, RunPolicyError } from './errors.ts';
import { RUN_HASH_VERSION } from './hash.ts';
import { hookQueue } from './hooks.ts';
import { resolvePolicy } from './policy.ts';
import { evaluate, materialize, requestInput, type Evaluated } from './assemble.ts';
import { gateAndCommit, type StepGoal } from './gate.ts';
import { toAnthropicRequest, type AnthropicRunRequest } from './anthropic.ts';
import { cannotFitOf } from './overflow.ts';
import { floorOf, minSummaryRoom, warningReserve, type Fitted, type RequestInput } from './fitting.ts';
import { groundOutcome } from '../grounding.ts';
import { charLimitFor, settlementOf, summaryCall } from './summarize.ts';
import { inTransaction, rollbackTo, savepoint } from '../db/transaction.ts';
import type {
  CannotFit, CandidateReport, CompactionPlanReport, ExhaustedIdentity, CompactionReport, PrepareReport, RunCompactionHooks, RunCompactionPolicy, RunRequest,
  SummaryBudgetOptions,
} from './types.ts';

export interface PrepareRunRequestOptions extends RequestInput {
  pool: pg.Pool;
  runId: string;
  scope: string;
  policy?: Partial<RunCompactionPolicy>;
  /** The summarizer for semantic compaction (the gateway, or anything with its interface). Without one, no compaction. */
  summarizer?: Summarizer;
  /** Finalization reserve and the summary's reservation. */
  budget?: SummaryBudgetOptions;
  hooks?: RunCompactionHooks;
  /** Cancels the summary request; an abort after it was sent is an unknown outcome. */
  signal?: AbortSignal;
  /** Epoch milliseconds; leases and deferrals are judged by it. (Default: Date.now) */
  clock?: () => number;
  /** How long prepareRunRequest waits, at its end, for each hook still running (it never waits while a summary request is unsettled). (Default: 5000) */
  hookTimeoutMs?: number;
}

/**
 * The next request, or why there is none. Switch on `ok`: a request over the
 * threshold is never handed out as if it could be sent.
 */
export type PreparedRunRequest =
  | {
    ok: true;
    request: RunRequest;
    /** The body to send (toAnthropicRequest(request)); `report.bytes` is its exact UTF-8 size plus the response reserve. */
    body: AnthropicRunRequest;
    report: PrepareReport;
  }
  | { ok: false; request: null; body: null; cannotFit: CannotFit; report: PrepareReport };


/** The records as this call knows them (the snapshot it loaded, plus the checkpoints it committed since) and their request. */
interface Cursor {
  state: RunState;
  current: Evaluated;
}

/** A summary request whose receipt is written (committed with the transaction that wrote it) and is to be sent. */
interface Dispatch {
  kind: 'dispatch';
  cursor: Cursor;
  candidate: Candidate;
  goal: StepGoal;
  items: MaterialItem[];
  receiptId: string;
  attempt: number;
  /** The summary's room in bytes. */
  allowance: number;
  /** The character limit the summarizer is told for that room, in its material's script (charLimitFor). */
  maxChars: number;
  reservedTokens: number;
  compaction: CompactionReport;
}

/** Nothing more to do in this call: `cursor` is where it ended. */
interface Stop {
  kind: 'stop';
  cursor: Cursor;
}

/** A stored summary re-judged without a model call. */
interface Reused {
  kind: 'reused';
  compaction: CompactionReport;
  checkpoint: CheckpointRow | null;
  final: Evaluated;
}

/** One compaction decision of this call, in order. */
interface Decision {
  compaction: CompactionReport;
  bytesBefore: number;
  /** The request after a committed checkpoint. */
  bytesAfter: number | null;
  /** Observed by onAfterCompaction (a summary came back, or a stored one was re-judged). */
  observed: boolean;
}

/** What one call carries from step to step. */
interface Context {
  input: RequestInput;
  policy: Readonly<RunCompactionPolicy>;
  summarizer: Summarizer;
  budget: ReturnType<typeof budgetOptions>;
  signal: AbortSignal | undefined;
  clock: () => number;
  sizes: MaterialSizes;
  /** Summaries requested or re-judged so far. */
  summaries: number;
}

/**
 * Builds the Run's complete next request and says what it did.
 *
 * 1. Measure the full request (system, tools, history, catalog, reserve).
 * 2. Above the target: reversible fitting (compact catalog, older rereadable
 *    tool bodies as references).
 * 3. Still above the target (compactAboveBytes): semantic compaction along a plan: the fewest
 *    chunks of older settled work (oldest first, each summarizer input at
 *    most `maxSummaryInputBytes`) whose checkpoints bring the request to the
 *    target. Nothing is sent unless the plan reaches the target. Then one
 *    summary after another, each for its own checkpoint: a summary request
 *    (receipt committed first, budget reserved with the rest of the plan and
 *    the finalization reserve kept, deadline, cancellation, no transaction
 *    open during the call), the net-benefit gate, then an immutable
 *    checkpoint. It stops at the target, at the first summary that is not
 *    committed (committed ones stay: each saved at least the minimum and kept
 *    the rest of the plan reachable), or after `maxSummariesPerPrepare`
 *    summaries (the next call goes on).
 *
 * Preparers of one Run are serialized by a transaction-scoped advisory lock;
 * one that does not get it still returns a request (from committed records)
 * and reports `busy`. Between two summaries of one call, the settlement, the
 * checkpoint and the next receipt are written in one transaction under the
 * lock, so no other preparer starts a summary in between. Never sends a
 * summary for a candidate whose earlier outcome is unknown under any other
 * identity.
 * @throws RunNotFoundError when the Run is not in `scope`; RunPolicyError for an unusable policy.
 */
export async function prepareRunRequest(options: PrepareRunRequestOptions): Promise<PreparedRunRequest> {
  const { pool, runId, scope, summarizer, hooks, signal } = options;
  const policy = resolvePolicy(options.policy);
  const input = requestInput(options);
  const clock = options.clock ?? Date.now;
  const budget = budgetOptions(options.budget);
  const hookErrors: string[] = [];
  const observers = hookQueue(hooks, hookErrors, options.hookTimeoutMs ?? 5_000);
  const decisions: Decision[] = [];
  const emit = (made: readonly Decision[]) => {
    for (const d of made) {
      decisions.push(d);
      if (d.observed) observers.push('onAfterCompaction', { phase: 'after', runId, scope, bytesBefore: d.bytesBefore, compaction: d.compaction });
    }
  };

  const phase1 = await inTransaction(pool, async (client) => {
    const locked = await runLockTry(client, runId);
    const expired = locked ? await runSummaryRequestsExpire(client, runId, new Date(clock())) : [];
    const state = await runStateLoad(client, runId, scope, policy.excerptBytes, policy.keepRecentGroups);
    if (!state) throw new RunNotFoundError(`run ${runId} not found in scope ${scope}`);
    const before = evaluate(state, input, policy);
    const cursor: Cursor = { state, current: before };
    const made: Decision[] = [];
    const done = (decision: CompactionReport['decision'], reason: string | null) => {
      made.push(unobserved(emptyCompaction(decision, reason), before));
      return { expired, before, made, context: undefined as Context | undefined, next: { kind: 'stop', cursor } as Dispatch | Stop };
    };

    // Compaction starts above compactAboveBytes (by default the target): a summary that fails
    // there leaves a request that still fits, and the next call tries again.
    if (before.fitted.bytes <= compactAbove(policy)) return done('not_needed', null);
    if (!policy.enabled) return done('disabled', 'policy.enabled is false');
    if (!summarizer) return done('skipped', 'no_summarizer');
    if (!locked) return done('skipped', 'busy: another preparer holds the run');
    const context: Context = { input, policy, summarizer, budget, signal, clock, sizes: new Map(), summaries: 0 };
    return { expired, before, made, context, next: await advance(client, cursor, context, made) };
  });

  emit(phase1.made);
  let next = phase1.next;
  while (next.kind === 'dispatch') {
    const step = next;
    const context = phase1.context!;
    const bytesBefore = step.cursor.current.fitted.bytes;
    // Observed, not waited for: the receipt's lease runs from its commit, and the call is sent now.
    observers.push('onBeforeCompaction', { phase: 'before', runId, scope, bytesBefore, compaction: step.compaction });
    // No transaction is open during the model call: the receipt is already committed.
    // Every figure of the summary must be in its material (src/grounding.ts); checked before the checkpoint.
    const outcome = groundOutcome(await summaryCall(summarizer!, step.items, step.maxChars, policy.summaryDeadlineMs, signal), step.items, policy.grounding);
    const leg = await inTransaction(pool, async (client) => {
      await runLockWait(client, runId);
      const made: Decision[] = [];
      const stop = (compaction: CompactionReport, cursor = step.cursor, bytesAfter: number | null = null) => {
        made.push({ compaction, bytesBefore, bytesAfter, observed: true });
        return { made, next: { kind: 'stop', cursor } as Dispatch | Stop, error: undefined as unknown };
      };
      const settlement = settlementOf(outcome, step.reservedTokens, clock());
      if (!(await runSummaryRequestSettle(client, step.receiptId, settlement))) {
        return stop({ ...step.compaction, decision: 'failed', outcome: outcome.kind, reason: 'lease_lost: the receipt was settled as unknown before this call returned' });
      }
      if (outcome.kind !== 'ok') return stop({ ...step.compaction, decision: 'failed', outcome: outcome.kind, reason: outcome.reason });
      const receipt = { id: step.receiptId, attempt: step.attempt };
      const gated = await gateAndCommit(client, step.cursor.state, input, policy, step.cursor.current, step.candidate, receipt, outcome.text, outcome.model, step.goal, outcome.grounding?.ungrounded ?? []);
      const compaction: CompactionReport = { ...step.compaction, ...gated.compaction, outcome: 'ok' };
      if (!gated.checkpoint) return stop(compaction);
      const cursor = following(step.cursor, gated.checkpoint, gated.final);
      const result = stop(compaction, cursor, gated.final.fitted.bytes);
      if (gated.final.fitted.bytes <= policy.targetBytes) return result;
      // The plan's next summary, in this same transaction: between two summaries of this call
      // the Run is never without its lock or an in-flight receipt.
      await savepoint(client, 'next_step');
      try {
        result.next = await advance(client, cursor, context, made);
      } catch (error) {
        // The settlement and the checkpoint stand; the error is thrown once they are committed.
        await rollbackTo(client, 'next_step');
        made.splice(1);
        result.error = error ?? new Error('unknown error');
      }
      return result;
    });
    emit(leg.made);
    if (leg.error !== undefined) throw leg.error;
    next = leg.next;
  }

  const final = next.cursor.current;
  const { before, expired } = phase1;
  const steps = [...before.fitted.steps];
  for (const d of decisions) if (d.bytesAfter !== null) steps.push({ step: 'compaction', bytesBefore: d.bytesBefore, bytesAfter: d.bytesAfter });
  const compactions = decisions.map((d) => d.compaction);
  const compaction = compactions.at(-1)!;
  const committed = compactions.filter((c) => c.decision === 'committed').length;
  const fits = final.fitted.bytes <= policy.thresholdBytes;
  const request = await materialize(pool, runId, final.fitted);
  // Every summary request is settled by now: hooks no longer hold anything. Each is bounded.
  await observers.drain();
  const cannotFit = fits ? null : cannotFitOf(final, request, policy);
  const report: PrepareReport = {
    runId,
    thresholdBytes: policy.thresholdBytes,
    targetBytes: policy.targetBytes,
    steps,
    references: final.fitted.references,
    catalog: final.fitted.catalog,
    checkpointsUsed: final.projection.usedCheckpoints,
    brokenCheckpoints: final.projection.brokenCheckpoints,
    compaction,
    compactions,
    expiredReceipts: expired,
    bytes: final.fitted.bytes,
    fits,
    reason: cannotFit === null ? null : `cannot_fit: over the threshold after reversible fitting${committed > 0 ? ` and ${committed} new checkpoint(s)` : ''} (${final.fitted.bytes} > ${policy.thresholdBytes} bytes); ` +
      `most held by ${cannotFit.holders.slice(0, 3).map((h) => `${h.what} ${h.bytes}`).join(', ')}; compaction ${compaction.decision}${compaction.reason ? `: ${compaction.reason}` : ''}`,
    hookErrors,
  };
  if (cannotFit !== null) return { ok: false, request: null, body: null, cannotFit, report };
  return { ok: true, request, body: toAnthropicRequest(request), report };
}

/**
 * From `cursor`, in a transaction holding the Run's lock: the plan's next
 * summary to send, or a stop. A stored summary is re-judged in place (no
 * call), and after it is committed the plan goes on. Decisions are appended
 * to `made`.
 */
async function advance(client: pg.PoolClient, cursor: Cursor, context: Context, made: Decision[]): Promise<Dispatch | Stop> {
  const { policy } = context;
  for (;;) {
    const stop = (reason: string): Stop => {
      made.push(unobserved(emptyCompaction('skipped', reason), cursor.current));
      return { kind: 'stop', cursor };
    };
    if (context.summaries >= policy.maxSummariesPerPrepare) return stop(`summary_limit:${policy.maxSummariesPerPrepare}: the next call goes on with the plan`);
    if (context.signal?.aborted) return stop('cancelled');
    const step = await nextStep(client, cursor, context, made);
    if (step.kind !== 'reused') return step;
    context.summaries++;
    made.push({ compaction: step.compaction, bytesBefore: cursor.current.fitted.bytes, bytesAfter: step.checkpoint ? step.final.fitted.bytes : null, observed: true });
    if (!step.checkpoint) return { kind: 'stop', cursor };
    cursor = following(cursor, step.checkpoint, step.final);
    if (cursor.current.fitted.bytes <= policy.targetBytes) return { kind: 'stop', cursor };
  }
}

/** The candidate and its plan; then a receipt (dispatch), a stored summary re-judged (reused), or why not (stop). */
async function nextStep(client: pg.PoolClient, cursor: Cursor, context: Context, made: Decision[]): Promise<Dispatch | Stop | Reused> {
  const { state, current } = cursor;
  const { policy, summarizer, budget, input } = context;
  const runId = state.run.id;
  const stop = (reason: string, extra: Partial<CompactionReport> = {}): Stop => {
    made.push(unobserved({ ...emptyCompaction('skipped', reason), ...extra }, current));
    return { kind: 'stop', cursor };
  };

  const floor = floorOf(current.projection, policy);
  const selection = selectCandidate(state, current.projection, policy, summarizer.model, context.sizes, floor);
  if (!selection.ok) return stop(selection.reason);
  let candidate = selection.candidate;
  if (state.receipts.some((r) => r.status === 'dispatched')) return stop('summary_in_flight', { candidate: candidateReport(candidate, current.fitted) });

  // An unknown outcome pins its identity: the same material is never sent again under another one,
  // while that identity has an attempt left.
  const spentOn = (key: string) => state.receipts.filter((r) => r.identityKey === key && r.spent === true).length;
  const lastSpent = findLast(state.receipts, (r) => r.spent === true);
  if (lastSpent?.status === 'unknown' && lastSpent.identityKey !== candidate.identityKey && spentOn(lastSpent.identityKey) < policy.maxAttempts) {
    const pinned = lastSpent.model === summarizer.model
      ? candidateOver(state, current.projection, policy, summarizer.model, lastSpent.compactedSeqs) : null;
    if (!pinned || pinned.identityKey !== lastSpent.identityKey) {
      return stop(`unknown_outcome_pinned:${lastSpent.id}`, { candidate: candidateReport(candidate, current.fitted) });
    }
    candidate = pinned;
  }
  // Material whose identity has spent every attempt is never sent again, under any identity. The
  // next candidate is different material: the same groups and the next one (a later boundary),
  // once the Run has grown one; until then, nothing is sent and the report says why.
  let exhausted: ExhaustedIdentity | null = null;
  for (;;) {
    const hit = exhaustedMaterial(state.receipts, candidate, policy.maxAttempts);
    if (hit === null) break;
    exhausted ??= hit;
    const last = selection.compactable.findIndex((g) => g.seq === candidate.toSeq);
    const next = last < 0 ? undefined : selection.compactable[last + 1];
    const later = next === undefined ? null : candidateOver(state, current.projection, policy, summarizer.model, [...candidate.seqs, next.seq]);
    if (later === null) {
      return stop(`exhausted:${hit.identityKey}: turns ${hit.fromSeq}-${hit.toSeq} spent ${hit.attempts} attempt(s), the last ${hit.lastOutcome}; ` +
        `that material is never sent again; the next candidate takes a later boundary once settled work follows turn ${candidate.toSeq}`,
      { candidate: candidateReport(candidate, current.fitted), exhausted });
    }
    candidate = later;
  }
  // A candidate that grew past exhausted material says so too.
  exhausted ??= exhaustedMaterial(state.receipts, candidate, policy.maxAttempts, true);
  const report = candidateReport(candidate, current.fitted);
  const withExhausted = exhausted === null ? {} : { exhausted };
  const same = state.receipts.filter((r) => r.identityKey === candidate.identityKey);
  // A summary of exactly this material already came back (and was not committed): re-judged below, no new call.
  // One with ungrounded facts (accepted under `flag`) is not an answer under `reject`: its attempt stays spent.
  const reusable = findLast(same, (r) => r.status === 'ok' && r.checkpointId === null && r.summary !== null &&
    (policy.grounding === 'flag' || r.ungrounded.length === 0));
  if (!reusable) {
    if (same.filter((r) => r.spent === true).length >= policy.maxAttempts) {
      return stop(same.at(-1)?.status === 'unknown' ? 'attempts_exhausted:last_outcome_unknown' : 'attempts_exhausted', { candidate: report, ...withExhausted });
    }
    const waiting = findLast(same, (r) => r.status === 'deferred' && r.notBefore !== null && Date.parse(r.notBefore) > context.clock());
    if (waiting) return stop(`deferred_until:${waiting.notBefore}`, { candidate: report, ...withExhausted });
  }

  // The plan: nothing is summarized unless its checkpoints reach the target. An unknown
  // summary size is never taken as zero: each summarizer is held to its allowance.
  const plan = planCompaction(state, current, input, policy, candidate, selection.compactable, context.sizes, floor);
  const planned = planReport(plan);
  if (!plan.reachable) {
    // Work after an open tool unit can never be compacted: say so, not only that there is no room.
    const open = blockingUnit(state, current.projection, policy);
    const why = open === null ? '' : `open_tool_unit:${open.proposalId}: tool call ${open.proposalId} in turn ${open.seq} is ${open.status}, not settled; ` +
      'nothing after it can be compacted until it is settled (recordToolResult: settled, failed or unknown); ';
    return stop(why + insufficientRoom(plan, policy), { candidate: report, plan: planned, ...withExhausted });
  }
  const goal: StepGoal = { remaining: plan.chunks.length - 1, planFloorBytes: plan.floor.bytes };
  if (reusable) {
    const gated = await gateAndCommit(client, state, input, policy, current, candidate, reusable, reusable.summary!, reusable.answerModel ?? reusable.model, goal, reusable.ungrounded);
    return {
      kind: 'reused', checkpoint: gated.checkpoint, final: gated.final,
      compaction: { ...emptyCompaction('rejected', null), ...gated.compaction, candidate: report, plan: planned, reusedSummary: true, outcome: 'ok', ...withExhausted },
    };
  }
  const allowance = plan.allowance;
  if (allowance < minSummaryRoom(policy)) return stop(`insufficient_room:${allowance}`, { candidate: report, plan: planned, ...withExhausted });

  const material = summaryMaterial(candidate, policy, await runResultExcerpts(client, runId, excerptRefs(candidate), policy.toolExcerptBytes));
  // Under `flag` the allowance also holds the note's warning, if the answer has one (warningReserve).
  const maxChars = charLimitFor(allowance - warningReserve(policy), material.items);
  await runBudgetEnsure(client, runId, null, null);
  const tokensFor = (inputBytes: number) => budget.summaryTokens ?? Math.ceil(inputBytes / 3) + allowance + 512;
  const reservedTokens = tokensFor(material.inputBytes);
  // The rest of the plan is kept available too: summaries that cannot all be paid for are not started.
  const rest = plan.chunks.slice(1);
  let restTokens = 0;
  for (const c of rest) restTokens += tokensFor(c.inputBytes);
  await savepoint(client, 'dispatch');
  if (!(await runBudgetReserve(client, runId, 1, reservedTokens, budget.finalizationRequests + rest.length, budget.finalizationTokens + restTokens))) {
    await rollbackTo(client, 'dispatch');
    return stop('finalization_reserve', { candidate: report, plan: planned, ...withExhausted });
  }
  let receipt: { id: string; attempt: number };
  try {
    receipt = await runSummaryRequestInsert(client, {
      runId, conversationId: state.run.conversationId, scope: state.run.scope, identityKey: candidate.identityKey,
      predecessorId: candidate.predecessorId, fromSeq: candidate.fromSeq, toSeq: candidate.toSeq, compactedSeqs: candidate.seqs,
      sourceHash: candidate.sourceHash, hashVersion: RUN_HASH_VERSION, model: summarizer.model, promptVersion: RUN_PROMPT_VERSION,
      maxChars, inputBytes: material.inputBytes, reservedRequests: 1, reservedTokens,
      leaseExpiresAt: new Date(context.clock() + policy.summaryDeadlineMs + policy.leaseGraceMs),
    });
  } catch (error) {
    const code = (error as { code?: string }).code;
    if (code !== '23000' && !isUniqueViolation(error)) throw error;
    await rollbackTo(client, 'dispatch');
    return stop(isUniqueViolation(error, 'run_summary_requests_in_flight_key') ? 'summary_in_flight' : 'attempts_exhausted', { candidate: report, plan: planned, ...withExhausted });
  }
  context.summaries++;
  return {
    kind: 'dispatch', cursor, candidate, goal, items: material.items, receiptId: receipt.id, attempt: receipt.attempt, allowance, maxChars, reservedTokens,
    compaction: {
      ...emptyCompaction('pending', null), candidate: { ...report, inputBytes: material.inputBytes }, plan: planned, ...withExhausted,
      summaryRequestId: receipt.id, attempt: receipt.attempt, summaryAllowance: allowance, summaryMaxChars: maxChars,
    },
  };
}

/** The cursor after `checkpoint` was committed: the same snapshot with it as the newest checkpoint (no receipts on it yet). */
function following(cursor: Cursor, checkpoint: CheckpointRow, final: Evaluated): Cursor {
  return { state: { ...cursor.state, checkpoints: [...cursor.state.checkpoints, checkpoint], receipts: [] }, current: final };
}

function unobserved(compaction: CompactionReport, at: Evaluated): Decision {
  return { compaction, bytesBefore: at.fitted.bytes, bytesAfter: null, observed: false };
}

function planReport(plan: Plan): CompactionPlanReport {
  const { bytes, envelope, protected: protectedBytes, summaries, work } = plan.floor;
  return { checkpoints: plan.chunks.length, floorBytes: bytes, reachable: plan.reachable, floor: { envelope, protected: protectedBytes, summaries, work } };
}

/** Why no plan reaches the target, with what the floor consists of. */
function insufficientRoom(plan: Plan, policy: Readonly<RunCompactionPolicy>): string {
  const f = plan.floor;
  const groups = plan.chunks.reduce((n, c) => n + c.seqs.length, 0);
  return `insufficient_room: with all ${groups} compactable group(s) summarized in ${plan.chunks.length} checkpoint(s), the request is at least ` +
    `${f.bytes} bytes plus ${plan.chunks.length} x ${minSummaryRoom(policy)} for the summaries, over the target ${policy.targetBytes} ` +
    `(envelope and reserve ${f.envelope}, protected originals ${f.protected}, summary items without text ${f.summaries}, work that cannot be compacted now ${f.work})`;
}

function candidateReport(c: Candidate, fitted: Fitted): CandidateReport {
  let requestBytes = 0;
  for (const seq of c.seqs) requestBytes += fitted.groupBytes.get(seq) ?? 0;
  return {
    fromSeq: c.fromSeq, toSeq: c.toSeq, seqs: c.seqs, toolUnits: c.toolResultRefs.length, sourceHash: c.sourceHash,
    identityKey: c.identityKey, requestBytes, inputBytes: c.inputBytes,
  };
}

export function emptyCompaction(decision: CompactionReport['decision'], reason: string | null): CompactionReport {
  return {
    decision, reason, candidate: null, plan: null, summaryRequestId: null, attempt: null, outcome: null, reusedSummary: false,
    summaryAllowance: null, summaryMaxChars: null, summaryBytes: null, bytesWithSummary: null, checkpointId: null, exhausted: null,
  };
}

function budgetOptions(b: SummaryBudgetOptions | undefined): { finalizationRequests: number; finalizationTokens: number; summaryTokens: number | undefined } {
  const finalizationRequests = b?.finalizationRequests ?? 1;
  const finalizationTokens = b?.finalizationTokens ?? 0;
  for (const [k, v] of Object.entries({ finalizationRequests, finalizationTokens, summaryTokens: b?.summaryTokens ?? 0 })) {
    if (!Number.isSafeInteger(v) || v < 0) throw new RunPolicyError(`budget.${k} must be a non-negative integer`);
  }
  return { finalizationRequests, finalizationTokens, summaryTokens: b?.summaryTokens };
}

/** The identity that spent every attempt on exactly this material (same predecessor, same groups; with `prefix`, on a part of it that starts it), if any. */
function exhaustedMaterial(receipts: readonly RunState['receipts'][number][], c: Candidate, maxAttempts: number, prefix = false): ExhaustedIdentity | null {
  const spent = new Map<string, RunState['receipts'][number][]>();
  const within = (seqs: readonly number[]) => prefix
    ? seqs.length < c.seqs.length && seqs.every((s, i) => c.seqs[i] === s)
    : seqs.join() === c.seqs.join();
  for (const r of receipts) {
    if (r.spent !== true || r.predecessorId !== c.predecessorId || !within(r.compactedSeqs)) continue;
    spent.set(r.identityKey, [...(spent.get(r.identityKey) ?? []), r]);
  }
  for (const [identityKey, rs] of spent) {
    if (rs.length < maxAttempts) continue;
    // A summary that came back ok (and was not committed) is re-judged, not exhausted.
    if (rs.some((r) => r.status === 'ok' && r.checkpointId === null && r.summary !== null)) continue;
    const last = rs.at(-1)!;
    return { identityKey, fromSeq: last.fromSeq, toSeq: last.toSeq, attempts: rs.length, lastOutcome: last.status as ExhaustedIdentity['lastOutcome'], reason: last.reason };
  }
  return null;
}

/** Where semantic compaction starts: `compactAboveBytes`, or the target when unset (0). */
function compactAbove(policy: Readonly<RunCompactionPolicy>): number {
  return policy.compactAboveBytes === 0 ? policy.targetBytes : policy.compactAboveBytes;
}

function findLast<T>(items: readonly T[], predicate: (item: T) => boolean): T | undefined {
  for (let i = items.length - 1; i >= 0; i--) if (predicate(items[i]!)) return items[i];
  return undefined;
}
