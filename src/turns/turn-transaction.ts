import type pg from 'pg';
import { databaseCondition } from '../db/database-errors.ts';
import { SourceboundError } from '../support/errors.ts';
import type { TurnDatabase } from './types.ts';

/**
 * Runs one helper's statements as one unit on `db`:
 * - a pool: BEGIN ISOLATION LEVEL READ COMMITTED ... COMMIT on a checked-out
 *   client. Read committed whatever the server's default: the pair triggers
 *   refuse writes from a transaction snapshot (sourcebound.pair_write_refused()).
 * - an idle client: the same, on that client.
 * - a client inside the caller's transaction: a savepoint, released on
 *   success and rolled back to on a throw, so the caller's transaction stays
 *   usable and commits (or not) with the turn.
 * @throws SourceboundError when the client's transaction has already failed, or the client cannot say whether it is in one.
 */
export async function inTurnTransaction<T>(db: TurnDatabase, operation: string, fn: (client: pg.ClientBase) => Promise<T>): Promise<T> {
  if (isPool(db)) {
    const client = await db.connect();
    let broken: Error | undefined;
    try {
      return await ownTransaction(client, fn);
    } catch (error) {
      if (rollbackFailed.has(error as object)) broken = error as Error;
      throw error;
    } finally {
      client.release(broken);
    }
  }
  if (typeof (db as { getTransactionStatus?: unknown }).getTransactionStatus !== 'function') {
    throw new SourceboundError(`${operation}: db must be a pg Pool or a pg client that reports its transaction status (pg 8.23 or later)`);
  }
  const status = db.getTransactionStatus();
  const aborted = (cause?: unknown) =>
    new SourceboundError(`${operation}: the client's transaction has already failed; roll it back before writing a turn`, { cause });
  if (status === 'E') throw aborted();
  if (status !== 'T') return ownTransaction(db, fn);
  // The status is the one of the last ReadyForQuery: a query that just failed may not have reported it yet.
  await db.query('savepoint sourcebound_turn').catch((error: unknown) => {
    throw databaseCondition(error)?.kind === 'in_failed_transaction' ? aborted(error) : error;
  });
  try {
    const value = await fn(db);
    await db.query('release savepoint sourcebound_turn');
    return value;
  } catch (error) {
    await db.query('rollback to savepoint sourcebound_turn');
    await db.query('release savepoint sourcebound_turn');
    throw error;
  }
}

/** Errors thrown after a failed ROLLBACK: the connection is in an unknown state and must not go back to the pool. */
const rollbackFailed = new WeakSet<object>();

async function ownTransaction<T>(client: pg.ClientBase, fn: (client: pg.ClientBase) => Promise<T>): Promise<T> {
  await client.query('begin isolation level read committed');
  try {
    const value = await fn(client);
    await client.query('commit');
    return value;
  } catch (error) {
    try {
      await client.query('rollback');
    } catch {
      if (typeof error === 'object' && error !== null) rollbackFailed.add(error);
    }
    throw error;
  }
}

/** A pool hands out clients; a client (pooled or not) reports its transaction status instead. */
function isPool(db: TurnDatabase): db is pg.Pool {
  return typeof (db as { totalCount?: unknown }).totalCount === 'number' && typeof (db as { release?: unknown }).release !== 'function';
}
