import type pg from 'pg';
import type { Grounding } from '../grounding.ts';
import type { Outcome } from '../gateway/types.ts';
import { sourceHash, sourceMessageIds } from '../hash.ts';
import * as q from '../db/queries/summaries.ts';
import { inTransaction } from '../db/transaction.ts';

/** At most two attempts per identity (DESIGN.md "Attempts, failure, immutability"). */
export const MAX_ATTEMPTS = 2;

/** What settling an outcome came to. */
export type CommitResult =
  | { kind: 'completed'; record: q.SummaryRow }
  /** The source changed between claim and commit: recorded stale, never completed. */
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
 * Settles one attempt in one transaction: the lease must still be ours; an
 * `ok` summary is committed only after re-reading the source and re-checking
 * its hash. The grounding check was made before (compact.ts, in TypeScript,
 * with no transaction open); its result travels on the outcome and is stored
 * with the attempt.
 */
export function commitOutcome(
  pool: pg.Pool,
  claim: { record: q.SummaryRow; attemptId: number; workerId: string },
  outcome: Outcome,
  delays: Readonly<RetryDelays> = DEFAULT_RETRY_DELAYS,
): Promise<CommitResult> {
  return inTransaction(pool, (client) => commitInTransaction(client, claim, outcome, delays));
}

async function commitInTransaction(
  db: pg.PoolClient,
  claim: { record: q.SummaryRow; attemptId: number; workerId: string },
  outcome: Outcome,
  delays: Readonly<RetryDelays>,
): Promise<CommitResult> {
  const record = await q.summaryByIdLock(db, claim.record.id, claim.attemptId);
  // Gone with its conversation, or taken over after our lease expired (that
  // worker already counted our attempt as spent).
  if (record === null || record.status !== 'running' || record.leaseOwner !== claim.workerId) return { kind: 'lease_lost' };
  // The lease owner is the worker process, shared by its jobs: a takeover by
  // another job of the same process leaves it unchanged but settles our
  // attempt. The record is locked, so this read cannot race a takeover.
  if (!record.attemptOpen) return { kind: 'lease_lost' };

  const settle = (o: string, spent: boolean, reason: string | null, extra: { requestId?: string | null; usage?: unknown; grounding?: Grounding | undefined } = {}) =>
    q.attemptsSettleUpdate(db, record.id, { outcome: o, spent, reason, ...extra }, claim.attemptId);

  switch (outcome.kind) {
    case 'ok': {
      const pairs = await q.pairsRangeRead(db, record.conversationId, record.fromPair, record.toPair);
      const unchanged = pairs.length === 10
        && sourceMessageIds(pairs).join() === record.sourceMessageIds.join()
        && sourceHash(pairs, record.hashVersion) === record.sourceHash;
      if (!unchanged) {
        // The call was dispatched and produced output: it spent the attempt of
        // this identity (DESIGN.md "Attempts"), or a source flipping back and
        // forth would reach the model with one identity any number of times.
        await settle('stale', true, 'the source changed while the summary was being made', { requestId: outcome.requestId, usage: outcome.usage, grounding: outcome.grounding });
        const final = record.attemptsSpent + 1 >= MAX_ATTEMPTS;
        const stale = await q.summarySettleUpdate(db, record.id, {
          status: final ? 'failed' : 'stale',
          spend: true,
          failureReason: final ? 'two attempts spent (the last: source changed before commit)' : 'source changed before commit',
        });
        return { kind: 'stale', record: stale };
      }
      await settle('ok', true, null, { requestId: outcome.requestId, usage: outcome.usage, grounding: outcome.grounding });
      const completed = await q.summarySettleUpdate(db, record.id, { status: 'completed', spend: true, summary: outcome.text });
      return { kind: 'completed', record: completed };
    }
    case 'invalid':
    case 'unknown': {
      await settle(outcome.kind, true, outcome.reason, {
        requestId: outcome.requestId,
        usage: outcome.kind === 'invalid' ? outcome.usage : undefined,
        grounding: outcome.kind === 'invalid' ? outcome.grounding : undefined,
      });
      const final = record.attemptsSpent + 1 >= MAX_ATTEMPTS;
      const next = await q.summarySettleUpdate(db, record.id, {
        status: final ? 'failed' : 'pending',
        spend: true,
        failureReason: `${outcome.kind}: ${outcome.reason}`,
        notBeforeMs: final ? null : delays.afterSpentMs,
      });
      return { kind: 'spent', record: next };
    }
    case 'deferred': {
      await settle('deferred', false, outcome.reason);
      const next = await q.summarySettleUpdate(db, record.id, { status: 'pending', spend: false, failureReason: `deferred: ${outcome.reason}`, notBeforeMs: outcome.retryAfterMs ?? delays.deferMs });
      const until = next.notBefore!;
      await q.compactionJobAtAdd(db, record.conversationId, until);
      return { kind: 'deferred', record: next, until };
    }
    case 'config': {
      await settle('config', false, outcome.reason);
      const next = await q.summarySettleUpdate(db, record.id, { status: 'pending', spend: false, failureReason: `config: ${outcome.reason}` });
      return { kind: 'config', record: next, reason: outcome.reason };
    }
  }
}
