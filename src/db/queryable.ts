import type pg from 'pg';

/**
 * What every query function takes: anything with pg's `query`, so a pool, a
 * pool client inside the caller's transaction, or a plain client. The caller
 * decides the transaction; the query function only runs its statement.
 */
export type Queryable = Pick<pg.ClientBase, 'query'>;
