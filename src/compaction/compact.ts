import type pg from 'pg';
import type { Logger } from '../logger.ts';
import type { Summarizer } from '../gateway/types.ts';
import { CONVERSATION_PROMPT_VERSION } from '../gateway/prompts.ts';
import { DEFAULT_GROUNDING_POLICY, groundOutcome, type GroundingPolicy } from '../grounding.ts';
import { plannableRangeCount, plannableRanges } from '../plan.ts';
import * as q from '../db/queries/summaries.ts';
import { claimRange } from './claim.ts';
import { commitOutcome, DEFAULT_RETRY_DELAYS, type RetryDelays } from './commit.ts';

/** Raised when the summarizer's configuration is wrong (no key, 401...): the job fails loudly, no attempt spent. */
export class SummarizerConfigError extends Error {
  override name = 'SummarizerConfigError';
}

export interface CompactionContext {
  pool: pg.Pool;
  /** The gateway (admission + provider); its `model` is part of every identity. */
  summarizer: Summarizer;
  logger: Logger;
  workerId: string;
  leaseMs: number;
  promptVersion?: string;
  retryDelays?: Readonly<RetryDelays>;
  /** What an ungrounded fact in a summary does: `reject` spends the attempt, `flag` completes it and labels it. (Default: reject) */
  grounding?: GroundingPolicy;
}

export type RangeResult =
  | 'completed' | 'already_completed' | 'stale' | 'attempt_spent' | 'failed' | 'busy' | 'deferred' | 'lease_lost' | 'gone';

export interface CompactionReport {
  conversationId: string;
  pairCount: number;
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

/** Passes over ranges that became plannable while a job was working (a bound, not a figure reached in practice). */
const MAX_PASSES = 100;

/**
 * Compacts every plannable range of a conversation that has no completed
 * record, oldest first: claim, call the summarizer with no transaction open,
 * commit. Writes nothing to messages or runs. A deferral stops the walk (the
 * provider is refusing); a busy range is skipped: its holder is working on it.
 * When the walk ends, ranges that became plannable meanwhile are walked too,
 * so a conversation written faster than it is summarized settles as soon as
 * its last range does (a job that found a range busy exits, and this one,
 * the holder, carries on).
 * @throws SummarizerConfigError after recording a `config` outcome.
 */
export async function compactConversation(ctx: CompactionContext, conversationId: string, signal?: AbortSignal, knownPairCount?: number): Promise<CompactionReport> {
  const promptVersion = ctx.promptVersion ?? CONVERSATION_PROMPT_VERSION;
  // Each claim re-checks the count under its lock; this one only plans the walk.
  let pairCount = knownPairCount ?? await q.pairCountRead(ctx.pool, conversationId);
  const report: CompactionReport = { conversationId, pairCount, ranges: [], rescheduleAt: null, leaseWatchAt: null };
  const later = (at: Date | null) => {
    if (at !== null && (report.rescheduleAt === null || at < report.rescheduleAt)) report.rescheduleAt = at;
  };
  const watch = (at: Date) => {
    if (report.leaseWatchAt === null || at < report.leaseWatchAt) report.leaseWatchAt = at;
  };

  let walked = 0;
  for (let pass = 0; pass < MAX_PASSES; pass++) {
    const ranges = plannableRanges(pairCount).slice(walked);
    walked += ranges.length;
    for (const range of ranges) {
      const log = ctx.logger.child({ fromPair: range.fromPair, toPair: range.toPair });
      const add = (result: RangeResult, recordId?: string) => report.ranges.push({ ...range, result, recordId });

      const claim = await claimRange(ctx.pool, { conversationId, range, model: ctx.summarizer.model, promptVersion, workerId: ctx.workerId, leaseMs: ctx.leaseMs });
      if (claim.kind === 'done') { add('already_completed', claim.record.id); continue; }
      if (claim.kind === 'failed') { add('failed', claim.record.id); continue; }
      if (claim.kind === 'gone') { add('gone'); return report; }
      if (claim.kind === 'busy') { add('busy'); if (claim.until) watch(claim.until); continue; }
      if (claim.kind === 'deferred') { add('deferred'); later(claim.until); return report; }

      log.info({ recordId: claim.record.id, attemptsSpent: claim.record.attemptsSpent }, 'summarizing range');
      // No transaction is open here: the call may take minutes.
      const items = claim.pairs.map((p) => ({ id: p.assistantMessageId, text: p.assistantText }));
      const answer = await ctx.summarizer.summarize({ promptVersion, items, signal });
      // Every figure, date and identifier must be in the replies it summarizes (src/grounding.ts).
      const outcome = groundOutcome(answer, items, ctx.grounding ?? DEFAULT_GROUNDING_POLICY);
      const committed = await commitOutcome(ctx.pool, { record: claim.record, attemptId: claim.attemptId, workerId: ctx.workerId }, outcome, ctx.retryDelays ?? DEFAULT_RETRY_DELAYS);
      switch (committed.kind) {
        case 'completed':
          log.info({ recordId: committed.record.id, chars: outcome.kind === 'ok' ? outcome.text.length : 0 }, 'range summarized');
          add('completed', committed.record.id);
          break;
        case 'stale':
          log.warn({ recordId: committed.record.id, status: committed.record.status }, 'source changed while summarizing: recorded stale, attempt spent');
          add('stale', committed.record.id);
          // The new source is a new identity: look again at once.
          later(new Date());
          break;
        case 'spent':
          log.warn({ recordId: committed.record.id, outcome: outcome.kind, reason: 'reason' in outcome ? outcome.reason : undefined, status: committed.record.status }, 'summary attempt spent');
          add(committed.record.status === 'failed' ? 'failed' : 'attempt_spent', committed.record.id);
          if (committed.record.status === 'pending') later(committed.record.notBefore);
          break;
        case 'deferred':
          log.info({ recordId: committed.record.id, until: committed.until }, 'provider deferred the call: no attempt spent');
          add('deferred', committed.record.id);
          return { ...report, rescheduleAt: null };
        case 'config':
          throw new SummarizerConfigError(`summarizer configuration error (no attempt spent): ${committed.reason}`);
        case 'lease_lost':
          log.warn('lease lost before commit: another worker took the range over');
          add('lease_lost');
          break;
      }
    }
    // Pairs written while this pass ran may have made more ranges plannable.
    const now = await q.pairCountRead(ctx.pool, conversationId);
    if (plannableRangeCount(now) <= walked) break;
    pairCount = now;
    report.pairCount = now;
  }
  return report;
}
