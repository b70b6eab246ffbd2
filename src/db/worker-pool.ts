import pg from 'pg';
import type { Logger } from '../support/logger.ts';
import { trackConnections } from './database.ts';

/**
 * The pool graphile-worker runs on. Its queries (get, complete and fail jobs)
 * are short transactions and may go through a transaction pooler; its LISTEN
 * for new jobs needs a real session, or notifications never arrive and pickup
 * falls back to polling (1.4 s p50 through PgBouncer instead of ~18 ms).
 *
 * graphile-worker 0.17.3 takes exactly one client through the callback form
 * `pool.connect(cb)`: the LISTEN client (src/main.ts, `listenForChanges`); its
 * jobs' queries go through `await pool.connect()`, and its cron (the sweep
 * crontab) through `pool.query()`, which pg-pool serves by calling
 * `this.connect(cb)` at once. So the callback form, outside a `query()`, is
 * routed to a one-connection pool on the direct URL. (Inside one it went
 * there too, and LISTEN holds that connection for good: every cron tick timed
 * out, and behind a pooler the sweep never ran.)
 * test/topology/pgbouncer.test.ts measures pickup through PgBouncer and fails
 * if LISTEN stops reaching a session, and runs a query as the cron does while
 * LISTEN holds its session (an upgrade that changes either is caught there).
 */
export interface WorkerPoolOptions {
  /** DATABASE_URL: graphile-worker's queries. */
  connectionString: string;
  /** DATABASE_DIRECT_URL: the LISTEN session; when equal to connectionString, one plain pool serves both. */
  directConnectionString: string;
  max: number;
  applicationName: string;
  /** `application_name` of the sessions on the direct URL (the LISTEN session). (Default: applicationName) */
  directApplicationName?: string | undefined;
  logger: Logger;
}

export function createWorkerPool(options: WorkerPoolOptions): pg.Pool {
  const { connectionString, directConnectionString, max, logger } = options;
  const directName = options.directApplicationName ?? options.applicationName;
  const base = { connectionTimeoutMillis: 10_000 };
  const direct =
    directConnectionString === connectionString
      ? null
      : new pg.Pool({ ...base, application_name: directName, connectionString: directConnectionString, max: 1 });
  // One pool on the direct URL: every session of it is direct.
  const pool = new WorkerPool({ ...base, application_name: direct ? options.applicationName : directName, connectionString, max }, direct);
  watch(pool, logger);
  if (direct) watch(direct, logger);
  // poolEnd(pool) waits for both pools' connections to close.
  trackConnections(pool);
  if (direct) trackConnections(direct, pool);
  return pool;
}

/** Idle and checked-out clients that fail are logged, never left to crash the process. */
function watch(pool: pg.Pool, logger: Logger): void {
  pool.on('error', (error) => logger.warn({ err: error }, 'idle worker PostgreSQL client failed'));
  pool.on('connect', (client) => client.on('error', (error) => logger.warn({ err: error }, 'worker PostgreSQL client failed')));
}

type ConnectCallback = (err: Error | undefined, client: pg.PoolClient | undefined, done: (release?: unknown) => void) => void;

/**
 * graphile-worker 0.17.3 can release its LISTEN client twice: when the
 * runner stops while that client's connection fails, its shutdown
 * (`unlistenForChanges`) and its error handler (`onErrorReleaseClientAndTryAgain`)
 * each run `release()`, and pg-pool throws on the second release inside an
 * async function nobody awaits: an unhandled rejection that ends the process
 * with exit 1 before the worker can say why (test/worker/restart.test.ts
 * "exits 1 ..." caught it about once in three runs). The callback form's
 * release is made idempotent here: a second call does nothing.
 */
class WorkerPool extends pg.Pool {
  constructor(
    config: pg.PoolConfig,
    readonly direct: pg.Pool | null,
  ) {
    super(config);
  }

  /** True while pg-pool's query() takes its client (synchronously, through the callback form). */
  private querying = false;

  // pool.query() (graphile-worker's cron): the pooled URL, like every other query.
  override query(...args: unknown[]): any {
    this.querying = true;
    try {
      return (super.query as (...a: unknown[]) => unknown).apply(this, args);
    } finally {
      this.querying = false;
    }
  }

  // The callback form is graphile-worker's LISTEN client (see above); the promise form is every query.
  override connect(): Promise<pg.PoolClient>;
  override connect(callback: ConnectCallback): void;
  override connect(callback?: ConnectCallback): Promise<pg.PoolClient> | void {
    if (!callback) return super.connect();
    const once: ConnectCallback = (err, client, done) => {
      // pg-pool passes no release function with some errors (a pool that is ending): pass none on.
      if (typeof done !== 'function') return callback(err, client, done);
      let released = false;
      callback(err, client, (release) => {
        if (released) return;
        released = true;
        done(release);
      });
    };
    if (this.direct && !this.querying) this.direct.connect(once);
    else super.connect(once);
  }

  override async end(): Promise<void> {
    await Promise.all([super.end(), this.direct?.end()]);
  }
}
