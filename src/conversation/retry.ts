import { sleep } from '../support/backoff.ts';
import { CONVERSATION_PROMPT_VERSION } from '../gateway/prompts.ts';
import { DEFAULT_GROUNDING_POLICY, groundOutcomeAsync } from '../grounding/index.ts';
import { sourceHash, sourceMessageIds } from './source-hash.ts';
import { RANGE_SIZE, rangeAt, type PairRange } from './plan.ts';
import { ConversationNotFoundError } from '../projection/projection-errors.ts';
import * as q from '../db/queries/summaries.ts';
import { claimRange } from './claim.ts';
import { DEFAULT_RETRY_DELAYS, MAX_ATTEMPTS } from './commit.ts';
import { commitRetrying } from './commit-retry.ts';
import { leaseRenewMs, SummarizerConfigError, type CompactionContext } from './compact.ts';
import { holdLease } from './lease.ts';
import type { Outcome } from '../support/summary-contract.ts';
import { SourceboundError } from '../support/errors.ts';

/**
 * Retry of a range that failed for good (two attempts of its identity
 * spent), under a new model identity. The identity of a record includes the
 * model, so a new model is a new identity with two attempts of its own; the
 * old identity is never attempted again: its record stays `failed`, and the
 * claim (sourcebound.claim_range()) answers `failed` for it without a call.
 *
 * A failed range has no mark, so no worker comes for it: the retry claims,
 * calls and commits itself, with the gateway it is given (admission,
 * classification) and the grounding check, as a worker's job would. It does
 * both attempts of the new identity when the first is spent; a deferral ends
 * it (the provider said when to come back: run it again then).
 */

/** Raised when a retry is refused (nothing failed, already completed, the same identity): the message says why and what to do. */
export class RetryRefusedError extends SourceboundError {
  override name = 'RetryRefusedError';
  readonly exitQuietly = true;
}

export interface RetryReport {
  conversationId: string;
  scope: string;
  range: PairRange;
  /** The identity retried under. */
  model: string;
  promptVersion: string;
  /** The failed-for-good records of the range's current source (other identities). */
  failed: { recordId: string; model: string; promptVersion: string; failureReason: string | null }[];
  result: 'completed' | 'already_completed' | 'failed' | 'deferred' | 'busy' | 'stale' | 'lease_lost';
  recordId: string | null;
  /** When to run the retry again (`deferred`, `busy`). */
  until: Date | null;
  /** The last outcome's reason, when it was not `ok`. */
  reason: string | null;
  /** Model calls made by this retry. */
  calls: number;
}

/**
 * Retries range `fromPair` of a conversation under `ctx.summarizer`'s identity.
 * @throws ConversationNotFoundError when the conversation is not in `scope`.
 * @throws RetryRefusedError when the range did not fail for good, already has a completed summary,
 *   or already failed for good under this same identity.
 * @throws SummarizerConfigError after recording a `config` outcome (no attempt spent).
 */
export async function retryRange(
  ctx: CompactionContext,
  conversationId: string,
  scope: string,
  fromPair: number,
  signal?: AbortSignal,
): Promise<RetryReport> {
  const promptVersion = ctx.promptVersion ?? CONVERSATION_PROMPT_VERSION;
  const model = ctx.summarizer.model;
  const actualScope = await q.conversationScopeRead(ctx.pool, conversationId);
  if (actualScope === null || actualScope !== scope) throw new ConversationNotFoundError(conversationId, scope);
  if (!Number.isSafeInteger(fromPair) || fromPair < 0 || fromPair % RANGE_SIZE !== 0) {
    throw new RetryRefusedError(`a range starts at a multiple of ${RANGE_SIZE}, got ${fromPair}`);
  }
  const range = rangeAt(fromPair / RANGE_SIZE);
  const label = `range ${range.fromPair}-${range.toPair}`;

  // What binds the range's source now (as inspect judges a binding).
  const pairs = await q.pairsRangeRead(ctx.pool, conversationId, range.fromPair, range.toPair);
  const ids = pairs.length === RANGE_SIZE ? sourceMessageIds(pairs).join() : null;
  const hash = pairs.length === RANGE_SIZE ? sourceHash(pairs) : null;
  const records = (await q.summariesOfConversationRead(ctx.pool, conversationId)).filter(
    (r) => r.fromPair === range.fromPair && r.hashVersion === 1 && r.sourceHash === hash && r.sourceMessageIds.join() === ids,
  );
  const completed = records.find((r) => r.status === 'completed');
  if (completed) {
    throw new RetryRefusedError(`${label} already has a completed summary (record ${completed.id}, ${completed.model}): nothing to retry`);
  }
  const failed = records.filter((r) => r.status === 'failed');
  if (failed.length === 0) {
    throw new RetryRefusedError(
      `${label} has not failed for good${pairs.length < RANGE_SIZE ? ' (it does not hold ten pairs)' : ''}: ` +
        'nothing to retry; `sourcebound inspect` shows its records, and the worker carries on with a range that still has attempts',
    );
  }
  const same = failed.find((r) => r.model === model && r.promptVersion === promptVersion);
  if (same) throw sameIdentity(label, model, same.id);

  const report: RetryReport = {
    conversationId,
    scope,
    range,
    model,
    promptVersion,
    failed: failed.map((r) => ({ recordId: r.id, model: r.model, promptVersion: r.promptVersion, failureReason: r.failureReason })),
    result: 'failed',
    recordId: null,
    until: null,
    reason: null,
    calls: 0,
  };
  const send = { prepared: ctx.preparedStatements ?? false };
  for (let turn = 0; turn < MAX_ATTEMPTS + 1; turn++) {
    const claim = await claimRange(
      ctx.pool,
      { conversationId, range, model, promptVersion, workerId: ctx.workerId, leaseMs: ctx.leaseMs },
      send,
    );
    switch (claim.kind) {
      case 'done':
        return { ...report, result: 'already_completed', recordId: claim.record.id };
      case 'failed':
        if (report.calls === 0) throw sameIdentity(label, model, claim.record.id);
        return { ...report, result: 'failed', recordId: claim.record.id };
      case 'busy':
        return { ...report, result: 'busy', until: claim.until };
      case 'deferred':
        return { ...report, result: 'deferred', until: claim.until };
      case 'gone':
        throw new RetryRefusedError(
          `${label} can no longer be summarized (the conversation changed: it is gone, or among the newest 20 pairs)`,
        );
      case 'claimed':
        break;
    }
    const log = ctx.logger.child({ conversationId, fromPair: range.fromPair, toPair: range.toPair, model });
    log.info({ recordId: claim.record.id, attemptsSpent: claim.record.attemptsSpent }, 'retrying range under a new model identity');
    // No transaction is open here: the call may take minutes.
    const items = claim.replies.map((p) => ({ id: p.assistantMessageId, text: p.assistantText }));
    const lease = holdLease(
      ctx.pool,
      { summaryId: claim.record.id, attemptId: claim.attemptId, workerId: ctx.workerId, leaseMs: ctx.leaseMs },
      { renewEveryMs: leaseRenewMs(ctx), logger: log, signal },
    );
    let outcome: Outcome;
    try {
      const answer = await ctx.summarizer.summarize({ promptVersion, items, signal: lease.signal });
      report.calls++;
      outcome = await groundOutcomeAsync(answer, items, ctx.grounding ?? DEFAULT_GROUNDING_POLICY);
    } finally {
      lease.release();
    }
    const committed = await commitRetrying(
      ctx.pool,
      { record: claim.record, attemptId: claim.attemptId, workerId: ctx.workerId },
      outcome,
      ctx.retryDelays ?? DEFAULT_RETRY_DELAYS,
      { logger: log, signal, send },
    );
    const reason = outcome.kind === 'ok' ? null : outcome.reason;
    switch (committed.kind) {
      case 'completed':
        return { ...report, result: 'completed', recordId: committed.record.id, reason: null };
      case 'stale':
        return { ...report, result: 'stale', recordId: committed.record.id, reason };
      case 'lease_lost':
        return { ...report, result: 'lease_lost', reason };
      case 'deferred':
        return { ...report, result: 'deferred', recordId: committed.record.id, until: committed.until, reason };
      case 'config':
        throw new SummarizerConfigError(`summarizer configuration error (no attempt spent): ${committed.reason}`);
      case 'spent':
        report.recordId = committed.record.id;
        report.reason = reason;
        if (committed.record.status === 'failed') return { ...report, result: 'failed' };
        // The second attempt of this identity, once its short wait is over.
        if (committed.record.notBefore) await sleep(Math.max(0, committed.record.notBefore.getTime() - Date.now()), signal);
        if (signal?.aborted) return { ...report, result: 'deferred', until: committed.record.notBefore };
        break;
    }
  }
  return report;
}

function sameIdentity(label: string, model: string, recordId: string): RetryRefusedError {
  return new RetryRefusedError(
    `${label} already failed for good under ${model} (record ${recordId}): a third attempt of the same identity is never made. ` +
      'Retry with another model: SOURCEBOUND_MODEL, SOURCEBOUND_SUMMARIZER, or --summarizer <module>',
  );
}
