/**
 * SQL of the pair index itself (sourcebound.pairs), named
 * noun-first: its drift from the definition and its rebuild. Both read a
 * whole conversation: for operators (`inspect`, `repair`) and tests, never
 * for hot paths.
 */
import type pg from 'pg';
import type { Queryable } from '../queryable.ts';

/** One row where the index differs from the definition (sourcebound.pairs_drift). */
export interface PairDriftRow {
  runId: string;
  expectedIndex: number | null;
  actualIndex: number | null;
  problem: 'missing' | 'extra' | 'wrong_index' | 'wrong_messages';
}

/** Every row where a conversation's pair index differs from the definition; empty when it is exact. */
export async function pairsDriftRead(db: Queryable, conversationId: string): Promise<PairDriftRow[]> {
  const { rows } = await db.query<PairDriftRow>(
    `select run_id as "runId", expected_index::int as "expectedIndex", actual_index as "actualIndex", problem
     from sourcebound.pairs_drift($1) order by coalesce(expected_index, actual_index), run_id`,
    [conversationId],
  );
  return rows;
}

/**
 * Rebuilds a conversation's pair index from the definition under its pair
 * lock (sourcebound.pairs_rebuild()); returns how many rows were wrong
 * (0: nothing was written). Run it in a transaction.
 */
export async function pairsRebuild(db: Queryable, conversationId: string): Promise<number> {
  const { rows } = await db.query<{ n: number }>('select sourcebound.pairs_rebuild($1) as n', [conversationId]);
  return rows[0]!.n;
}
