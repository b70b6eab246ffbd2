import pg from 'pg';
import type { Config } from '../config.ts';
import type { Logger } from '../logger.ts';
import { startEmbeddedPostgres } from './embedded.ts';

/** Raised when PostgreSQL cannot be reached at start-up: one clear line, not a retry loop. */
export class DatabaseUnreachableError extends Error {
  override name = 'DatabaseUnreachableError';
}

export interface Database {
  connectionString: string;
  pool: pg.Pool;
  /** Ends the pool, then stops an embedded server this process started. */
  close(): Promise<void>;
}

/**
 * Opens the configured database: DATABASE_URL, or else an embedded PostgreSQL
 * in the configured data folder.
 * @throws DatabaseUnreachableError when the server does not answer.
 */
export async function openDatabase(config: Pick<Config, 'databaseUrl' | 'dataDir' | 'embeddedPort'>, logger: Logger, poolSize = 10): Promise<Database> {
  let stopEmbedded = async () => {};
  let connectionString = config.databaseUrl;
  if (connectionString === undefined) {
    const embedded = await startEmbeddedPostgres({ dataDir: config.dataDir, port: config.embeddedPort, logger });
    connectionString = embedded.connectionString;
    stopEmbedded = embedded.stop;
  }
  const pool = createPool(connectionString, logger, poolSize);
  try {
    await pool.query('select 1');
  } catch (error) {
    await pool.end().catch(() => {});
    await stopEmbedded().catch(() => {});
    throw new DatabaseUnreachableError(`cannot reach PostgreSQL at ${redact(connectionString)}: ${(error as Error).message}`, { cause: error });
  }
  return {
    connectionString,
    pool,
    close: async () => {
      await pool.end();
      await stopEmbedded();
    },
  };
}

/** A pool whose idle-client errors are logged instead of crashing the process. */
export function createPool(connectionString: string, logger: Logger, max = 10): pg.Pool {
  const pool = new pg.Pool({ connectionString, max, connectionTimeoutMillis: 10_000 });
  pool.on('error', (error) => logger.warn({ err: error }, 'idle PostgreSQL client failed'));
  // A checked-out client whose connection dies emits 'error' too; without a
  // handler that would crash the process instead of failing the one query.
  pool.on('connect', (client) => client.on('error', (error) => logger.warn({ err: error }, 'PostgreSQL client failed')));
  return pool;
}

/** A connection string with its password hidden, for messages. */
export function redact(connectionString: string): string {
  try {
    const url = new URL(connectionString);
    if (url.password) url.password = '***';
    return url.toString();
  } catch {
    return '(unparseable connection string)';
  }
}

/** The same server's connection string for another database. */
export function withDatabase(connectionString: string, database: string): string {
  const url = new URL(connectionString);
  url.pathname = `/${database}`;
  return url.toString();
}
