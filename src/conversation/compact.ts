import type pg from 'pg';
import type { Logger } from '../support/logger.ts';
import type { Outcome, Summarizer } from '../support/summary-contract.ts';
import { CONVERSATION_PROMPT_VERSION } from '../gateway/prompts.ts';
import { DEFAULT_GROUNDING_POLICY, groundOutcomeAsync, type GroundingPolicy } from '../grounding/index.ts';
import { claimNextRange } from './claim.ts';
import { DEFAULT_RETRY_DELAYS, type RetryDelays } from './commit.ts';
import { commitRetrying } from './commit-retry.ts';
import { conversationMaterial } from './material.ts';
import { holdLease } from './lease.ts';
import * as q from '../db/queries/summaries.ts';
import { SourceboundError } from '../support/errors.ts';

/** Raised when the summarizer's configuration is wrong (no key, 401...): the job fails loudly, no attempt spent. */
export class SummarizerConfigError extends SourceboundError {
  override name = 'SummarizerConfigError';
}

export interface CompactionContext {
  pool: pg.Pool;
  /** The gateway (admission + provider); its `model` is part of every identity. */
  summarizer: Summarizer;
  logger: Logger;
  workerId: string;
  leaseMs: number;
  /** How often the lease is renewed while a call runs (conversation/lease.ts); 0: never. (Default: a third of `leaseMs`) */
  leaseRenewMs?: number;
  promptVersion?: string;
  retryDelays?: Readonly<RetryDelays>;
  /** What an ungrounded fact in a summary does: `reject` spends the attempt, `flag` completes it and labels it. (Default: reject) */
  grounding?: GroundingPolicy;
  /** Summarizer calls one scope may start per clock hour, across the fleet; over it a range is deferred to the next hour. 0 or absent: no limit. */
  scopeCallsPerHour?: number;
  /**
   * Send the claim and the commit as named prepared statements. Only when
   * `pool` reaches PostgreSQL directly, never through a transaction pooler
   * (the worker sets it when DATABASE_DIRECT_URL is not a separate URL, as it
   * lets graphile-worker prepare its own). (Default: false)
   */
  preparedStatements?: boolean;
}

export type RangeResult =
  'completed' | 'already_completed' | 'stale' | 'attempt_spent' | 'failed' | 'busy' | 'deferred' | 'lease_lost' | 'gone';

export interface CompactionReport {
  conversationId: string;
  /** The pair count the caller knew, if any: the job itself reads only the marks. */
  pairCount: number | null;
  ranges: { fromPair: number; toPair: number; result: RangeResult; recordId?: string }[];
  /** When the conversation's job should run again (deferral, a retry, a new source), if at all. */
  rescheduleAt: Date | null;
  /**
   * The earliest lease expiry among ranges held by another worker, if any. Not
   * a reason to hold the conversation's job back: a live holder picks up what
   * remains when it finishes. Only a watch in case the holder died (its own
   * job key, so later enqueues of the conversation still run at once).
   */
  leaseWatchAt: Date | null;
}

/** The lease renewal interval: the context's, else a third of the lease. */
export function leaseRenewMs(ctx: Pick<CompactionContext, 'leaseMs' | 'leaseRenewMs'>): number {
  return ctx.leaseRenewMs ?? Math.floor(ctx.leaseMs / 3);
}

/** Passes over the marks per job: a bound for a conversation edited without pause, not a figure reached in practice. */
const MAX_PASSES = 100;

/**
 * Compacts the ranges of a conversation that need work, oldest first: the
 * ranges its marks name (gained or changed since a record last bound them,
 * sourcebound.compaction_marks), so a job costs what needs work, not the
 * conversation's length. For each: claim (the claim finds the next mark
 * itself, sourcebound.claim_range()), call the summarizer with no transaction
 * open, commit. A one-range job is two statements. Writes nothing to
 * messages or runs. A deferral stops the walk (the provider is refusing); a
 * busy range is skipped: its holder is working on it. When a pass reaches the
 * last mark it starts again from the first one it has not left in place, so
 * ranges that became plannable or changed meanwhile are done by this job (a
 * job that found a range busy exits, and this one, the holder, carries on).
 * @throws SummarizerConfigError after recording a `config` outcome.
 */
export async function compactConversation(
  ctx: CompactionContext,
  conversationId: string,
  signal?: AbortSignal,
  knownPairCount?: number,
): Promise<CompactionReport> {
  const promptVersion = ctx.promptVersion ?? CONVERSATION_PROMPT_VERSION;
  const send = { prepared: ctx.preparedStatements ?? false };
  const report: CompactionReport = {
    conversationId,
    pairCount: knownPairCount ?? null,
    ranges: [],
    rescheduleAt: null,
    leaseWatchAt: null,
  };
  const later = (at: Date | null) => {
    if (at !== null && (report.rescheduleAt === null || at < report.rescheduleAt)) report.rescheduleAt = at;
  };
  const watch = (at: Date) => {
    if (report.leaseWatchAt === null || at < report.leaseWatchAt) report.leaseWatchAt = at;
  };

  // The marks this job visited and left in place (busy, spent, gone...), with
  // the generation it saw: not taken again unless their generation moves (an
  // edit: new work). A mark the claim or commit cleared is dropped from here.
  const leftInPlace = new Map<number, number>();
  let after = -1;
  let pass = 0;
  for (;;) {
    const claim = await claimNextRange(
      ctx.pool,
      {
        conversationId,
        after,
        wrap: pass + 1 < MAX_PASSES,
        skip: leftInPlace,
        model: ctx.summarizer.model,
        promptVersion,
        workerId: ctx.workerId,
        leaseMs: ctx.leaseMs,
      },
      send,
    );
    if (claim.kind === 'none') break;
    const range = claim.range;
    if (range.fromPair <= after) pass++;
    after = range.fromPair;
    leftInPlace.set(range.fromPair, claim.generation);
    const cleared = () => leftInPlace.delete(range.fromPair);
    const log = ctx.logger.child({ fromPair: range.fromPair, toPair: range.toPair });
    const add = (result: RangeResult, recordId?: string) => report.ranges.push({ ...range, result, recordId });

    if (claim.kind === 'done') {
      cleared();
      add('already_completed', claim.record.id);
      continue;
    }
    if (claim.kind === 'failed') {
      cleared();
      add('failed', claim.record.id);
      continue;
    }
    if (claim.kind === 'gone') {
      add('gone');
      continue;
    }
    if (claim.kind === 'busy') {
      add('busy');
      if (claim.until) watch(claim.until);
      continue;
    }
    if (claim.kind === 'deferred') {
      add('deferred');
      later(claim.until);
      return report;
    }

    log.info({ recordId: claim.record.id, attemptsSpent: claim.record.attemptsSpent }, 'summarizing range');
    // No transaction is open here: the call may take minutes.
    // The replies come in pair order, the range's ten pairs from its first.
    const items = conversationMaterial(claim.replies, range.fromPair, promptVersion);
    // Over its scope's hourly call limit (SOURCEBOUND_SCOPE_CALLS_PER_HOUR): deferred to the next hour, no attempt spent, no call.
    const limitedUntil = ctx.scopeCallsPerHour ? await q.scopeCallAdmit(ctx.pool, claim.record.scope, ctx.scopeCallsPerHour) : null;
    // The lease is renewed while the call runs; a claim lost meanwhile abandons the call.
    const lease = holdLease(
      ctx.pool,
      { summaryId: claim.record.id, attemptId: claim.attemptId, workerId: ctx.workerId, leaseMs: ctx.leaseMs },
      { renewEveryMs: leaseRenewMs(ctx), logger: log, signal },
    );
    let outcome: Outcome;
    try {
      const answer: Outcome =
        limitedUntil !== null
          ? { kind: 'deferred', reason: 'scope_call_limit', retryAfterMs: Math.max(0, limitedUntil.getTime() - Date.now()) }
          : await ctx.summarizer.summarize({ promptVersion, items, signal: lease.signal });
      // Every figure, date and identifier must be in the replies it summarizes (src/grounding/index.ts).
      outcome = await groundOutcomeAsync(answer, items, ctx.grounding ?? DEFAULT_GROUNDING_POLICY);
    } finally {
      lease.release();
    }
    // The answer is in hand: a commit whose connection is lost is tried again (commit-retry.ts).
    const committed = await commitRetrying(
      ctx.pool,
      { record: claim.record, attemptId: claim.attemptId, workerId: ctx.workerId },
      outcome,
      ctx.retryDelays ?? DEFAULT_RETRY_DELAYS,
      { logger: log, signal, send },
    );
    switch (committed.kind) {
      case 'completed':
        log.info({ recordId: committed.record.id, chars: outcome.kind === 'ok' ? outcome.text.length : 0 }, 'range summarized');
        cleared();
        add('completed', committed.record.id);
        break;
      case 'stale':
        // The edit moved the range's mark: the next pass summarizes the new source.
        log.warn(
          { recordId: committed.record.id, status: committed.record.status },
          'source changed while summarizing: recorded stale, attempt spent',
        );
        add('stale', committed.record.id);
        break;
      case 'spent':
        log.warn(
          {
            recordId: committed.record.id,
            outcome: outcome.kind,
            reason: 'reason' in outcome ? outcome.reason : undefined,
            status: committed.record.status,
          },
          'summary attempt spent',
        );
        add(committed.record.status === 'failed' ? 'failed' : 'attempt_spent', committed.record.id);
        if (committed.record.status === 'pending') later(committed.record.notBefore);
        break;
      case 'deferred':
        log.info({ recordId: committed.record.id, until: committed.until }, 'provider deferred the call: no attempt spent');
        add('deferred', committed.record.id);
        // commit_summary() scheduled the conversation's job at `until` itself.
        return { ...report, rescheduleAt: null };
      case 'config':
        throw new SummarizerConfigError(`summarizer configuration error (no attempt spent): ${committed.reason}`);
      case 'lease_lost':
        log.warn('lease lost before commit: another worker took the range over');
        add('lease_lost');
        break;
    }
    // Nothing marked is left: no statement to find that out.
    if (!committed.marksRemain) break;
  }
  return report;
}
