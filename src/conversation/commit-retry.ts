import type pg from 'pg';
import type { Logger } from '../support/logger.ts';
import type { Outcome } from '../support/summary-contract.ts';
import { jitter, sleep } from '../support/backoff.ts';
import { connectionLost } from '../db/connection-lost.ts';
import * as q from '../db/queries/summaries.ts';
import type { Queryable } from '../db/queryable.ts';
import { commitOutcome, type CommitResult, type RetryDelays } from './commit.ts';

/**
 * Commit retry: the model's answer is in hand, so a commit whose connection
 * was lost (terminated backend, cut socket, restart) is tried again on a new
 * connection, until the claim's lease ends. Left alone, the claim would run
 * out its lease and its takeover would count the attempt as unknown, spent:
 * an answer paid for and thrown away (test/faults/03-connection-faults.test.ts
 * ended with ranges failed for good that way).
 *
 * Why a retry is safe: sourcebound.commit_summary() settles only an open attempt
 * of a running record under our lease, and re-reads and re-hashes the source
 * before it completes anything. A first commit that did land before its
 * connection was cut leaves the attempt settled, so the retry changes nothing
 * and answers `lease_lost`; a source edited meanwhile makes the retry `stale`.
 * The database decides; this only reads back, after an in-doubt `lease_lost`,
 * whether the landed commit was ours, so the report says what happened.
 */

/** First wait between tries and its cap (jittered). */
const RETRY_FIRST_MS = 50;
const RETRY_MAX_MS = 1000;

export interface CommitRetryOptions {
  logger: Logger;
  /** Stops retrying (the worker is stopping or cutting its calls). */
  signal?: AbortSignal;
  /** Try no later than this (epoch ms). (Default: the claim's lease expiry) */
  deadlineAt?: number;
  /** How the commit is sent (named prepared statement on a direct connection). (Default: unnamed) */
  send?: q.SendOptions;
}

/**
 * commitOutcome(), tried again while its connection is lost.
 * @throws the last error when it is not a lost connection, or the deadline or signal came first.
 */
export async function commitRetrying(
  pool: pg.Pool | Queryable,
  claim: { record: q.SummaryRow; attemptId: number; workerId: string },
  outcome: Outcome,
  delays: Readonly<RetryDelays>,
  options: CommitRetryOptions,
): Promise<CommitResult> {
  const deadlineAt = options.deadlineAt ?? claim.record.leaseExpiresAt?.getTime() ?? Date.now();
  let cut = 0;
  for (let delay = RETRY_FIRST_MS; ; delay = Math.min(delay * 2, RETRY_MAX_MS)) {
    try {
      const result = await commitOutcome(pool, claim, outcome, delays, options.send);
      if (result.kind === 'lease_lost' && cut > 0) {
        const landed = await landedCommitRead(pool, claim, outcome);
        options.logger.info(
          { recordId: claim.record.id, tries: cut + 1, kind: landed.kind },
          landed.kind === 'lease_lost'
            ? 'commit retried after a lost connection: the claim was taken over meanwhile'
            : 'the commit that lost its connection had landed',
        );
        return landed;
      }
      if (cut > 0)
        options.logger.info({ recordId: claim.record.id, tries: cut + 1, kind: result.kind }, 'commit settled on a new connection');
      return result;
    } catch (error) {
      const wait = jitter(delay);
      if (!connectionLost(error) || options.signal?.aborted || Date.now() + wait > deadlineAt) throw error;
      cut++;
      options.logger.warn(
        { err: error, recordId: claim.record.id, tries: cut, retryInMs: wait },
        'commit lost its connection; the answer is in hand, trying again',
      );
      await sleep(wait, options.signal);
    }
  }
}

/**
 * After a cut commit and a retry that found the attempt settled: what the
 * first commit recorded, when it was ours (same attempt, same worker, our
 * outcome); otherwise the claim was taken over (`lease_lost`).
 */
async function landedCommitRead(
  pool: pg.Pool | Queryable,
  claim: { record: q.SummaryRow; attemptId: number; workerId: string },
  outcome: Outcome,
): Promise<CommitResult> {
  // Our attempt's row and its record, by id: not every attempt of the conversation.
  const landed = await q.summaryAttemptRead(pool, claim.record.id, claim.attemptId);
  if (!landed || landed.attempt.workerId !== claim.workerId) return { kind: 'lease_lost', marksRemain: true };
  const { attempt, record } = landed;
  switch (outcome.kind) {
    case 'ok':
      if (attempt.outcome === 'ok') return { kind: 'completed', record, marksRemain: true };
      if (attempt.outcome === 'stale') return { kind: 'stale', record, marksRemain: true };
      break;
    case 'invalid':
    case 'unknown':
      if (attempt.outcome === outcome.kind && attempt.reason === outcome.reason) return { kind: 'spent', record, marksRemain: true };
      break;
    case 'deferred':
      if (attempt.outcome === 'deferred') return { kind: 'deferred', record, until: record.notBefore ?? new Date(), marksRemain: true };
      break;
    case 'config':
      if (attempt.outcome === 'config') return { kind: 'config', record, reason: outcome.reason, marksRemain: true };
      break;
  }
  return { kind: 'lease_lost', marksRemain: true };
}
