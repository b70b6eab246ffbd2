import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/support/config.ts';
import { openDatabase, withDatabase } from '../../src/db/database.ts';
import { LOCK_NS } from '../../src/db/locks.ts';
import { MIGRATIONS_FOLDER } from '../../src/db/migrate.ts';
import { createOfflineSummarizer } from '../../src/gateway/index.ts';
import { silentLogger } from '../../src/support/logger.ts';
import { projectConversationHistory } from '../../src/projection/index.ts';
import { startWorker } from '../../src/worker/supervisor.ts';
import { createWorkerPool } from '../../src/db/worker-pool.ts';
import { createTestDatabase } from '../support/db.ts';
import { inTwoTransactions } from '../support/transactions.ts';
import { addPairs, compactionJobs, createConversation, drift, pairCount } from '../support/fixtures.ts';
import { behaviours, startMessagesServer } from '../support/messages-server.ts';
import { startPgBouncer } from '../support/pgbouncer.ts';
import { spawnSourcebound, until, type WorkerProcess } from '../support/processes.ts';

/**
 * Production topology, part 1: DATABASE_URL is a transaction pooler (a real
 * PgBouncer 1.18, `pool_mode = transaction`, 6 server connections for all
 * clients), DATABASE_DIRECT_URL the server itself. Without the direct URL
 * this topology measured: graphile-worker's named prepared statements
 * colliding, migrators racing, fleet slots leaking, LISTEN never notified.
 */
const db = await createTestDatabase();
const bouncer = await startPgBouncer({ serverUrl: db.adminUrl, poolSize: 6 });
const dbName = new URL(db.url).pathname.slice(1);
const pooledUrl = bouncer.url(dbName);
const server = await startMessagesServer();
const running: WorkerProcess[] = [];
afterEach(async () => {
  for (const w of running.splice(0)) {
    w.child.kill('SIGKILL');
    await w.exited;
  }
  await db.pool.query('delete from graphile_worker._private_jobs');
});
afterAll(async () => {
  await server.close();
  await bouncer.stop();
});

function worker(env: Record<string, string> = {}): WorkerProcess {
  const w = spawnSourcebound(['worker', '--no-migrate'], {
    DATABASE_URL: pooledUrl,
    DATABASE_DIRECT_URL: db.url,
    ANTHROPIC_API_KEY: server.apiKey,
    ANTHROPIC_BASE_URL: server.url,
    SOURCEBOUND_MODEL: 'claude-test',
    SOURCEBOUND_POLL_INTERVAL_MS: '500',
    SOURCEBOUND_FLEET_CONCURRENCY: '0',
    ...env,
  });
  running.push(w);
  return w;
}
// Processes loading TypeScript on two cores at load 15 took over a minute to start.
const started = (w: WorkerProcess) => w.waitForLog((l) => l.msg === 'worker started', 120_000);
const completedIn = async (ids: string[]) =>
  (
    await db.pool.query<{ n: number }>(
      `select count(*)::int as n from sourcebound.conversation_summaries where status = 'completed' and conversation_id = any($1::uuid[])`,
      [ids],
    )
  ).rows[0]!.n;

describe('behind PgBouncer in transaction mode, with a direct URL for sessions', () => {
  it('three migrators at once on an empty database: all succeed, once, and no lock is left', async () => {
    const admin = new pg.Client({ connectionString: db.adminUrl });
    await admin.connect();
    const name = `sb_pgb_${process.pid}_${Date.now()}`;
    await admin.query(`create database ${name}`);
    try {
      const env = { DATABASE_URL: bouncer.url(name), DATABASE_DIRECT_URL: withDatabase(db.adminUrl, name) };
      const migrators = Array.from({ length: 3 }, () => spawnSourcebound(['migrate'], env));
      const codes = await Promise.all(migrators.map((m) => m.exited));
      expect(codes, migrators.map((m) => m.stderr).join('\n')).toEqual([0, 0, 0]);
      const check = new pg.Client({ connectionString: withDatabase(db.adminUrl, name) });
      await check.connect();
      const { rows: applied } = await check.query<{ n: number }>(
        'select count(*)::int as n from sourcebound_migrations.__drizzle_migrations',
      );
      await check.end();
      const journal = JSON.parse(readFileSync(join(MIGRATIONS_FOLDER, 'meta/_journal.json'), 'utf8')) as { entries: unknown[] };
      expect(applied[0]!.n).toBe(journal.entries.length);
      const { rows: locks } = await admin.query<{ n: number }>(
        `select count(*)::int as n from pg_locks l join pg_database d on d.oid = l.database
         where l.locktype = 'advisory' and l.classid = $1 and d.datname = $2`,
        [LOCK_NS.migrate, name],
      );
      expect(locks[0]!.n).toBe(0);
    } finally {
      await admin.query(`drop database if exists ${name} with (force)`);
      await admin.end();
    }
    // Three processes migrating an empty database took 49 s at load 15.
  }, 150_000);

  it('a worker drains 300 ranges: no prepared-statement error, no error logged, nothing left locked', async () => {
    server.reset();
    server.setDefault(behaviours.echo());
    const conversations: string[] = [];
    // 30 conversations x 120 pairs: 10 plannable ranges each.
    for (let i = 0; i < 30; i++) {
      const c = await createConversation(db.pool);
      await addPairs(db.pool, c, 120);
      conversations.push(c);
    }
    await db.pool.query('analyze');
    const w = worker({ SOURCEBOUND_WORKER_CONCURRENCY: '4', SOURCEBOUND_MODEL_CONCURRENCY: '4' });
    await started(w);
    await until(async () => (await completedIn(conversations)) === 300, 200_000, '300 ranges completed through PgBouncer');
    await until(
      async () =>
        (await db.pool.query<{ n: number }>('select count(*)::int as n from graphile_worker._private_jobs where locked_at is not null'))
          .rows[0]!.n === 0,
      20_000,
      'no job left locked',
    );
    expect(w.logs.filter((l) => /prepared statement/i.test(JSON.stringify(l)))).toEqual([]);
    // Errors logged: none but a slow connect on a busy two-core machine (graphile-worker's cron retries those itself).
    expect(w.logs.filter((l) => l.level >= 50 && !/timeout exceeded when trying to connect/.test(l.msg))).toEqual([]);
    expect(w.logs.filter((l) => l.msg === 'worker runner restarted')).toEqual([]);
    expect(server.count).toBe(300);
    // Multiplexed: all of the worker's clients went through at most 6 server connections.
    expect(await bouncer.serverConnections(dbName)).toBeLessThanOrEqual(6);

    // Projection reads the same through the pooler as directly; the stable layout it saves through it is kept.
    const pooled = new pg.Pool({ connectionString: pooledUrl, max: 4 });
    try {
      for (const c of conversations.slice(0, 3)) {
        // A budget that needs summaries (a history that fits is sent raw): the largest, in 10% steps, that shows one.
        const at = (budgetBytes: number) =>
          projectConversationHistory({ pool: db.pool, conversationId: c, scope: 'tenant-a', budgetBytes, layout: 'newest-first' });
        let budgetBytes = (await at(1 << 24)).bytes;
        while (!(await at(budgetBytes)).items.some((item) => item.kind === 'summary') && budgetBytes > 1000)
          budgetBytes = Math.floor(budgetBytes * 0.9);
        const args = { conversationId: c, scope: 'tenant-a', budgetBytes };
        const fresh = await projectConversationHistory({ pool: db.pool, ...args, layout: 'newest-first' });
        expect(await projectConversationHistory({ pool: pooled, ...args, layout: 'newest-first' })).toEqual(fresh);
        expect(fresh.items.some((item) => item.kind === 'summary')).toBe(true);
        const first = await projectConversationHistory({ pool: pooled, ...args });
        expect(first.cache.layoutSaved).toBe(true);
        const again = await projectConversationHistory({ pool: pooled, ...args });
        expect(again.cache.rewrite).toBeNull();
        expect(again.items).toEqual(first.items);
        expect(await projectConversationHistory({ pool: db.pool, ...args })).toEqual(again);
      }
    } finally {
      await pooled.end();
    }
  }, 260_000);

  it("fleet admission holds its limit across three workers and frees a SIGKILLed holder's slots", async () => {
    server.reset();
    server.setDefault(behaviours.echo(400));
    const limit = 3;
    const env = {
      SOURCEBOUND_FLEET_CONCURRENCY: String(limit),
      SOURCEBOUND_WORKER_CONCURRENCY: '2',
      SOURCEBOUND_MODEL_CONCURRENCY: '2',
      SOURCEBOUND_LEASE_MS: '3000',
      SOURCEBOUND_MODEL_TIMEOUT_MS: '2500',
      SOURCEBOUND_ADMISSION_WAIT_MS: '3000',
    };
    const workers = Array.from({ length: 3 }, () => worker(env));
    await Promise.all(workers.map(started));
    const slotsHeld = async () =>
      (
        await db.pool.query<{ n: number }>(
          `select count(*)::int as n from pg_locks l join pg_database d on d.oid = l.database
       where l.locktype = 'advisory' and l.classid = $1 and l.granted and d.datname = current_database()`,
          [LOCK_NS.admission],
        )
      ).rows[0]!.n;
    let maxHeld = 0;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        maxHeld = Math.max(maxHeld, await slotsHeld());
        await new Promise((r) => setTimeout(r, 20));
      }
    })();
    const conversations: string[] = [];
    // Its claim is taken over after the lease; the sweep is what re-enqueues it in production.
    const sweeper = setInterval(() => {
      void db.pool.query('select sourcebound.sweep_compaction()').catch(() => {});
    }, 1000);
    try {
      for (let i = 0; i < 12; i++) {
        const c = await createConversation(db.pool);
        await addPairs(db.pool, c, 30);
        conversations.push(c);
      }
      // Kill a worker while calls are in flight (the fleet's slots are held).
      await server.waitFor(() => server.inFlight >= 2, 30_000);
      workers[0]!.child.kill('SIGKILL');
      await workers[0]!.exited;
      await until(async () => (await completedIn(conversations)) === 12, 90_000, 'twelve ranges completed');
    } finally {
      clearInterval(sweeper);
      sampling = false;
      await sampler;
    }
    expect(server.maxInFlight).toBeLessThanOrEqual(limit);
    expect(maxHeld).toBeLessThanOrEqual(limit);
    expect(maxHeld).toBeGreaterThan(0);
    // Idle workers hold nothing; killed ones leave nothing behind.
    await until(async () => (await slotsHeld()) === 0, 10_000, 'no slot held by idle workers');
    for (const w of workers.slice(1)) {
      w.child.kill('SIGKILL');
      await w.exited;
    }
    expect(await slotsHeld()).toBe(0);
  }, 150_000);

  it('writers through PgBouncer: two transactions completing pairs 29 and 30 at once still enqueue', async () => {
    for (let round = 0; round < 3; round++) {
      const c = await createConversation(db.pool);
      await addPairs(db.pool, c, 28);
      const pending = await addPairs(db.pool, c, 2, undefined, { runStatus: 'running', startAt: 28 });
      const complete = `update sourcebound.runs set status = 'completed' where id = $1`;
      await inTwoTransactions(pooledUrl, [complete, [pending[0]!.runId]], [complete, [pending[1]!.runId]]);
      expect(await pairCount(db.pool, c)).toBe(30);
      expect(await compactionJobs(db.pool, c)).toBe(1);
      expect(await drift(db.pool, c)).toEqual([]);
    }
  });

  it('new jobs are picked up by LISTEN on the direct URL, never by polling', async () => {
    // The poll interval is a minute, so a pickup by polling would take up to a minute: every
    // pickup in a tenth of that proves the notification reached the worker. (How fast a pickup
    // through PgBouncer is against a direct one is a speed figure: P11 in the benchmarks.)
    const poll = 60_000;
    const config = loadConfig({
      DATABASE_URL: pooledUrl,
      DATABASE_DIRECT_URL: db.url,
      SOURCEBOUND_POLL_INTERVAL_MS: String(poll),
      LOG_LEVEL: 'silent',
    });
    const database = await openDatabase(config, silentLogger, 6);
    const {
      rows: [before],
    } = await db.pool.query<{ at: Date }>('select clock_timestamp() as at');
    const handle = await startWorker({
      config,
      logger: silentLogger,
      database,
      summarizer: createOfflineSummarizer({ maxChars: 6000 }),
      skipMigrations: true,
    });
    // graphile-worker opens its LISTEN connection after start-up and does not look for jobs when
    // it takes effect, so a job added before then waits for the poll: wait until this worker's
    // LISTEN has run on the direct URL (a backend started since, idle after it).
    await until(
      async () =>
        (
          await db.pool.query(
            `select 1 from pg_stat_activity where datname = current_database() and backend_start >= $1
         and state = 'idle' and query like 'LISTEN "jobs:insert"%'`,
            [before!.at],
          )
        ).rowCount! > 0,
      30_000,
      'the worker listening on the direct URL',
    );
    const starts = new Map<string, number>();
    handle.runner.events.on('job:start', ({ job }) =>
      starts.set(String((job.payload as { conversationId?: string }).conversationId), performance.now()),
    );
    expect(database.pooled).toBe(true);
    const pickups: number[] = [];
    try {
      for (let i = 0; i < 8; i++) {
        const c = await createConversation(db.pool);
        const t0 = performance.now();
        await db.pool.query('select sourcebound.enqueue_compaction($1)', [c]);
        await until(async () => starts.has(c), poll / 2, 'job picked up');
        pickups.push(starts.get(c)! - t0);
      }
    } finally {
      await handle.stop();
      await database.close();
    }
    expect(Math.max(...pickups)).toBeLessThan(poll / 10);
  }, 120_000);

  it("the sweep crontab's queries go through the pooled URL while LISTEN holds the direct session", async () => {
    // graphile-worker's cron runs `pool.query()`, which pg-pool serves through the callback form of
    // connect, LISTEN's: routed to the one direct connection LISTEN holds, every tick timed out
    // ("timeout exceeded when trying to connect") and a crashed worker's ranges were never swept.
    const pool = createWorkerPool({
      connectionString: pooledUrl,
      directConnectionString: db.url,
      max: 2,
      applicationName: 'sourcebound-test',
      logger: silentLogger,
    });
    try {
      const listen = await new Promise<pg.PoolClient>((resolve, reject) => {
        pool.connect((err, client) => (err || !client ? reject(err) : resolve(client)));
      });
      await listen.query('LISTEN "jobs:insert"');
      // What cron.js asks, in the same form; it must not wait for LISTEN's connection.
      const { rows } = await pool.query('select count(*)::int as n from graphile_worker._private_known_crontabs');
      expect(rows[0].n).toBeGreaterThanOrEqual(0);
      // On a connection of the pooled pool (LISTEN's is the direct pool's only one).
      expect(pool.totalCount).toBe(1);
      listen.release();
    } finally {
      await pool.end();
    }
  }, 30_000);
});
