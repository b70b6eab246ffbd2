import type pg from 'pg';

/**
 * Runs `fn` in BEGIN ... COMMIT on one checked-out client; ROLLBACK on a throw.
 * A client whose rollback failed is destroyed instead of going back to the pool.
 */
export async function inTransaction<T>(pool: pg.Pool, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  let broken: Error | undefined;
  try {
    await client.query('begin');
    const value = await fn(client);
    await client.query('commit');
    return value;
  } catch (error) {
    await client.query('rollback').catch((e: Error) => {
      broken = e;
    });
    throw error;
  } finally {
    client.release(broken);
  }
}

/** SAVEPOINT `name` (an identifier chosen by this module, never user input). */
export async function savepoint(client: pg.PoolClient, name: string): Promise<void> {
  await client.query(`savepoint ${name}`);
}

/** ROLLBACK TO SAVEPOINT `name`: undoes what followed it and keeps the transaction usable. */
export async function rollbackTo(client: pg.PoolClient, name: string): Promise<void> {
  await client.query(`rollback to savepoint ${name}`);
}
