import { packageFile } from '../support/package-files.ts';
import pg from 'pg';
import { drizzle } from 'drizzle-orm/node-postgres';
import { migrate } from 'drizzle-orm/node-postgres/migrator';
import { readMigrationFiles } from 'drizzle-orm/migrator';
import { Logger as GraphileLogger, runMigrations } from 'graphile-worker';
import type { Logger } from '../support/logger.ts';
import { LOCK_NS } from './locks.ts';
import { assertSessionUrl } from './pooler-probe.ts';
import { SourceboundError } from '../support/errors.ts';

export const MIGRATIONS_FOLDER = packageFile('migrations');
/** Where drizzle records applied migrations; our own schema, so an app's drizzle table is untouched. */
const MIGRATIONS_SCHEMA = 'sourcebound_migrations';
/** How long a migrator waits for another one's lock. (Default: 10 minutes) */
export const DEFAULT_MIGRATION_LOCK_TIMEOUT_MS = 600_000;

/**
 * Brings a database up to date: graphile-worker's schema first (our triggers
 * call graphile_worker.add_job, and every insert would fail without it), then
 * ours. drizzle's migrator takes no lock, so concurrent migrators (two workers
 * starting at once) are serialized here with a session advisory lock held on
 * the one client that runs our migrations.
 *
 * `connectionString` must be a direct session (DATABASE_DIRECT_URL), never a
 * transaction pooler: through one, the lock and the unlock land on different
 * server connections, the lock serializes nothing and stays held by an idle
 * server connection. Migrators started while one holds the lock wait for it,
 * up to `lockTimeoutMs`, then fail with a message rather than hang.
 */
export async function migrateDatabase(connectionString: string, logger: Logger, options: { lockTimeoutMs?: number } = {}): Promise<void> {
  const lockTimeoutMs = options.lockTimeoutMs ?? DEFAULT_MIGRATION_LOCK_TIMEOUT_MS;
  // Through a transaction pooler the lock below would serialize nothing and stay held: refuse first.
  await assertSessionUrl(connectionString);
  const client = new pg.Client({ connectionString, application_name: 'sourcebound-migrate' });
  client.on('error', (error) => logger.warn({ err: error }, 'migration connection failed'));
  await client.connect();
  try {
    // lock_timeout bounds the wait for the lock (another migrator, or a stuck session).
    await client.query(`set lock_timeout = ${Math.max(1, Math.floor(lockTimeoutMs))}`);
    await client.query('select pg_advisory_lock($1, 0)', [LOCK_NS.migrate]).catch((error: unknown) => {
      if ((error as { code?: string }).code !== '55P03') throw error;
      throw new Error(
        `another migration held the migration lock for more than ${lockTimeoutMs} ms (see pg_locks, objid 0, classid ${LOCK_NS.migrate})`,
        { cause: error },
      );
    });
    await client.query('set lock_timeout = 0');
    try {
      await refuseSquashedChain(client);
      await runMigrations({ connectionString, logger: graphileLogger(logger) });
      await migrate(drizzle(client), { migrationsFolder: MIGRATIONS_FOLDER, migrationsSchema: MIGRATIONS_SCHEMA });
    } finally {
      await client.query('select pg_advisory_unlock($1, 0)', [LOCK_NS.migrate]);
    }
  } finally {
    await client.end();
  }
  logger.info('database migrated');
}

/**
 * Thrown, before anything is migrated, for a database made by the migrations that 0.1.0
 * squashed into its baseline: drizzle's migrator would take the baseline for new migrations
 * (it compares timestamps only) and fail on its first CREATE.
 */
export class SquashedMigrationsError extends SourceboundError {
  override name = 'SquashedMigrationsError';
}

/**
 * A database whose migration table records migrations this package's journal does not know,
 * older than its baseline, was made by the chain squashed in 0.1.0: stop with what to do.
 * (Unknown migrations newer than the baseline are a newer package's: drizzle skips them, as before.)
 */
async function refuseSquashedChain(client: pg.Client): Promise<void> {
  const table = `${MIGRATIONS_SCHEMA}.__drizzle_migrations`;
  const {
    rows: [found],
  } = await client.query<{ ok: boolean }>('select to_regclass($1) is not null as ok', [table]);
  if (!found?.ok) return;
  const journal = readMigrationFiles({ migrationsFolder: MIGRATIONS_FOLDER });
  const known = new Set(journal.map((m) => m.hash));
  const baseline = journal[0]?.folderMillis ?? Infinity;
  const { rows } = await client.query<{ hash: string; created_at: string }>(`select hash, created_at::text from ${table}`);
  const old = rows.filter((r) => !known.has(r.hash) && Number(r.created_at) < baseline);
  if (old.length === 0) return;
  const last = new Date(Math.max(...old.map((r) => Number(r.created_at)))).toISOString();
  throw new SquashedMigrationsError(
    `sourcebound: this database was migrated by sourcebound before 0.1.0 (${table} records ${old.length} migrations of that chain, the newest from ${last}). ` +
      '0.1.0 squashed those migrations into one baseline, which cannot be applied on top of them, so nothing was migrated or changed. ' +
      'To keep the data: pg_dump --data-only --disable-triggers --schema=sourcebound (as a superuser) to a file; ' +
      'drop schema sourcebound cascade; drop schema sourcebound_migrations cascade; migrate again; then restore the file with psql (as a superuser). ' +
      'Without data to keep, the two drop statements and a migrate are enough.',
  );
}

/** graphile-worker's logger, forwarding to pino with the same scope fields. */
export function graphileLogger(logger: Logger): GraphileLogger {
  return new GraphileLogger((scope) => (level, message, meta) => {
    const fields = { ...scope, ...(meta ?? {}) };
    const method = level === 'error' ? 'error' : level === 'warning' ? 'warn' : level === 'info' ? 'info' : 'debug';
    logger[method](fields, message);
  });
}
