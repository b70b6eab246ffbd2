import type pg from 'pg';
import { RANGE_SIZE, rangeAt, type PairRange } from './plan.ts';
import * as q from '../db/queries/summaries.ts';
import type { Queryable } from '../db/queryable.ts';

/**
 * Claim (docs/design.md): one statement, sourcebound.claim_range(), takes the
 * range's advisory lock, reads its ten pairs from the eligibility definition,
 * computes ids and hash, and inserts or takes over the record of that
 * identity under a lease. The unique constraint on the identity is the final
 * arbiter; the lock only avoids wasted work. A claim that finds a completed
 * or failed record for the range's current source clears the range's mark.
 */

export type ClaimResult =
  | { kind: 'claimed'; record: q.SummaryRow; attemptId: number; replies: q.ReplyRow[] }
  /** A completed record binds this exact source: nothing to do, no model call. */
  | { kind: 'done'; record: q.SummaryRow }
  /** Two attempts were spent on this identity: failed for good. */
  | { kind: 'failed'; record: q.SummaryRow }
  /** Another worker holds the range (lock or live lease); its lease ends at `until` when known. */
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

export async function claimRange(pool: pg.Pool | Queryable, request: ClaimRequest, send?: q.SendOptions): Promise<ClaimResult> {
  return claimResult(await q.rangeClaim(pool, request, send));
}

export interface NextClaimRequest extends Omit<ClaimRequest, 'range'> {
  /** Only marks of ranges after this pair, unless `wrap`. (-1: all) */
  after: number;
  /** When nothing is left after `after`, take the first mark from the start (a new pass). */
  wrap: boolean;
  /** Marks already visited and left in place: from pair -> the generation seen. Taken again only once their generation moved. */
  skip: ReadonlyMap<number, number>;
}

/** What a next-mark claim took: its range, and the mark's generation as read just before the claim. */
export type NextClaimResult = { kind: 'none' } | (ClaimResult & { range: PairRange; generation: number });

/**
 * Finds the conversation's next mark and claims its range, in the same one
 * statement: a job needs no statement of its own to find its work.
 */
export async function claimNextRange(pool: pg.Pool | Queryable, request: NextClaimRequest, send?: q.SendOptions): Promise<NextClaimResult> {
  const row = await q.rangeNextClaim(pool, request, send);
  if (row.mark === null) return { kind: 'none' };
  return { ...claimResult(row), range: rangeAt(row.mark.fromPair / RANGE_SIZE), generation: row.mark.generation };
}

function claimResult(row: q.ClaimRow): ClaimResult {
  switch (row.kind) {
    case 'claimed':
      return { kind: 'claimed', record: row.record!, attemptId: row.attemptId!, replies: row.replies };
    case 'done':
    case 'failed':
      return { kind: row.kind, record: row.record! };
    case 'busy':
      return { kind: 'busy', until: row.until };
    case 'deferred':
      return { kind: 'deferred', until: row.until! };
    case 'gone':
      return { kind: 'gone' };
  }
}
