import pg from 'pg';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { attemptsOfConversationRead, summariesOfConversationRead } from '../../src/db/queries/summaries.ts';
import { createTestDatabase } from '../support/db.ts';
import { withDatabase } from '../../src/db/database.ts';
import { addPairs, createConversation } from '../support/fixtures.ts';
import { behaviours, startMessagesServer } from '../support/messages-server.ts';
import { spawnSourcebound, until, type WorkerProcess } from '../support/processes.ts';

const db = await createTestDatabase();
const server = await startMessagesServer();
const running: WorkerProcess[] = [];
afterAll(() => server.close());
beforeEach(() => {
  server.reset();
  server.setDefault(behaviours.echo());
});
afterEach(async () => {
  for (const w of running.splice(0)) {
    w.child.kill('SIGKILL');
    await w.exited;
  }
  // No leftover jobs between tests: each test counts its own.
  await db.pool.query('delete from graphile_worker._private_jobs');
});

function worker(env: Record<string, string> = {}, url = db.url): WorkerProcess {
  const w = spawnSourcebound(['worker'], {
    DATABASE_URL: url,
    ANTHROPIC_API_KEY: server.apiKey,
    ANTHROPIC_BASE_URL: server.url,
    SOURCEBOUND_MODEL: 'claude-test',
    SOURCEBOUND_POLL_INTERVAL_MS: '200',
    SOURCEBOUND_FLEET_CONCURRENCY: '0',
    ...env,
  });
  running.push(w);
  return w;
}

const started = (w: WorkerProcess, timeoutMs = 60_000) => w.waitForLog((l) => l.msg === 'worker started', timeoutMs);
const completedRanges = async (c: string) => (await summariesOfConversationRead(db.pool, c)).filter((r) => r.status === 'completed').length;

describe('sourcebound worker (real processes)', () => {
  it('compacts a conversation that crosses 30 pairs and drops a malformed job with a logged reason', async () => {
    const w = worker();
    await started(w);
    const c = await createConversation(db.pool);
    await addPairs(db.pool, c, 30);
    await db.pool.query(`select graphile_worker.add_job('compact_conversation', '{"conversationId": "not-a-uuid"}'::json)`);
    await db.pool.query(`select graphile_worker.add_job('compact_conversation', '[1, 2]'::json)`);
    await until(async () => (await completedRanges(c)) === 1, 30_000, 'range 0-9 completed');
    const dropped = await w.waitForLog((l) => l.msg.startsWith('invalid compact_conversation payload'));
    expect(dropped.level).toBe(50);
    await until(
      async () => (await db.pool.query('select count(*)::int as n from graphile_worker._private_jobs')).rows[0].n === 0,
      10_000,
      'jobs finished',
    );
    // Dropped, not retried: nothing is left waiting.
    expect(server.count).toBe(1);
  });

  it('SIGTERM lets the running job finish, marks it complete and exits 0', async () => {
    const w = worker();
    await started(w);
    const c = await createConversation(db.pool);
    server.enqueue(behaviours.delayed(1500, behaviours.text('A summary that arrives during shutdown.')));
    await addPairs(db.pool, c, 30);
    await server.waitFor(() => server.inFlight === 1, 30_000);
    w.child.kill('SIGTERM');
    expect(await w.exited).toBe(0);
    expect(await completedRanges(c)).toBe(1);
    // The job is complete, not left locked for four hours.
    const { rows } = await db.pool.query('select count(*)::int as n from graphile_worker._private_jobs');
    expect(rows[0].n).toBe(0);
  });

  it('a worker SIGKILLed during a hanging call: after the lease another worker completes the range; attempts = unknown, ok', async () => {
    const lease = { SOURCEBOUND_LEASE_MS: '3000', SOURCEBOUND_MODEL_TIMEOUT_MS: '60000' };
    const first = worker(lease);
    await started(first);
    const c = await createConversation(db.pool);
    server.enqueue(behaviours.hang());
    await addPairs(db.pool, c, 30);
    await server.waitFor(() => server.inFlight === 1, 30_000);
    first.child.kill('SIGKILL');
    await first.exited;
    const second = worker(lease);
    await started(second);
    // The dead worker's job stays locked (graphile-worker frees it after 4 hours);
    // a new enqueue (the sweep does this in production) is taken over after the lease.
    await db.pool.query('select sourcebound.enqueue_compaction($1)', [c]);
    await until(async () => (await completedRanges(c)) === 1, 30_000, 'range taken over and completed');
    const attempts = await attemptsOfConversationRead(db.pool, c);
    expect(attempts.map((a) => [a.outcome, a.spent])).toEqual([
      ['unknown', true],
      ['ok', true],
    ]);
    expect(attempts[0]!.reason).toMatch(/lease_expired/);
    expect(new Set(attempts.map((a) => a.workerId)).size).toBe(2);
  });

  it('eight workers and 1,000 duplicate enqueues: one completed record and one model call per range', async () => {
    const workers = Array.from({ length: 8 }, () => worker({ SOURCEBOUND_WORKER_CONCURRENCY: '2' }));
    // Eight processes loading TypeScript on two cores at load 13 took over 60 s to start.
    await Promise.all(workers.map((w) => started(w, 150_000)));
    server.setDefault(behaviours.echo(100));
    const c = await createConversation(db.pool);
    await addPairs(db.pool, c, 50);
    const storm = new pg.Client({ connectionString: db.url });
    await storm.connect();
    for (let i = 0; i < 1000; i++) await storm.query('select sourcebound.enqueue_compaction($1)', [c]);
    await storm.end();
    await until(async () => (await completedRanges(c)) === 3, 120_000, 'three ranges completed');
    await until(
      async () =>
        (await db.pool.query('select count(*)::int as n from graphile_worker._private_jobs where locked_at is not null')).rows[0].n === 0,
      30_000,
      'workers idle',
    );
    const records = await summariesOfConversationRead(db.pool, c);
    expect(records.map((r) => [r.fromPair, r.status])).toEqual([
      [0, 'completed'],
      [10, 'completed'],
      [20, 'completed'],
    ]);
    expect(server.count).toBe(3);
    expect((await attemptsOfConversationRead(db.pool, c)).length).toBe(3);
  }, 280_000);

  it('three workers with 4 model calls each and a fleet limit of 5 have exactly 5 requests in flight, never more', async () => {
    // Admission may wait as long as a loaded machine needs to fill a wave; a timeout would defer a range.
    const env = {
      SOURCEBOUND_WORKER_CONCURRENCY: '4',
      SOURCEBOUND_MODEL_CONCURRENCY: '4',
      SOURCEBOUND_FLEET_CONCURRENCY: '5',
      SOURCEBOUND_ADMISSION_WAIT_MS: '120000',
    };
    const workers = Array.from({ length: 3 }, () => worker(env));
    await Promise.all(workers.map((w) => started(w)));
    // Every call is parked until the test lets its wave go: 12 calls could run, the fleet lets 5 in.
    server.setDefault(behaviours.hold());
    const conversations: string[] = [];
    for (let i = 0; i < 15; i++) {
      const c = await createConversation(db.pool);
      await addPairs(db.pool, c, 30);
      conversations.push(c);
    }
    for (let released = 0; released < 15; released += 5) {
      await server.waitFor(() => server.held === 5, 60_000);
      server.releaseHeld();
    }
    await until(
      async () => {
        const { rows } = await db.pool.query(
          `select count(*)::int as n from sourcebound.conversation_summaries where status = 'completed' and conversation_id = any($1::uuid[])`,
          [conversations],
        );
        return rows[0].n === 15;
      },
      60_000,
      'fifteen ranges completed',
    );
    // Three waves of exactly five: the limit was reached each time and never passed.
    expect(server.maxInFlight).toBe(5);
    expect(server.count).toBe(15);
    // Three processes starting, then three waves: over a minute at load 15.
  }, 180_000);

  it('two workers starting at once on an empty database migrate it once, safely', async () => {
    const admin = new pg.Client({ connectionString: db.adminUrl });
    await admin.connect();
    const name = `sb_empty_${process.pid}_${Date.now()}`;
    await admin.query(`create database ${name}`);
    try {
      const url = withDatabase(db.adminUrl, name);
      const pair = [worker({}, url), worker({}, url)];
      await Promise.all(pair.map((w) => started(w)));
      const check = new pg.Client({ connectionString: url });
      await check.connect();
      const { rows } = await check.query('select count(*)::int as n from sourcebound_migrations.__drizzle_migrations');
      await check.end();
      expect(rows[0].n).toBeGreaterThanOrEqual(6);
      for (const w of pair) w.child.kill('SIGTERM');
      expect(await Promise.all(pair.map((w) => w.exited))).toEqual([0, 0]);
    } finally {
      await admin.query(`drop database if exists ${name} with (force)`);
      await admin.end();
    }
  });
});

describe('sourcebound CLI', () => {
  it('prints usage and exits 2 on bad arguments; one clear line when the database cannot be reached', async () => {
    const bad = spawnSourcebound(['enqueue', 'not-a-uuid'], { DATABASE_URL: db.url });
    expect(await bad.exited).toBe(2);
    expect(bad.stderr).toMatch(/not a conversation id/);
    expect(bad.stderr).toMatch(/usage: sourcebound enqueue/);
    const unknown = spawnSourcebound(['frobnicate'], { DATABASE_URL: db.url });
    expect(await unknown.exited).toBe(2);
    const down = spawnSourcebound(['migrate'], { DATABASE_URL: 'postgres://postgres@127.0.0.1:1/nowhere' });
    expect(await down.exited).toBe(1);
    expect(down.stderr.trim().split('\n')).toHaveLength(1);
    expect(down.stderr).toMatch(/cannot reach PostgreSQL/);
    const config = spawnSourcebound(['migrate'], { DATABASE_URL: db.url, SOURCEBOUND_LEASE_MS: 'soon' });
    expect(await config.exited).toBe(1);
    expect(config.stderr).toMatch(/SOURCEBOUND_LEASE_MS/);
  });

  it("enqueue adds a job for a conversation of its scope; another scope's id reads like an unknown one", async () => {
    const c = await createConversation(db.pool);
    const ok = spawnSourcebound(['enqueue', c, '--scope', 'tenant-a'], { DATABASE_URL: db.url });
    expect(await ok.exited).toBe(0);
    const { rows } = await db.pool.query(`select count(*)::int as n from graphile_worker._private_jobs where key = $1`, [
      `sourcebound:compact:${c}`,
    ]);
    expect(rows[0].n).toBe(1);
    const unscoped = spawnSourcebound(['enqueue', c], { DATABASE_URL: db.url });
    expect(await unscoped.exited).toBe(2);
    expect(unscoped.stderr).toMatch(/missing --scope/);
    const other = spawnSourcebound(['enqueue', c, '--scope', 'tenant-b'], { DATABASE_URL: db.url });
    const missing = spawnSourcebound(['enqueue', '00000000-0000-4000-8000-000000000000', '--scope', 'tenant-b'], { DATABASE_URL: db.url });
    expect(await other.exited).toBe(1);
    expect(await missing.exited).toBe(1);
    expect(other.stderr).toMatch(/not found in scope "tenant-b"/);
    expect(other.stderr.replace(c, 'ID')).toBe(missing.stderr.replace('00000000-0000-4000-8000-000000000000', 'ID'));
  });
});
