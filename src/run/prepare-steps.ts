/**
 * The steps of one prepareRunRequest call (prepare.ts): from the records it
 * loaded, the plan's next summary to send (a Dispatch, its receipt written)
 * or why there is none (a Stop), with each decision recorded for the report.
 * Every step runs in a transaction holding the Run's lock.
 */
import type pg from 'pg';
import { runBudgetEnsure, runBudgetReserve } from '../db/queries/run-budget.ts';
import { type CheckpointRow } from '../db/queries/run-checkpoints.ts';
import { runSummaryRequestInsert } from '../db/queries/run-receipts.ts';
import { runResultExcerpts } from '../db/queries/run-results.ts';
import { type RunState } from '../db/queries/run-state.ts';
import { rollbackTo, savepoint } from '../db/transaction.ts';
import { RUN_PROMPT_VERSION } from '../gateway/prompts.ts';
import { type Evaluated } from './assemble.ts';
import {
  type Candidate,
  type Chunk,
  type MaterialSizes,
  blockingUnit,
  candidateOver,
  excerptRefs,
  laterBoundary,
  savingAtLeast,
  selectCandidate,
  summaryMaterial,
} from './candidate.ts';
import { minSummaryRoom, warningReserve } from './checkpoint-item.ts';
import { type Plan, planCompaction } from './compaction-plan.ts';
import { type Fitted, floorOf } from './fitting.ts';
import { type StepGoal } from './gate.ts';
import { type RequestInput } from './request-slots.ts';
import { RunPolicyError, isUniqueViolation, isWriteRace } from './run-errors.ts';
import { RUN_HASH_VERSION } from './run-hash.ts';
import { exhaustedMaterial, isRefusedAnswer, latestRefusal } from './spent-material.ts';
import { INT4_MAX } from './stored.ts';
import { charLimitFor } from './summarize.ts';
import { type RunCompactionPolicy, type SummaryBudgetOptions } from './types.ts';
import {
  type CandidateReport,
  type CompactionPlanReport,
  type RunCompactionReport,
  type ExhaustedIdentity,
  type RefusedIdentity,
} from './reports.ts';
import { type MaterialItem, type Summarizer } from '../support/summary-contract.ts';

/** The records as this call knows them (the snapshot it loaded, plus the checkpoints it committed since) and their request. */
export interface Cursor {
  state: RunState;
  current: Evaluated;
}

/** A summary request whose receipt is written (committed with the transaction that wrote it) and is to be sent. */
export interface Dispatch {
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
  compaction: RunCompactionReport;
}

/** Nothing more to do in this call: `cursor` is where it ended. */
export interface Stop {
  kind: 'stop';
  cursor: Cursor;
}

/** One compaction decision of this call, in order. */
export interface Decision {
  compaction: RunCompactionReport;
  bytesBefore: number;
  /** The request after a committed checkpoint. */
  bytesAfter: number | null;
  /** Observed by onAfterCompaction (a summary came back). */
  observed: boolean;
}

/** What one call carries from step to step. */
export interface Context {
  input: RequestInput;
  policy: Readonly<RunCompactionPolicy>;
  summarizer: Summarizer;
  budget: ReturnType<typeof budgetOptions>;
  signal: AbortSignal | undefined;
  clock: () => number;
  sizes: MaterialSizes;
  /** Summaries requested so far. */
  summaries: number;
}

/**
 * From `cursor`, in a transaction holding the Run's lock: the plan's next
 * summary to send, or a stop. Decisions are appended to `made`.
 */
export async function advance(client: pg.PoolClient, cursor: Cursor, context: Context, made: Decision[]): Promise<Dispatch | Stop> {
  const { policy } = context;
  const stop = (reason: string): Stop => {
    made.push(unobserved(emptyCompaction('skipped', reason), cursor.current));
    return { kind: 'stop', cursor };
  };
  if (context.summaries >= policy.maxSummariesPerPrepare)
    return stop(`summary_limit:${policy.maxSummariesPerPrepare}: the next call goes on with the plan`);
  if (context.signal?.aborted) return stop('cancelled');
  return nextStep(client, cursor, context, made);
}

/** The candidate and its plan; then a receipt (dispatch), or why not (stop). */
async function nextStep(client: pg.PoolClient, cursor: Cursor, context: Context, made: Decision[]): Promise<Dispatch | Stop> {
  const { state, current } = cursor;
  const { policy, summarizer, budget, input } = context;
  const runId = state.run.id;
  const stop = (reason: string, extra: Partial<RunCompactionReport> = {}): Stop => {
    made.push(unobserved({ ...emptyCompaction('skipped', reason), ...extra }, current));
    return { kind: 'stop', cursor };
  };

  const floor = floorOf(current.projection, policy);
  const selection = selectCandidate(state, current.projection, policy, summarizer.model, context.sizes, floor);
  if (!selection.ok) return stop(selection.reason);
  let candidate = selection.candidate;
  if (state.receipts.some((r) => r.status === 'dispatched'))
    return stop('summary_in_flight', { candidate: candidateReport(candidate, current.fitted) });

  // An unknown outcome pins its identity: the same material is never sent again under another one,
  // while that identity has an attempt left.
  const spentOn = (key: string) => state.receipts.filter((r) => r.identityKey === key && r.spent === true).length;
  const lastSpent = findLast(state.receipts, (r) => r.spent === true);
  if (
    lastSpent?.status === 'unknown' &&
    lastSpent.identityKey !== candidate.identityKey &&
    spentOn(lastSpent.identityKey) < policy.maxAttempts
  ) {
    const pinned =
      lastSpent.model === summarizer.model
        ? candidateOver(state, current.projection, policy, summarizer.model, lastSpent.compactedSeqs)
        : null;
    if (!pinned || pinned.identityKey !== lastSpent.identityKey) {
      return stop(`unknown_outcome_pinned:${lastSpent.id}`, { candidate: candidateReport(candidate, current.fitted) });
    }
    candidate = pinned;
  }
  // Material whose identity has spent every attempt, or whose answer the net-benefit gate refused, is
  // never sent again under any identity, and a refused answer is never judged again. The next candidate
  // is different material: the same groups and the next ones (a later boundary), once the Run has grown
  // them (after a refusal: enough for an answer as large as the refused one to save the minimum). Until
  // then nothing is sent, and the report says which identity and why.
  const refusals = state.receipts.filter((r) => isRefusedAnswer(r, policy));
  let exhausted: ExhaustedIdentity | null = null;
  let refused: RefusedIdentity | null = null;
  for (;;) {
    const hit = exhaustedMaterial(state.receipts, candidate, policy);
    if (hit !== null) {
      exhausted ??= hit;
      const last = selection.compactable.findIndex((g) => g.seq === candidate.toSeq);
      const next = last < 0 ? undefined : selection.compactable[last + 1];
      const later =
        next === undefined ? null : candidateOver(state, current.projection, policy, summarizer.model, [...candidate.seqs, next.seq]);
      if (later === null) {
        return stop(
          `exhausted:${hit.identityKey}: turns ${hit.fromSeq}-${hit.toSeq} spent ${hit.attempts} attempt(s), the last ${hit.lastOutcome}; ` +
            `that material is never sent again; the next candidate takes a later boundary once settled work follows turn ${candidate.toSeq}`,
          { candidate: candidateReport(candidate, current.fitted), exhausted, refused },
        );
      }
      candidate = later;
      continue;
    }
    const r = latestRefusal(refusals, candidate);
    if (r === null) break;
    const answer = refusals.find((x) => x.id === r.summaryRequestId)!;
    const saving = (c: Chunk) => savingAtLeast(c, answer.summary!, answer.ungrounded, floor, current.fitted.bytes, policy);
    const passes = (c: Chunk) => c.toSeq > r.toSeq && saving(c) >= policy.minSavingBytes;
    if (passes(candidate)) break;
    refused ??= r;
    // Over the target by less than the minimum, no boundary passes yet (fitting stops at the target).
    const over = current.fitted.bytes - policy.targetBytes;
    const boundary =
      over >= 0 && over < policy.minSavingBytes
        ? { seqs: null, best: over }
        : laterBoundary(candidate, selection.compactable, passes, saving);
    const later = boundary.seqs === null ? null : candidateOver(state, current.projection, policy, summarizer.model, boundary.seqs);
    if (later === null) {
      return stop(
        `refused:${r.identityKey}: turns ${r.fromSeq}-${r.toSeq}: its summary (${r.summaryBytes} bytes, receipt ${r.summaryRequestId}) was refused by the ` +
          `net-benefit gate (${r.reason ?? 'reason not recorded'}); that answer is not judged again and that material is never sent again; ` +
          `the next candidate takes a later boundary once the Run has grown enough for an answer that large to save ${policy.minSavingBytes} bytes ` +
          `(a later boundary now would save at most ${boundary.best})`,
        { candidate: candidateReport(candidate, current.fitted), exhausted, refused },
      );
    }
    candidate = later;
  }
  // A candidate that grew past exhausted or refused material says so too.
  exhausted ??= exhaustedMaterial(state.receipts, candidate, policy, true);
  refused ??= latestRefusal(refusals, candidate);
  const report = candidateReport(candidate, current.fitted);
  const known = { ...(exhausted === null ? {} : { exhausted }), ...(refused === null ? {} : { refused }) };
  const same = state.receipts.filter((r) => r.identityKey === candidate.identityKey);
  if (same.filter((r) => r.spent === true).length >= policy.maxAttempts) {
    return stop(same.at(-1)?.status === 'unknown' ? 'attempts_exhausted:last_outcome_unknown' : 'attempts_exhausted', {
      candidate: report,
      ...known,
    });
  }
  const waiting = findLast(same, (r) => r.status === 'deferred' && r.notBefore !== null && Date.parse(r.notBefore) > context.clock());
  if (waiting) return stop(`deferred_until:${waiting.notBefore}`, { candidate: report, ...known });

  // The plan: nothing is summarized unless its checkpoints reach the target. An unknown
  // summary size is never taken as zero: each summarizer is held to its allowance.
  const plan = planCompaction(state, current, input, policy, candidate, selection.compactable, context.sizes, floor);
  const planned = planReport(plan);
  if (!plan.reachable) {
    // Work after an open tool unit can never be compacted: say so, not only that there is no room.
    const open = blockingUnit(state, current.projection, policy);
    const why =
      open === null
        ? ''
        : `open_tool_unit:${open.proposalId}: tool call ${open.proposalId} in turn ${open.seq} is ${open.status}, not settled; ` +
          'nothing after it can be compacted until it is settled (recordToolResult: settled, failed or unknown); ';
    return stop(why + insufficientRoom(plan, policy), { candidate: report, plan: planned, ...known });
  }
  const goal: StepGoal = { remaining: plan.chunks.length - 1, planFloorBytes: plan.floor.bytes };
  const allowance = plan.allowance;
  if (allowance < minSummaryRoom(policy)) return stop(`insufficient_room:${allowance}`, { candidate: report, plan: planned, ...known });

  const material = summaryMaterial(
    candidate,
    policy,
    await runResultExcerpts(client, runId, excerptRefs(candidate), policy.toolExcerptBytes),
  );
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
  // Requests kept are an integer parameter: clamped to INT4_MAX, which no request limit (an integer) leaves either.
  const keepRequests = Math.min(budget.finalizationRequests + rest.length, INT4_MAX);
  if (!(await runBudgetReserve(client, runId, 1, reservedTokens, keepRequests, budget.finalizationTokens + restTokens))) {
    await rollbackTo(client, 'dispatch');
    return stop('finalization_reserve', { candidate: report, plan: planned, ...known });
  }
  let receipt: { id: string; attempt: number };
  try {
    receipt = await runSummaryRequestInsert(client, {
      runId,
      conversationId: state.run.conversationId,
      scope: state.run.scope,
      identityKey: candidate.identityKey,
      predecessorId: candidate.predecessorId,
      fromSeq: candidate.fromSeq,
      toSeq: candidate.toSeq,
      compactedSeqs: candidate.seqs,
      sourceHash: candidate.sourceHash,
      hashVersion: RUN_HASH_VERSION,
      model: summarizer.model,
      promptVersion: RUN_PROMPT_VERSION,
      maxChars,
      inputBytes: material.inputBytes,
      reservedRequests: 1,
      reservedTokens,
      leaseExpiresAt: new Date(context.clock() + policy.summaryDeadlineMs + policy.leaseGraceMs),
    });
  } catch (error) {
    if (!isWriteRace(error)) throw error;
    await rollbackTo(client, 'dispatch');
    return stop(isUniqueViolation(error, 'run_summary_requests_in_flight_key') ? 'summary_in_flight' : 'attempts_exhausted', {
      candidate: report,
      plan: planned,
      ...known,
    });
  }
  context.summaries++;
  return {
    kind: 'dispatch',
    cursor,
    candidate,
    goal,
    items: material.items,
    receiptId: receipt.id,
    attempt: receipt.attempt,
    allowance,
    maxChars,
    reservedTokens,
    compaction: {
      ...emptyCompaction('pending', null),
      candidate: { ...report, inputBytes: material.inputBytes },
      plan: planned,
      ...known,
      summaryRequestId: receipt.id,
      attempt: receipt.attempt,
      summaryAllowance: allowance,
      summaryMaxChars: maxChars,
    },
  };
}

/** The cursor after `checkpoint` was committed: the same snapshot with it as the newest checkpoint (no receipts on it yet). */
export function following(cursor: Cursor, checkpoint: CheckpointRow, final: Evaluated): Cursor {
  return { state: { ...cursor.state, checkpoints: [...cursor.state.checkpoints, checkpoint], receipts: [] }, current: final };
}

export function unobserved(compaction: RunCompactionReport, at: Evaluated): Decision {
  return { compaction, bytesBefore: at.fitted.bytes, bytesAfter: null, observed: false };
}

function planReport(plan: Plan): CompactionPlanReport {
  const { bytes, envelope, protected: protectedBytes, summaries, work } = plan.floor;
  return {
    checkpoints: plan.chunks.length,
    floorBytes: bytes,
    reachable: plan.reachable,
    floor: { envelope, protected: protectedBytes, summaries, work },
  };
}

/** Why no plan reaches the target, with what the floor consists of. */
function insufficientRoom(plan: Plan, policy: Readonly<RunCompactionPolicy>): string {
  const f = plan.floor;
  const groups = plan.chunks.reduce((n, c) => n + c.seqs.length, 0);
  return (
    `insufficient_room: with all ${groups} compactable group(s) summarized in ${plan.chunks.length} checkpoint(s), the request is at least ` +
    `${f.bytes} bytes plus ${plan.chunks.length} x ${minSummaryRoom(policy)} for the summaries, over the target ${policy.targetBytes} ` +
    `(envelope and reserve ${f.envelope}, protected originals ${f.protected}, summary items without text ${f.summaries}, work that cannot be compacted now ${f.work})`
  );
}

function candidateReport(c: Candidate, fitted: Fitted): CandidateReport {
  let requestBytes = 0;
  for (const seq of c.seqs) requestBytes += fitted.groupBytes.get(seq) ?? 0;
  return {
    fromSeq: c.fromSeq,
    toSeq: c.toSeq,
    seqs: c.seqs,
    toolUnits: c.toolResultRefs.length,
    sourceHash: c.sourceHash,
    identityKey: c.identityKey,
    requestBytes,
    inputBytes: c.inputBytes,
  };
}

export function emptyCompaction(decision: RunCompactionReport['decision'], reason: string | null): RunCompactionReport {
  return {
    decision,
    reason,
    candidate: null,
    plan: null,
    summaryRequestId: null,
    attempt: null,
    outcome: null,
    summaryAllowance: null,
    summaryMaxChars: null,
    summaryBytes: null,
    bytesWithSummary: null,
    checkpointId: null,
    exhausted: null,
    refused: null,
  };
}

export function budgetOptions(b: SummaryBudgetOptions | undefined): {
  finalizationRequests: number;
  finalizationTokens: number;
  summaryTokens: number | undefined;
} {
  const finalizationRequests = b?.finalizationRequests ?? 1;
  const finalizationTokens = b?.finalizationTokens ?? 0;
  for (const [k, v] of Object.entries({ finalizationRequests, finalizationTokens, summaryTokens: b?.summaryTokens ?? 0 })) {
    // Requests are integer columns, tokens bigint ones (any safe integer).
    const max = k === 'finalizationRequests' ? INT4_MAX : Number.MAX_SAFE_INTEGER;
    if (!Number.isSafeInteger(v) || v < 0 || v > max) throw new RunPolicyError(`budget.${k} must be an integer from 0 to ${max}`);
  }
  return { finalizationRequests, finalizationTokens, summaryTokens: b?.summaryTokens };
}

/** Where semantic compaction starts: `compactAboveBytes`, or the target when unset (0). */
export function compactAbove(policy: Readonly<RunCompactionPolicy>): number {
  return policy.compactAboveBytes === 0 ? policy.targetBytes : policy.compactAboveBytes;
}

function findLast<T>(items: readonly T[], predicate: (item: T) => boolean): T | undefined {
  for (let i = items.length - 1; i >= 0; i--) if (predicate(items[i]!)) return items[i];
  return undefined;
}
