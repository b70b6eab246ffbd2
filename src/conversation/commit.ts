import type pg from 'pg';
import type { Outcome } from '../support/summary-contract.ts';
import * as q from '../db/queries/summaries.ts';
import type { Queryable } from '../db/queryable.ts';

/** At most two attempts per identity (docs/design.md); the database's commit_summary() counts them. */
export const MAX_ATTEMPTS = 2;

/**
 * What settling an outcome came to. `marksRemain`: the conversation still has
 * a range marked as needing work after this commit (a job whose last range
 * this was can stop without looking again).
 */
export type CommitResult = CommitOutcome & { marksRemain: boolean };

type CommitOutcome =
  | { kind: 'completed'; record: q.SummaryRow }
  /** The source changed between claim and commit: recorded stale (attempt spent), never completed. */
  | { kind: 'stale'; record: q.SummaryRow }
  /** An attempt was spent; the identity will be tried again (pending) or is failed for good. */
  | { kind: 'spent'; record: q.SummaryRow }
  /** No attempt spent; try again at `until`. */
  | { kind: 'deferred'; record: q.SummaryRow; until: Date }
  /** Bad configuration: no attempt spent; the job must fail loudly. */
  | { kind: 'config'; record: q.SummaryRow; reason: string }
  /** Another worker took the claim over after our lease expired: our result is dropped. */
  | { kind: 'lease_lost' };

export interface RetryDelays {
  /** Wait after a deferral the provider gave no retry-after for. (Default: 30000) */
  deferMs: number;
  /** Wait before the second attempt after a spent one. (Default: 1000) */
  afterSpentMs: number;
}

export const DEFAULT_RETRY_DELAYS: Readonly<RetryDelays> = Object.freeze({ deferMs: 30_000, afterSpentMs: 1_000 });

/**
 * Settles one attempt in one statement, sourcebound.commit_summary(): the lease must still be ours; an `ok`
 * summary is committed only after the source is re-read and re-hashed, and a
 * completed range's mark is cleared in the same statement. The grounding
 * check was made before (compact.ts, in TypeScript, with no transaction
 * open); its result travels on the outcome and is stored with the attempt.
 */
export async function commitOutcome(
  pool: pg.Pool | Queryable,
  claim: { record: q.SummaryRow; attemptId: number; workerId: string },
  outcome: Outcome,
  delays: Readonly<RetryDelays> = DEFAULT_RETRY_DELAYS,
  send?: q.SendOptions,
): Promise<CommitResult> {
  const settle: q.CommitInput = { summaryId: claim.record.id, attemptId: claim.attemptId, workerId: claim.workerId, outcome: outcome.kind };
  switch (outcome.kind) {
    case 'ok':
      Object.assign(settle, { summary: outcome.text, requestId: outcome.requestId, usage: outcome.usage, grounding: outcome.grounding });
      break;
    case 'invalid':
      Object.assign(settle, {
        reason: outcome.reason,
        requestId: outcome.requestId,
        usage: outcome.usage,
        grounding: outcome.grounding,
        notBeforeMs: delays.afterSpentMs,
      });
      break;
    case 'unknown':
      Object.assign(settle, { reason: outcome.reason, requestId: outcome.requestId, notBeforeMs: delays.afterSpentMs });
      break;
    case 'deferred':
      Object.assign(settle, { reason: outcome.reason, notBeforeMs: outcome.retryAfterMs ?? delays.deferMs });
      break;
    case 'config':
      Object.assign(settle, { reason: outcome.reason });
      break;
  }
  const { kind, record, marksRemain } = await q.summaryCommit(pool, settle, send);
  switch (kind) {
    case 'lease_lost':
      return { kind, marksRemain };
    case 'deferred':
      return { kind, record: record!, until: record!.notBefore!, marksRemain };
    case 'config':
      return { kind, record: record!, reason: (outcome as { reason: string }).reason, marksRemain };
    default:
      return { kind, record: record!, marksRemain };
  }
}
