import type pg from 'pg';
import { runLockTry, runLockWait } from '../db/queries/run-history.ts';
import { runSummaryRequestSettle, runSummaryRequestsExpire } from '../db/queries/run-receipts.ts';
import { inTransaction, rollbackTo, savepoint } from '../db/transaction.ts';
import { groundOutcomeAsync } from '../grounding/index.ts';
import { evaluate, handedOut, loadState, materialize, requestInput } from './assemble.ts';
import { commitCheckpoint, judge } from './gate.ts';
import { hookQueue } from './hooks.ts';
import { cannotFitOf } from './overflow.ts';
import { resolvePolicy } from './policy.ts';
import { type RequestInput } from './request-slots.ts';
import { RunNotFoundError } from './run-errors.ts';
import { runIdOf } from './stored.ts';
import { settlementOf, summaryCall } from './summarize.ts';
import { type RunCompactionPolicy, type RunRequest, type SummaryBudgetOptions } from './types.ts';
import { type CannotFit, type RunCompactionReport, type PrepareReport, type RunCompactionHooks } from './reports.ts';
import { type AnthropicRunRequest, toAnthropicRequest } from './wire.ts';
import { type Summarizer } from '../support/summary-contract.ts';
import {
  type Context,
  type Cursor,
  type Decision,
  type Dispatch,
  type Stop,
  advance,
  budgetOptions,
  compactAbove,
  emptyCompaction,
  following,
  unobserved,
} from './prepare-steps.ts';

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
 * identity. After a summary request, the request handed out is assembled
 * from the records as they are when the call returns, so a correction
 * recorded while a summary was being written is in it.
 * @throws RunNotFoundError when the Run is not in `scope`; RunPolicyError for an unusable policy.
 */
export async function prepareRunRequest(options: PrepareRunRequestOptions): Promise<PreparedRunRequest> {
  const { pool, scope, summarizer, hooks, signal } = options;
  const runId = runIdOf(options.runId, scope);
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
      if (d.observed)
        observers.push('onAfterCompaction', { phase: 'after', runId, scope, bytesBefore: d.bytesBefore, compaction: d.compaction });
    }
  };

  const phase1 = await inTransaction(pool, async (client) => {
    const locked = await runLockTry(client, runId);
    const expired = locked ? await runSummaryRequestsExpire(client, scope, runId, new Date(clock())) : [];
    const state = await loadState(client, runId, scope, policy);
    if (!state) throw new RunNotFoundError(`run ${runId} not found in scope ${scope}`);
    const before = evaluate(state, input, policy);
    const cursor: Cursor = { state, current: before };
    const made: Decision[] = [];
    const done = (decision: RunCompactionReport['decision'], reason: string | null) => {
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
    // Every figure of the summary must be in its material (src/grounding/index.ts); checked before the checkpoint.
    const outcome = await groundOutcomeAsync(
      await summaryCall(summarizer!, step.items, step.maxChars, policy.summaryDeadlineMs, signal),
      step.items,
      policy.grounding,
    );
    const receipt = { id: step.receiptId, attempt: step.attempt };
    // Judged (no database access) before the receipt is settled, so that a refusal is recorded on the
    // receipt with its reason: an answer is judged once, and the next candidate is other material (nextStep).
    const verdict =
      outcome.kind === 'ok'
        ? judge(
            step.cursor.state,
            input,
            policy,
            step.cursor.current,
            step.candidate,
            receipt,
            outcome.text,
            step.goal,
            outcome.grounding?.ungrounded ?? [],
          )
        : null;
    const leg = await inTransaction(pool, async (client) => {
      await runLockWait(client, runId);
      const made: Decision[] = [];
      const stop = (compaction: RunCompactionReport, cursor = step.cursor, bytesAfter: number | null = null) => {
        made.push({ compaction, bytesBefore, bytesAfter, observed: true });
        return { made, next: { kind: 'stop', cursor } as Dispatch | Stop, error: undefined as unknown };
      };
      const settled = settlementOf(outcome, step.reservedTokens, clock());
      const leaseLost = () =>
        stop({
          ...step.compaction,
          decision: 'failed',
          outcome: outcome.kind,
          reason: 'lease_lost: the receipt was settled as unknown before this call returned',
        });
      if (outcome.kind !== 'ok' || !verdict!.accepted) {
        // Every outcome but an accepted answer is settled alone; a refused answer with the gate's reason.
        const settlement = verdict !== null && !verdict.accepted ? { ...settled, reason: verdict.compaction.reason } : settled;
        if (!(await runSummaryRequestSettle(client, scope, step.receiptId, settlement))) return leaseLost();
        if (outcome.kind !== 'ok') return stop({ ...step.compaction, decision: 'failed', outcome: outcome.kind, reason: outcome.reason });
        return stop({ ...step.compaction, ...verdict!.compaction, outcome: 'ok' });
      }
      const judged = verdict!;
      // The receipt settled ok with its grounding verdict and the checkpoint, in one call.
      const commit = await commitCheckpoint(client, step.cursor.state, input, judged.row, settled);
      if (commit.kind === 'lease_lost') return leaseLost();
      if (commit.kind === 'stale') {
        // Refused after all: the receipt is settled alone, with that reason.
        await runSummaryRequestSettle(client, scope, step.receiptId, { ...settled, reason: commit.reason });
        return stop({
          ...step.compaction,
          ...judged.compaction,
          decision: 'rejected',
          reason: commit.reason,
          checkpointId: null,
          outcome: 'ok',
        });
      }
      const compaction: RunCompactionReport = { ...step.compaction, ...judged.compaction, outcome: 'ok' };
      const cursor = following(step.cursor, judged.row, judged.final);
      const result = stop(compaction, cursor, judged.final.fitted.bytes);
      if (judged.final.fitted.bytes <= policy.targetBytes) return result;
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

  // What was recorded while a summary request was out (a user correction above all: a call may spend
  // maxSummariesPerPrepare x summaryDeadlineMs on them) is in the request handed out: it is assembled again
  // from the records as they are now. Without a summary request, phase 1 read them moments ago.
  let current = next.cursor.current;
  if ((phase1.context?.summaries ?? 0) > 0) {
    const now = await loadState(pool, runId, scope, policy);
    if (!now) throw new RunNotFoundError(`run ${runId} not found in scope ${scope}`);
    current = evaluate(now, input, policy);
  }
  // Over the threshold after compaction: the newest groups' results by reference too (fit's last resort).
  const final = handedOut(current, policy);
  const { before, expired } = phase1;
  const steps = [...before.fitted.steps];
  for (const d of decisions)
    if (d.bytesAfter !== null) steps.push({ step: 'compaction', bytesBefore: d.bytesBefore, bytesAfter: d.bytesAfter });
  const lastResort = final.fitted.steps.at(-1)!;
  if (final !== current && lastResort.step === 'reference_recent') steps.push(lastResort);
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
    reason:
      cannotFit === null
        ? null
        : `cannot_fit: over the threshold after reversible fitting${committed > 0 ? ` and ${committed} new checkpoint(s)` : ''} (${final.fitted.bytes} > ${policy.thresholdBytes} bytes); ` +
          `most held by ${cannotFit.holders
            .slice(0, 3)
            .map((h) => `${h.what} ${h.bytes}`)
            .join(', ')}; compaction ${compaction.decision}${compaction.reason ? `: ${compaction.reason}` : ''}`,
    hookErrors,
  };
  if (cannotFit !== null) return { ok: false, request: null, body: null, cannotFit, report };
  return { ok: true, request, body: toAnthropicRequest(request), report };
}
