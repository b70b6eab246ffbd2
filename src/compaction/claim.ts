import type pg from 'pg';
import { SOURCE_HASH_VERSION, sourceHash, sourceMessageIds } from '../hash.ts';
import { plannableRangeCount, type PairRange } from '../plan.ts';
import * as q from '../db/queries/summaries.ts';
import { inTransaction } from '../db/transaction.ts';

/**
 * Claim (DESIGN.md "Job identity and claim"): one transaction on one client
 * takes the range's advisory lock, reads its ten pairs from the eligibility
 * definition, computes ids and hash, and inserts or takes over the record of
 * that identity under a lease. The unique constraint on the identity is the
 * final arbiter; the lock only avoids wasted work.
 */

export type ClaimResult =
  | { kind: 'claimed'; record: q.SummaryRow; attemptId: number; pairs: q.PairRow[] }
  /** A completed record binds this exact source: nothing to do, no model call. */
  | { kind: 'done'; record: q.SummaryRow }
  /** Two attempts were spent on this identity: failed for good. */
  | { kind: 'failed'; record: q.SummaryRow }
  /** Another worker holds the range (lock or live lease); retry after `until` when known. */
  | { kind: 'busy'; until: Date | null }
  /** The provider asked us to wait (an earlier deferral). */
  | { kind: 'deferred'; until: Date }
  /** The conversation is gone or the range is no longer plannable. */
  | { kind: 'gone' };

export interface ClaimRequest {
  conversationId: string;
  range: PairRange;
  model: string;
  promptVersion: string;
  workerId: string;
  leaseMs: number;
}

export function claimRange(pool: pg.Pool, request: ClaimRequest): Promise<ClaimResult> {
  return inTransaction(pool, (client) => claimInTransaction(client, request));
}

async function claimInTransaction(db: pg.PoolClient, request: ClaimRequest): Promise<ClaimResult> {
  const { conversationId, range } = request;
  const { locked, state } = await q.rangeClaimLockTry(db, conversationId, range.fromPair);
  if (!locked) return { kind: 'busy', until: null };
  if (state === null || range.toPair >= plannableRangeCount(state.pairCount) * 10) return { kind: 'gone' };
  const { scope } = state;

  const pairs = await q.pairsRangeRead(db, conversationId, range.fromPair, range.toPair);
  if (pairs.length !== range.toPair - range.fromPair + 1) return { kind: 'gone' };

  const identity: q.SummaryIdentity = {
    conversationId,
    scope,
    fromPair: range.fromPair,
    toPair: range.toPair,
    sourceMessageIds: sourceMessageIds(pairs),
    sourceHash: sourceHash(pairs, SOURCE_HASH_VERSION),
    hashVersion: SOURCE_HASH_VERSION,
    model: request.model,
    promptVersion: request.promptVersion,
  };
  const inputChars = pairs.reduce((n, p) => n + p.assistantText.length, 0);

  let record = await q.summaryByIdentityLock(db, identity);
  if (record === null) {
    const claimed = await q.summaryClaimedInsert(db, identity, request.workerId, request.leaseMs, inputChars);
    return { kind: 'claimed', ...claimed, pairs };
  }

  switch (record.status) {
    case 'completed':
      return { kind: 'done', record };
    case 'failed':
      return { kind: 'failed', record };
    case 'running': {
      const expired = record.leaseExpiresAt !== null && record.leaseExpiresAt.getTime() <= (await dbNow(db)).getTime();
      if (!expired) return { kind: 'busy', until: record.leaseExpiresAt };
      // The holder died mid-call: its attempt may have reached the model, so it counts.
      await q.attemptsSettleUpdate(db, record.id, { outcome: 'unknown', spent: true, reason: 'lease_expired: the worker holding the claim stopped before settling' });
      if (record.attemptsSpent + 1 >= 2) {
        const failed = await q.summarySettleUpdate(db, record.id, { status: 'failed', spend: true, failureReason: 'two attempts spent (the last: lease expired)' });
        return { kind: 'failed', record: failed };
      }
      await q.summarySettleUpdate(db, record.id, { status: 'pending', spend: true, failureReason: 'lease expired' });
      break;
    }
    case 'pending':
    case 'stale': {
      if (record.notBefore !== null && record.notBefore.getTime() > (await dbNow(db)).getTime()) {
        return { kind: 'deferred', until: record.notBefore };
      }
      break;
    }
  }
  const claimed = await q.summaryReclaimUpdate(db, record.id, request.workerId, request.leaseMs, inputChars);
  return { kind: 'claimed', ...claimed, pairs };
}

/** Lease times are the database's, so workers with skewed clocks agree. */
async function dbNow(db: q.Queryable): Promise<Date> {
  const { rows } = await db.query<{ now: Date }>('select now() as now');
  return rows[0]!.now;
}
