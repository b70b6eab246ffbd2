import { randomBytes } from 'node:crypto';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { freePort, startEmbeddedPostgres } from '../../src/db/embedded.ts';
import { migrateDatabase } from '../../src/db/migrate.ts';
import { createPool } from '../../src/db/database.ts';
import { silentLogger } from '../../src/support/logger.ts';
import { withDatabase } from '../../src/db/database.ts';

/**
 * The PostgreSQL the benchmarks run on: DATABASE_URL, else an embedded server
 * in a temporary folder on a free loopback port (as test/support/global-setup.ts
 * does). Every benchmark gets its own fresh databases, migrated with
 * migrateDatabase, dropped at the end.
 */
export interface BenchServer {
  kind: 'embedded' | 'DATABASE_URL';
  adminUrl: string;
  version: string;
  settings: Record<string, string>;
  /** A new, migrated database; returns its connection string. */
  freshDatabase(label: string): Promise<string>;
  /** Drops every database this run created, stops an embedded server, removes its folder. */
  close(): Promise<void>;
}

// Durability is not what is measured, and with fsync on, commit flushes would
// hide CPU and lock costs (the trigger overhead of P1 would look smaller).
const EMBEDDED_SETTINGS = { fsync: 'off', synchronous_commit: 'off', full_page_writes: 'off' };
const SHOWN_SETTINGS = ['fsync', 'synchronous_commit', 'shared_buffers', 'max_connections'];

export async function startBenchServer(databaseUrl: string | undefined): Promise<BenchServer> {
  let adminUrl = databaseUrl;
  let stop = async () => {};
  let dataDir: string | undefined;
  if (!adminUrl) {
    dataDir = mkdtempSync(join(tmpdir(), 'sourcebound-bench-'));
    // As root the server runs as 'postgres', which must be able to enter the folder.
    chmodSync(dataDir, 0o755);
    const embedded = await startEmbeddedPostgres({
      dataDir: join(dataDir, 'pgdata'),
      port: await freePort(),
      logger: silentLogger,
      settings: EMBEDDED_SETTINGS,
    });
    adminUrl = embedded.connectionString;
    stop = embedded.stop;
  }
  const prefix = `sb_bench_${randomBytes(3).toString('hex')}_`;
  let counter = 0;
  const admin = async <T>(fn: (c: pg.Client) => Promise<T>): Promise<T> => {
    const client = new pg.Client({ connectionString: adminUrl });
    client.on('error', () => {});
    await client.connect();
    try {
      return await fn(client);
    } finally {
      await client.end();
    }
  };
  const { version, settings } = await admin(async (c) => {
    const v = (await c.query<{ server_version: string }>('show server_version')).rows[0]!.server_version;
    const s = await c.query<{ name: string; setting: string; unit: string | null }>(
      'select name, setting, unit from pg_settings where name = any($1)',
      [SHOWN_SETTINGS],
    );
    return {
      version: v,
      settings: Object.fromEntries(
        s.rows.map((r) => [r.name, r.unit && r.unit !== '' ? `${r.setting}${r.unit === '8kB' ? 'x8kB' : r.unit}` : r.setting]),
      ),
    };
  });

  return {
    kind: databaseUrl ? 'DATABASE_URL' : 'embedded',
    adminUrl: adminUrl!,
    version,
    settings,
    async freshDatabase(label) {
      const name = `${prefix}${counter++}_${label.toLowerCase().replace(/[^a-z0-9]/g, '_')}`;
      await admin((c) => c.query(`create database ${name}`));
      const url = withDatabase(adminUrl!, name);
      await migrateDatabase(url, silentLogger);
      return url;
    },
    async close() {
      await admin(async (c) => {
        const { rows } = await c.query<{ datname: string }>('select datname from pg_database where starts_with(datname, $1)', [prefix]);
        for (const { datname } of rows) await c.query(`drop database if exists ${datname} with (force)`);
      }).catch(() => {});
      await stop();
      if (dataDir) rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** A pool on a benchmark database, with the project's error handling. */
export function benchPool(url: string, max = 10): pg.Pool {
  return createPool(url, silentLogger, max);
}

/** One client (not pooled), with an error handler. */
export async function benchClient(url: string): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: url });
  client.on('error', () => {});
  await client.connect();
  return client;
}
