import { createHash, randomBytes } from 'node:crypto';
import { chmodSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import type { TestProject } from 'vitest/node';
import { freePort, startEmbeddedPostgres } from '../../src/db/embedded.ts';
import { MIGRATIONS_FOLDER, migrateDatabase } from '../../src/db/migrate.ts';
import { silentLogger } from '../../src/support/logger.ts';
import { withDatabase } from '../../src/db/database.ts';

declare module 'vitest' {
  export interface ProvidedContext {
    adminUrl: string;
    templateDb: string;
    runPrefix: string;
  }
}

/**
 * Once per `vitest run`: find PostgreSQL (DATABASE_URL, else an embedded server
 * in a temporary folder on a free port), build a migrated template database,
 * and hand its name to the test files, which each clone their own database
 * from it (test/support/db.ts). Nothing mutable is shared between files.
 */
export default async function setup(project: TestProject) {
  let adminUrl = process.env.DATABASE_URL;
  let stop = async () => {};
  let dataDir: string | undefined;
  if (!adminUrl) {
    dataDir = mkdtempSync(join(tmpdir(), 'sourcebound-test-'));
    // As root the server runs as 'postgres', which must be able to enter the folder.
    chmodSync(dataDir, 0o755);
    const embedded = await startEmbeddedPostgres({
      dataDir: join(dataDir, 'pgdata'),
      port: await freePort(),
      logger: silentLogger,
      // Durability is not under test; speed is welcome.
      settings: { fsync: 'off', synchronous_commit: 'off', full_page_writes: 'off' },
    });
    adminUrl = embedded.connectionString;
    stop = embedded.stop;
  }

  const templateDb = `sb_tpl_${migrationsDigest()}`;
  const runPrefix = `sb_t_${randomBytes(4).toString('hex')}_`;
  await ensureTemplate(adminUrl, templateDb);

  project.provide('adminUrl', adminUrl);
  project.provide('templateDb', templateDb);
  project.provide('runPrefix', runPrefix);

  return async () => {
    await dropDatabases(adminUrl, runPrefix).catch(() => {});
    await stop();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  };
}

/** Template name changes whenever a migration changes, so a stale template is never cloned. */
function migrationsDigest(): string {
  const hash = createHash('sha256');
  for (const file of readdirSync(MIGRATIONS_FOLDER)
    .filter((f) => f.endsWith('.sql'))
    .sort()) {
    hash.update(file).update(readFileSync(join(MIGRATIONS_FOLDER, file)));
  }
  hash.update(readFileSync(new URL('../../package-lock.json', import.meta.url)));
  return hash.digest('hex').slice(0, 12);
}

async function ensureTemplate(adminUrl: string, templateDb: string): Promise<void> {
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    // Several vitest runs may share one server (CI, developers): one builds, the others wait.
    await admin.query('select pg_advisory_lock(74299, 0)');
    const exists = await admin.query('select 1 from pg_database where datname = $1', [templateDb]);
    if (exists.rowCount === 0) {
      const building = `${templateDb}_building`;
      await admin.query(`drop database if exists ${building}`);
      await admin.query(`create database ${building}`);
      await migrateDatabase(withDatabase(adminUrl, building), silentLogger);
      await admin.query(`alter database ${building} rename to ${templateDb}`);
    }
    await admin.query('select pg_advisory_unlock(74299, 0)');
  } finally {
    await admin.end();
  }
}

async function dropDatabases(adminUrl: string, prefix: string): Promise<void> {
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    const { rows } = await admin.query<{ datname: string }>('select datname from pg_database where starts_with(datname, $1)', [prefix]);
    for (const { datname } of rows) await admin.query(`drop database if exists ${datname} with (force)`);
  } finally {
    await admin.end();
  }
}
