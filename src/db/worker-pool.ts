import pg from 'pg';
import type { Logger } from '../logger.ts';

/**
 * The pool graphile-worker runs on. Its queries (get, complete and fail jobs)
 * are short transactions and may go through a transaction pooler; its LISTEN
 * for new jobs needs a real session, or notifications never arrive and pickup
 * falls back to polling (1.4 s p50 through PgBouncer instead of ~18 ms).
 *
 * graphile-worker 0.17.3 takes exactly one client through the callback form
 * `pool.connect(cb)`: the LISTEN client (src/main.ts, `listenForChanges`); every
 * query goes through `await pool.connect()`. So the callback form is routed to
 * a one-connection pool on the direct URL. test/topology/pgbouncer.test.ts
 * measures pickup through PgBouncer and fails if LISTEN stops reaching a
 * session (an upgrade that changes this must be caught there).
 */
export interface WorkerPoolOptions {
  /** DATABASE_URL: graphile-worker's queries. */
  connectionString: string;
  /** DATABASE_DIRECT_URL: the LISTEN session; when equal to connectionString, one plain pool serves both. */
  directConnectionString: string;
  max: number;
  applicationName: string;
  logger: Logger;
}

export function createWorkerPool(options: WorkerPoolOptions): pg.Pool {
  const { connectionString, directConnectionString, max, applicationName, logger } = options;
  const base = { connectionTimeoutMillis: 10_000, application_name: applicationName };
  const pool = directConnectionString === connectionString
    ? new pg.Pool({ ...base, connectionString, max })
    : new ListenOnDirectPool({ ...base, connectionString, max }, new pg.Pool({ ...base, connectionString: directConnectionString, max: 1 }));
  watch(pool, logger);
  if (pool instanceof ListenOnDirectPool) watch(pool.direct, logger);
  return pool;
}

/** Idle and checked-out clients that fail are logged, never left to crash the process. */
function watch(pool: pg.Pool, logger: Logger): void {
  pool.on('error', (error) => logger.warn({ err: error }, 'idle worker PostgreSQL client failed'));
  pool.on('connect', (client) => client.on('error', (error) => logger.warn({ err: error }, 'worker PostgreSQL client failed')));
}

type ConnectCallback = (err: Error | undefined, client: pg.PoolClient | undefined, done: (release?: unknown) => void) => void;

class ListenOnDirectPool extends pg.Pool {
  constructor(config: pg.PoolConfig, readonly direct: pg.Pool) {
    super(config);
  }

  // The callback form is graphile-worker's LISTEN client (see above); the promise form is every query.
  override connect(): Promise<pg.PoolClient>;
  override connect(callback: ConnectCallback): void;
  override connect(callback?: ConnectCallback): Promise<pg.PoolClient> | void {
    if (callback) {
      this.direct.connect(callback);
      return;
    }
    return super.connect();
  }

  override async end(): Promise<void> {
    await Promise.all([super.end(), this.direct.end()]);
  }
}
