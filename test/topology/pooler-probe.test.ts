import { afterAll, describe, expect, it } from 'vitest';
import { sharesServerSessions } from '../../src/db/pooler-probe.ts';
import { createTestDatabase } from '../support/db.ts';
import { startPgBouncer } from '../support/pgbouncer.ts';
import { spawnSourcebound } from '../support/processes.ts';

/**
 * The probe that keeps session work (LISTEN, session locks, migrations) off a
 * transaction pooler, against a real PgBouncer in transaction mode and the
 * same database reached directly.
 */
const db = await createTestDatabase();
const bouncer = await startPgBouncer({ serverUrl: db.adminUrl, poolSize: 6 });
const pooledUrl = bouncer.url(new URL(db.url).pathname.slice(1));
afterAll(() => bouncer.stop());

describe('sharesServerSessions', () => {
  it('is true through PgBouncer in transaction mode, every time', async () => {
    for (let i = 0; i < 10; i++) expect(await sharesServerSessions(pooledUrl)).toBe(true);
  });

  it('is false for the database reached directly, every time', async () => {
    for (let i = 0; i < 10; i++) expect(await sharesServerSessions(db.url)).toBe(false);
  });
});

describe('session work refuses a transaction pooler at start', () => {
  it('migrate with DATABASE_URL on the pooler and no DATABASE_DIRECT_URL: exit 1, one line naming DATABASE_DIRECT_URL, no lock left', async () => {
    const migrate = spawnSourcebound(['migrate'], { DATABASE_URL: pooledUrl });
    expect(await migrate.exited).toBe(1);
    expect(migrate.stderr.split('\n').filter(Boolean)).toHaveLength(1);
    expect(migrate.stderr).toMatch(
      /^sourcebound migrate: the URL for session work .* leads to a transaction pooler.*Set DATABASE_DIRECT_URL/,
    );
    const { rows } = await db.pool.query(`select count(*)::int as n from pg_locks where locktype = 'advisory'`);
    expect(rows[0].n).toBe(0);
  });

  it('migrate with DATABASE_DIRECT_URL beside the pooler goes through', async () => {
    const migrate = spawnSourcebound(['migrate'], { DATABASE_URL: pooledUrl, DATABASE_DIRECT_URL: db.url });
    expect(await migrate.exited).toBe(0);
  });

  for (const args of [['worker'], ['worker', '--no-migrate']]) {
    it(`${args.join(' ')} with DATABASE_URL on the pooler and no DATABASE_DIRECT_URL: exit 1 naming DATABASE_DIRECT_URL, no job taken`, async () => {
      await db.pool.query(`select graphile_worker.add_job('sweep_compaction', '{}'::json)`);
      const worker = spawnSourcebound(args, { DATABASE_URL: pooledUrl, SOURCEBOUND_METRICS_PORT: '0' });
      expect(await worker.exited).toBe(1);
      expect(worker.stderr).toMatch(
        /^sourcebound worker: the URL for session work .* leads to a transaction pooler.*Set DATABASE_DIRECT_URL/,
      );
      expect(worker.logs.map((l) => l.msg)).not.toContain('worker started');
      const { rows } = await db.pool.query(
        `select count(*)::int as n from graphile_worker._private_jobs where attempts > 0 or locked_at is not null`,
      );
      expect(rows[0].n).toBe(0);
      await db.pool.query('delete from graphile_worker._private_jobs');
    });
  }
});
