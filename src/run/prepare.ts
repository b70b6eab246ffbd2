import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import {
  runBudgetEnsure, runBudgetReserve, runLockTry, runLockWait, runResultExcerpts, runStateLoad, runSummaryRequestInsert,
  runSummaryRequestSettle, runSummaryRequestsExpire, type RunState,
} from '../db/queries/run.ts';
import { RUN_PROMPT_VERSION } from '../gateway/prompts.ts';
import type { MaterialItem, Summarizer } from '../gateway/types.ts';
import { candidateOver, excerptRefs, selectCandidate, summaryMaterial, type Candidate } from './candidate.ts';
import { isUniqueViolation, RunNotFoundError, RunPolicyError } from './errors.ts';
import { RUN_HASH_VERSION } from './hash.ts';
import { observe } from './hooks.ts';
import { resolvePolicy } from './policy.ts';
import { evaluate, hypothetical, materialize, requestInput, type Evaluated } from './assemble.ts';
import { gateAndCommit } from './gate.ts';
import type { Fitted, RequestInput } from './project.ts';
import { settlementOf, summaryCall } from './summarize.ts';
import { inTransaction, rollbackTo, savepoint } from './tx.ts';
import type {
  CandidateReport, CompactionReport, PrepareReport, RunCompactionHooks, RunCompactionPolicy, RunRequest,
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
}

export interface PreparedRunRequest {
  request: RunRequest;
  report: PrepareReport;
}


interface Done {
  kind: 'done';
  final: Evaluated;
  compaction: CompactionReport;
}

interface Dispatch {
  kind: 'dispatch';
  candidate: Candidate;
  items: MaterialItem[];
  receiptId: string;
  attempt: number;
  allowance: number;
  reservedTokens: number;
  compaction: CompactionReport;
}

interface Phase1 {
  state: RunState;
  before: Evaluated;
  expired: string[];
  plan: Done | Dispatch;
}

/**
 * Builds the Run's complete next request and says what it did.
 *
 * 1. Measure the full request (system, tools, history, catalog, reserve).
 * 2. Above the target: reversible fitting (compact catalog, older rereadable
 *    tool bodies as references).
 * 3. Still above the threshold: at most one semantic compaction: a candidate
 *    of older settled work, a summary request (receipt committed first, budget
 *    reserved, deadline, cancellation, no transaction open during the call),
 *    the net-benefit gate, then an immutable checkpoint.
 *
 * Preparers of one Run are serialized by a transaction-scoped advisory lock;
 * one that does not get it still returns a request (from committed records)
 * and reports `busy`. Never sends a summary for a candidate whose earlier
 * outcome is unknown under any other identity.
 * @throws RunNotFoundError when the Run is not in `scope`; RunPolicyError for an unusable policy.
 */
export async function prepareRunRequest(options: PrepareRunRequestOptions): Promise<PreparedRunRequest> {
  const { pool, runId, scope, summarizer, hooks, signal } = options;
  const policy = resolvePolicy(options.policy);
  const input = requestInput(options);
  const clock = options.clock ?? Date.now;
  const budget = budgetOptions(options.budget);
  const hookErrors: string[] = [];

  const phase1 = await inTransaction(pool, async (client): Promise<Phase1> => {
    const locked = await runLockTry(client, runId);
    const expired = locked ? await runSummaryRequestsExpire(client, runId, new Date(clock())) : [];
    const state = await runStateLoad(client, runId, scope);
    if (!state) throw new RunNotFoundError(`run ${runId} not found in scope ${scope}`);
    const before = evaluate(state, input, policy);
    const done = (decision: CompactionReport['decision'], reason: string | null, extra: Partial<CompactionReport> = {}): Phase1 =>
      ({ state, before, expired, plan: { kind: 'done', final: before, compaction: { ...emptyCompaction(decision, reason), ...extra } } });

    if (before.fitted.bytes <= policy.thresholdBytes) return done('not_needed', null);
    if (!policy.enabled) return done('disabled', 'policy.enabled is false');
    if (!summarizer) return done('skipped', 'no_summarizer');
    if (!locked) return done('skipped', 'busy: another preparer holds the run');
    if (signal?.aborted) return done('skipped', 'cancelled');

    const selection = selectCandidate(state, before.projection, policy, summarizer.model);
    if (!selection.ok) return done('skipped', selection.reason);
    let candidate = selection.candidate;
    if (state.receipts.some((r) => r.status === 'dispatched')) return done('skipped', 'summary_in_flight', { candidate: candidateReport(candidate, before.fitted) });

    // An unknown outcome pins its identity: the same material is never sent again under another one.
    const lastSpent = findLast(state.receipts, (r) => r.spent === true);
    if (lastSpent?.status === 'unknown' && lastSpent.identityKey !== candidate.identityKey) {
      const pinned = lastSpent.model === summarizer.model
        ? candidateOver(state, before.projection, policy, summarizer.model, lastSpent.compactedSeqs) : null;
      if (!pinned || pinned.identityKey !== lastSpent.identityKey) {
        return done('skipped', `unknown_outcome_pinned:${lastSpent.id}`, { candidate: candidateReport(candidate, before.fitted) });
      }
      candidate = pinned;
    }
    const report = candidateReport(candidate, before.fitted);
    const same = state.receipts.filter((r) => r.identityKey === candidate.identityKey);

    // A summary of exactly this material already came back (and was not committed): re-judge it, no new call.
    const reusable = findLast(same, (r) => r.status === 'ok' && r.checkpointId === null && r.summary !== null);
    if (reusable) {
      const gated = await gateAndCommit(client, state, input, policy, before, candidate, reusable, reusable.summary!, reusable.answerModel ?? reusable.model);
      return { state, before, expired, plan: { kind: 'done', final: gated.final, compaction: { ...emptyCompaction('rejected', null), ...gated.compaction, candidate: report, reusedSummary: true, outcome: 'ok' } } };
    }
    if (same.filter((r) => r.spent === true).length >= policy.maxAttempts) {
      return done('skipped', same.at(-1)?.status === 'unknown' ? 'attempts_exhausted:last_outcome_unknown' : 'attempts_exhausted', { candidate: report });
    }
    const waiting = findLast(same, (r) => r.status === 'deferred' && r.notBefore !== null && Date.parse(r.notBefore) > clock());
    if (waiting) return done('skipped', `deferred_until:${waiting.notBefore}`, { candidate: report });

    // Room for the summary: what keeps the request at the target and saves enough. An unknown
    // summary size is never taken as zero: the summarizer is held to this allowance.
    const bare = evaluate(state, input, policy, hypothetical(candidate, '', randomUUID()));
    const allowance = Math.min(policy.summaryCapBytes, policy.targetBytes - bare.fitted.bytes, before.fitted.bytes - policy.minSavingBytes - bare.fitted.bytes);
    if (allowance < policy.minSummaryBytes) return done('skipped', `insufficient_room:${allowance}`, { candidate: report });

    const material = summaryMaterial(candidate, policy, await runResultExcerpts(client, runId, excerptRefs(candidate), policy.toolExcerptBytes));
    await runBudgetEnsure(client, runId, null, null);
    const reservedTokens = budget.summaryTokens ?? Math.ceil(material.inputBytes / 3) + allowance + 512;
    await savepoint(client, 'dispatch');
    if (!(await runBudgetReserve(client, runId, 1, reservedTokens, budget.finalizationRequests, budget.finalizationTokens))) {
      await rollbackTo(client, 'dispatch');
      return done('skipped', 'finalization_reserve', { candidate: report });
    }
    let receipt: { id: string; attempt: number };
    try {
      receipt = await runSummaryRequestInsert(client, {
        runId, conversationId: state.run.conversationId, scope: state.run.scope, identityKey: candidate.identityKey,
        predecessorId: candidate.predecessorId, fromSeq: candidate.fromSeq, toSeq: candidate.toSeq, compactedSeqs: candidate.seqs,
        sourceHash: candidate.sourceHash, hashVersion: RUN_HASH_VERSION, model: summarizer.model, promptVersion: RUN_PROMPT_VERSION,
        maxChars: allowance, inputBytes: material.inputBytes, reservedRequests: 1, reservedTokens,
        leaseExpiresAt: new Date(clock() + policy.summaryDeadlineMs + policy.leaseGraceMs),
      });
    } catch (error) {
      const code = (error as { code?: string }).code;
      if (code !== '23000' && !isUniqueViolation(error)) throw error;
      await rollbackTo(client, 'dispatch');
      return done('skipped', isUniqueViolation(error, 'run_summary_requests_in_flight_key') ? 'summary_in_flight' : 'attempts_exhausted', { candidate: report });
    }
    return {
      state, before, expired,
      plan: {
        kind: 'dispatch', candidate, items: material.items, receiptId: receipt.id, attempt: receipt.attempt, allowance, reservedTokens,
        compaction: { ...emptyCompaction('pending', null), candidate: { ...report, inputBytes: material.inputBytes }, summaryRequestId: receipt.id, attempt: receipt.attempt, summaryAllowance: allowance },
      },
    };
  });

  const { state, before, expired } = phase1;
  let final: Evaluated;
  let compaction: CompactionReport;
  if (phase1.plan.kind === 'done') {
    ({ final, compaction } = phase1.plan);
    // A stored summary re-judged without a model call is still a compaction decision: observed.
    if (compaction.reusedSummary) {
      await observe(hooks, 'onAfterCompaction', { phase: 'after', runId, scope, bytesBefore: before.fitted.bytes, compaction }, hookErrors);
    }
  } else {
    const plan = phase1.plan;
    await observe(hooks, 'onBeforeCompaction', { phase: 'before', runId, scope, bytesBefore: before.fitted.bytes, compaction: plan.compaction }, hookErrors);
    // No transaction is open during the model call: the receipt is already committed.
    const outcome = await summaryCall(summarizer!, plan.items, plan.allowance, policy.summaryDeadlineMs, signal);
    const settled = await inTransaction(pool, async (client) => {
      await runLockWait(client, runId);
      const settlement = settlementOf(outcome, plan.reservedTokens, clock());
      if (!(await runSummaryRequestSettle(client, plan.receiptId, settlement))) {
        return { final: before, compaction: { ...plan.compaction, decision: 'failed' as const, outcome: outcome.kind, reason: 'lease_lost: the receipt was settled as unknown before this call returned' } };
      }
      if (outcome.kind !== 'ok') {
        return { final: before, compaction: { ...plan.compaction, decision: 'failed' as const, outcome: outcome.kind, reason: outcome.reason } };
      }
      const receipt = { id: plan.receiptId, attempt: plan.attempt };
      const gated = await gateAndCommit(client, state, input, policy, before, plan.candidate, receipt, outcome.text, outcome.model);
      return { final: gated.final, compaction: { ...plan.compaction, ...gated.compaction, outcome: 'ok' as const } };
    });
    ({ final, compaction } = settled);
    await observe(hooks, 'onAfterCompaction', { phase: 'after', runId, scope, bytesBefore: before.fitted.bytes, compaction }, hookErrors);
  }

  const steps = [...before.fitted.steps];
  if (compaction.decision === 'committed') steps.push({ step: 'compaction', bytesBefore: before.fitted.bytes, bytesAfter: final.fitted.bytes });
  const fits = final.fitted.bytes <= policy.thresholdBytes;
  return {
    request: await materialize(pool, runId, final.fitted),
    report: {
      runId,
      thresholdBytes: policy.thresholdBytes,
      targetBytes: policy.targetBytes,
      steps,
      references: final.fitted.references,
      catalog: final.fitted.catalog,
      checkpointsUsed: final.projection.usedCheckpoints,
      brokenCheckpoints: final.projection.brokenCheckpoints,
      compaction,
      expiredReceipts: expired,
      bytes: final.fitted.bytes,
      fits,
      reason: fits ? null : `over the threshold after reversible fitting (${final.fitted.bytes} > ${policy.thresholdBytes} bytes); compaction ${compaction.decision}${compaction.reason ? `: ${compaction.reason}` : ''}`,
      hookErrors,
    },
  };
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
    decision, reason, candidate: null, summaryRequestId: null, attempt: null, outcome: null, reusedSummary: false,
    summaryAllowance: null, summaryBytes: null, bytesWithSummary: null, checkpointId: null,
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

function findLast<T>(items: readonly T[], predicate: (item: T) => boolean): T | undefined {
  for (let i = items.length - 1; i >= 0; i--) if (predicate(items[i]!)) return items[i];
  return undefined;
}
