import { readFileSync, writeFileSync } from 'node:fs';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { withDatabase } from '../src/db/database.ts';
import { migrateDatabase, SquashedMigrationsError } from '../src/db/migrate.ts';
import { SOURCEBOUND_CONDITIONS } from '../src/db/conditions.ts';
import { silentLogger } from '../src/support/logger.ts';
import { dumpSchema } from './support/schema-dump.ts';

/**
 * The schema a fresh database gets from `migrate` is test/schema.sql, the committed dump a
 * reader (and a reviewer of a new migration) reads instead of the migrations. After a change
 * to migrations/, write the file again with `npm run db:dump` and commit it with the change.
 */
const DUMP_FILE = new URL('./schema.sql', import.meta.url);
const WRITE = process.env.SOURCEBOUND_WRITE_SCHEMA_DUMP === '1';

const adminUrl = inject('adminUrl');
let counter = 0;
const created: string[] = [];

/** An empty database (not the migrated template): what `migrate` meets on a new install. */
async function emptyDatabase(): Promise<string> {
  const name = `${inject('runPrefix')}schema_${process.pid}_${counter++}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    await admin.query(`create database ${name}`);
  } finally {
    await admin.end();
  }
  created.push(name);
  return withDatabase(adminUrl, name);
}

async function withClient<T>(url: string, f: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await f(client);
  } finally {
    await client.end();
  }
}

afterAll(async () => {
  await withClient(adminUrl, async (admin) => {
    for (const name of created) await admin.query(`drop database if exists ${name} with (force)`);
  });
});

describe('the schema', () => {
  let dump = '';
  let url = '';
  beforeAll(async () => {
    url = await emptyDatabase();
    await migrateDatabase(url, silentLogger);
    dump = await withClient(url, (client) => dumpSchema(client));
  }, 120_000);

  it('of a freshly migrated database is test/schema.sql', () => {
    if (WRITE) {
      writeFileSync(DUMP_FILE, dump);
      return;
    }
    const committed = readFileSync(DUMP_FILE, 'utf8');
    if (dump !== committed) {
      const a = committed.split('\n');
      const b = dump.split('\n');
      let i = 0;
      while (i < a.length && a[i] === b[i]) i++;
      const context = (lines: string[]) =>
        lines
          .slice(Math.max(0, i - 3), i + 6)
          .map((l) => `    ${l}`)
          .join('\n');
      expect.fail(
        `the migrated schema differs from test/schema.sql from line ${i + 1} on.\n` +
          `  committed:\n${context(a)}\n  migrated:\n${context(b)}\n` +
          'If the migrations changed on purpose, run `npm run db:dump` and commit test/schema.sql with them.',
      );
    }
  });

  it('defines each function signature once', () => {
    const signatures = [...dump.matchAll(/^-- function (.+)$/gm)].map((m) => m[1]!);
    expect(new Set(signatures).size).toBe(signatures.length);
    expect(signatures.length).toBeGreaterThan(30);
  });

  it("raises each of the product's own conditions with its name and SQLSTATE from src/db/conditions.ts", () => {
    const raised = [...dump.matchAll(/RAISE EXCEPTION 'sourcebound: (?:[^']|'')*'[^;]*;/g)].map((m) => m[0]);
    expect(raised.length).toBeGreaterThan(40);
    const codes: Record<string, string> = {
      integrity_constraint_violation: '23000',
      no_data_found: 'P0002',
      feature_not_supported: '0A000',
      program_limit_exceeded: '54000',
    };
    const seen = new Set<string>();
    for (const statement of raised) {
      const name = /CONSTRAINT = '(\w+)'/.exec(statement)?.[1];
      expect(name, `no CONSTRAINT in: ${statement}`).toBeDefined();
      const errcode = /ERRCODE = '(\w+)'/.exec(statement)?.[1];
      const code = errcode === undefined ? 'P0001' : codes[errcode];
      expect(SOURCEBOUND_CONDITIONS[name as keyof typeof SOURCEBOUND_CONDITIONS], name).toEqual({ code });
      seen.add(name!);
    }
    expect([...seen].sort()).toEqual(Object.keys(SOURCEBOUND_CONDITIONS).sort());
  });

  it('reports a condition to node-postgres as (code, constraint)', async () => {
    const error = await withClient(url, (client) =>
      client.query('select sourcebound.enqueue_compaction(gen_random_uuid())').then(
        () => null,
        (e: unknown) => e,
      ),
    );
    expect(error).toMatchObject({ code: 'P0002', constraint: 'conversation_missing' });
  });
});

describe('migrate on a database made by the pre-0.1.0 migration chain', () => {
  it('changes nothing and says what happened and what to do', async () => {
    const url = await emptyDatabase();
    // What the old chain leaves: its schema, and drizzle's record of its 40 migrations (the last
    // two, 0038 and 0039, as they were recorded; the others alike).
    await withClient(url, async (client) => {
      await client.query(`create schema sourcebound; create table sourcebound.conversations (id uuid primary key, scope text not null)`);
      await client.query(`create schema sourcebound_migrations;
        create table sourcebound_migrations.__drizzle_migrations (id serial primary key, hash text not null, created_at bigint)`);
      await client.query(`insert into sourcebound_migrations.__drizzle_migrations (hash, created_at) values
        ('10df5ecdf4654da87fd287d33cd1d47f0b59465f2ea588f671763e47b9fb9bbc', 1796406797322),
        ('117e17662ccc4a0c56c39b24c530001ae9549d49ec1193358b08b5094284f113', 1796498992667)`);
    });
    const before = await withClient(url, (client) => dumpSchema(client));

    const error = await migrateDatabase(url, silentLogger).then(
      () => null,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(SquashedMigrationsError);
    const message = (error as Error).message;
    expect(message).toMatch(/migrated by sourcebound before 0\.1\.0/);
    expect(message).toMatch(/2 migrations of that chain/);
    expect(message).toMatch(/nothing was migrated or changed/);
    expect(message).toMatch(/drop schema sourcebound cascade; drop schema sourcebound_migrations cascade; migrate again/);

    await withClient(url, async (client) => {
      expect(await dumpSchema(client)).toBe(before);
      const { rows } = await client.query(`select count(*)::int as n from sourcebound_migrations.__drizzle_migrations`);
      expect(rows[0].n).toBe(2);
      // Not even graphile-worker's schema, which migrate installs first.
      expect((await client.query(`select 1 from pg_namespace where nspname = 'graphile_worker'`)).rowCount).toBe(0);
    });
  });

  it('a database migrated by this package migrates again as a no-op', async () => {
    const url = await emptyDatabase();
    await migrateDatabase(url, silentLogger);
    const before = await withClient(url, (client) => dumpSchema(client));
    await migrateDatabase(url, silentLogger);
    expect(await withClient(url, (client) => dumpSchema(client))).toBe(before);
  });
});
