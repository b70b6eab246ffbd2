import pg from 'pg';
import type { Config } from '../support/config.ts';
import type { Logger } from '../support/logger.ts';
import { startEmbeddedPostgres } from './embedded.ts';
import { SourceboundError } from '../support/errors.ts';

/** Raised when PostgreSQL cannot be reached at start-up: one clear line, not a retry loop. */
export class DatabaseUnreachableError extends SourceboundError {
  override name = 'DatabaseUnreachableError';
}

/**
 * Terminology. The *pooled* URL (DATABASE_URL) may be a transaction pooler:
 * each transaction can run on a different server connection, so nothing that
 * lives in a session (LISTEN, session advisory locks, named prepared
 * statements, SET) survives between transactions. The *direct* URL
 * (DATABASE_DIRECT_URL, default DATABASE_URL) is a real session; every
 * session-scoped use goes there. `pooled` is true when the two differ.
 */
export interface Database {
  /** DATABASE_URL, or the embedded server's: ordinary queries and transactions. */
  connectionString: string;
  /** DATABASE_DIRECT_URL (default: connectionString): LISTEN, migrations' lock, fleet admission. */
  directConnectionString: string;
  /** connectionString goes through a transaction pooler (a direct URL was given and differs). */
  pooled: boolean;
  pool: pg.Pool;
  /** Ends the pool and waits until its connections have closed, then stops an embedded server this process started. */
  close(): Promise<void>;
}

/**
 * Opens the configured database: DATABASE_URL, or else an embedded PostgreSQL
 * in the configured data folder.
 * @throws DatabaseUnreachableError when the server does not answer.
 */
export async function openDatabase(
  config: Pick<Config, 'databaseUrl' | 'dataDir' | 'embeddedPort'> & Partial<Pick<Config, 'databaseDirectUrl'>>,
  logger: Logger,
  poolSize = 10,
): Promise<Database> {
  let stopEmbedded = async () => {};
  let connectionString = config.databaseUrl;
  if (connectionString === undefined) {
    const embedded = await startEmbeddedPostgres({ dataDir: config.dataDir, port: config.embeddedPort, logger });
    connectionString = embedded.connectionString;
    stopEmbedded = embedded.stop;
  }
  const directConnectionString = config.databaseDirectUrl ?? connectionString;
  const pooled = directConnectionString !== connectionString;
  const pool = createPool(connectionString, logger, poolSize);
  try {
    await pool.query('select 1');
    if (pooled) await probe(directConnectionString);
  } catch (error) {
    await pool.end().catch(() => {});
    await stopEmbedded().catch(() => {});
    const which = error instanceof DirectUnreachable ? redact(directConnectionString) + ' (DATABASE_DIRECT_URL)' : redact(connectionString);
    const cause = error instanceof DirectUnreachable ? error.cause : error;
    throw new DatabaseUnreachableError(`cannot reach PostgreSQL at ${which}: ${(cause as Error).message}`, { cause });
  }
  if (pooled)
    logger.info(
      { pooled: redact(connectionString), direct: redact(directConnectionString) },
      'DATABASE_URL is treated as a transaction pooler; sessions use DATABASE_DIRECT_URL',
    );
  return {
    connectionString,
    directConnectionString,
    pooled,
    pool,
    close: async () => {
      // Connections first: a server stopped under them terminates their backends,
      // and each client then logs "terminating connection due to administrator command".
      await poolEnd(pool);
      await stopEmbedded();
    },
  };
}

class DirectUnreachable extends SourceboundError {}

/** One round trip on a fresh session. @throws DirectUnreachable carrying the driver's error. */
async function probe(connectionString: string): Promise<void> {
  const client = new pg.Client({ connectionString, connectionTimeoutMillis: 10_000 });
  client.on('error', () => {});
  try {
    await client.connect();
    await client.query('select 1');
  } catch (error) {
    throw new DirectUnreachable('direct connection failed', { cause: error });
  } finally {
    await client.end().catch(() => {});
  }
}

/** A pool whose idle-client errors are logged instead of crashing the process. */
export function createPool(connectionString: string, logger: Logger, max = 10): pg.Pool {
  const pool = new pg.Pool({ connectionString, max, connectionTimeoutMillis: 10_000 });
  pool.on('error', (error) => logger.warn({ err: error }, 'idle PostgreSQL client failed'));
  // A checked-out client whose connection dies emits 'error' too; without a
  // handler that would crash the process instead of failing the one query.
  pool.on('connect', (client) => client.on('error', (error) => logger.warn({ err: error }, 'PostgreSQL client failed')));
  trackConnections(pool);
  return pool;
}

/** The clients of each tracked pool whose connection has not closed yet. */
const openClients = new WeakMap<pg.Pool, Set<pg.PoolClient>>();

/** Tracks the connections `pool` opens (for poolEnd); `as`: count them as another pool's (a pool inside a pool). */
export function trackConnections(pool: pg.Pool, as: pg.Pool = pool): void {
  let open = openClients.get(as);
  if (!open) openClients.set(as, (open = new Set()));
  pool.on('connect', (client) => {
    open!.add(client);
    client.once('end', () => open!.delete(client));
  });
}

/**
 * Ends a pool and resolves once every connection it opened has closed, within
 * `timeoutMs`. pg-pool's `end()` resolves as soon as it has asked its clients
 * to end, before their sockets close (and before the server has seen them go).
 */
export async function poolEnd(pool: pg.Pool, timeoutMs = 5000): Promise<void> {
  const open = openClients.get(pool);
  await pool.end();
  if (!open || open.size === 0) return;
  let timer: NodeJS.Timeout | undefined;
  const closed = Promise.all(
    [...open].map(
      (client) =>
        new Promise<void>((resolve) => {
          client.once('end', () => resolve());
          if (!open.has(client)) resolve();
        }),
    ),
  );
  await Promise.race([
    closed,
    new Promise<void>((resolve) => {
      timer = setTimeout(resolve, timeoutMs);
    }),
  ]);
  clearTimeout(timer);
}

/** Query parameters whose value is a secret: pg reads `password` and `sslpassword` from the query too. */
const SECRET_PARAMETER = /password|secret|key/i;

/**
 * A connection string with its secrets hidden, for messages and logs: the
 * userinfo password and the value of every query parameter whose name
 * contains "password", "secret" or "key" (`password`, `sslpassword`,
 * `sslkey`...). Every URL sourcebound prints or logs goes through here.
 */
export function redact(connectionString: string): string {
  let url: URL;
  try {
    url = new URL(connectionString);
  } catch {
    return '(unparseable connection string)';
  }
  if (url.password) url.password = '***';
  if (url.search.length > 1) {
    // Parameter by parameter on the raw text: the others are printed as written.
    url.search = url.search
      .slice(1)
      .split('&')
      .map((part) => {
        const eq = part.indexOf('=');
        const rawName = eq < 0 ? part : part.slice(0, eq);
        let name: string;
        try {
          name = decodeURIComponent(rawName.replace(/\+/g, ' '));
        } catch {
          name = rawName;
        }
        return SECRET_PARAMETER.test(name) ? `${rawName}=***` : part;
      })
      .join('&');
  }
  return url.toString();
}

/** The same server's connection string for another database. */
export function withDatabase(connectionString: string, database: string): string {
  const url = new URL(connectionString);
  url.pathname = `/${database}`;
  return url.toString();
}
