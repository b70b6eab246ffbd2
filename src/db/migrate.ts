import { packageFile } from '../package-files.ts';
import pg from 'pg';
import { drizzle } from 'drizzle-orm/node-postgres';
import { migrate } from 'drizzle-orm/node-postgres/migrator';
import { Logger as GraphileLogger, runMigrations } from 'graphile-worker';
import type { Logger } from '../logger.ts';
import { LOCK_NS } from './locks.ts';

export const MIGRATIONS_FOLDER = packageFile('migrations');
/** Where drizzle records applied migrations; our own schema, so an app's drizzle table is untouched. */
const MIGRATIONS_SCHEMA = 'sourcebound_migrations';

/**
 * Brings a database up to date: graphile-worker's schema first (our triggers
 * call graphile_worker.add_job, and every insert would fail without it), then
 * ours. drizzle's migrator takes no lock, so concurrent migrators (two workers
 * starting at once) are serialized here with a session advisory lock held on
 * the one client that runs our migrations.
 */
export async function migrateDatabase(connectionString: string, logger: Logger): Promise<void> {
  const client = new pg.Client({ connectionString });
  client.on('error', (error) => logger.warn({ err: error }, 'migration connection failed'));
  await client.connect();
  try {
    await client.query('select pg_advisory_lock($1, 0)', [LOCK_NS.migrate]);
    try {
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

/** graphile-worker's logger, forwarding to pino with the same scope fields. */
export function graphileLogger(logger: Logger): GraphileLogger {
  return new GraphileLogger((scope) => (level, message, meta) => {
    const fields = { ...scope, ...(meta ?? {}) };
    const method = level === 'error' ? 'error' : level === 'warning' ? 'warn' : level === 'info' ? 'info' : 'debug';
    logger[method](fields, message);
  });
}
