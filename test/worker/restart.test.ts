import { afterAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/support/config.ts';
import { openDatabase } from '../../src/db/database.ts';
import { attemptsOfConversationRead, summariesOfConversationRead } from '../../src/db/queries/summaries.ts';
import { createOfflineSummarizer } from '../../src/gateway/index.ts';
import type { Summarizer } from '../../src/support/summary-contract.ts';
import { silentLogger } from '../../src/support/logger.ts';
import { startWorker } from '../../src/worker/supervisor.ts';
import { createTestDatabase } from '../support/db.ts';
import { addPairs, createConversation } from '../support/fixtures.ts';
import { behaviours, startMessagesServer } from '../support/messages-server.ts';
import { spawnSourcebound, until } from '../support/processes.ts';
import { startTcpProxy } from '../support/tcp-proxy.ts';

/**
 * A worker whose PostgreSQL goes away and comes back (a TCP proxy cuts every
 * connection and refuses new ones: what a restart looks like to a client).
 * The fault suite's scenario 2 restarts a real server; these are the cheap,
 * deterministic cases.
 */
const db = await createTestDatabase();
const target = new URL(db.url);
const server = await startMessagesServer();
afterAll(() => server.close());

/**
 * The offline summarizer, except that the first call waits until `release()`;
 * with `thenThrow` that call then throws (a task that dies with its claim open).
 */
function gatedSummarizer(options: { thenThrow?: boolean } = {}) {
  const offline = createOfflineSummarizer({ maxChars: 6000 });
  let release!: () => void;
  const gate = new Promise<void>((r) => {
    release = r;
  });
  let entered!: () => void;
  const inFlight = new Promise<void>((r) => {
    entered = r;
  });
  let returned!: () => void;
  const answered = new Promise<void>((r) => {
    returned = r;
  });
  let calls = 0;
  const summarizer: Summarizer = {
    model: offline.model,
    async summarize(request) {
      if (calls++ > 0) return offline.summarize(request);
      entered();
      await gate;
      if (options.thenThrow) throw new Error('the task died with its claim open');
      const answer = await offline.summarize(request);
      returned();
      return answer;
    },
  };
  /** `answered`: the first call has returned its answer (the commit comes next). */
  return { summarizer, release, inFlight, answered };
}

/** A worker in this process whose PostgreSQL is behind a TCP proxy, with a 30-pair conversation whose first call is gated. */
async function workerBehindProxy(env: Record<string, string>, gate: { thenThrow?: boolean } = {}) {
  const proxy = await startTcpProxy({ host: target.hostname, port: Number(target.port || 5432) });
  const config = loadConfig({
    DATABASE_URL: proxy.through(db.url),
    SOURCEBOUND_POLL_INTERVAL_MS: '200',
    SOURCEBOUND_LEASE_MS: '60000',
    SOURCEBOUND_RECOVERY_TIMEOUT_MS: '30000',
    LOG_LEVEL: 'silent',
    ...env,
  });
  const database = await openDatabase(config, silentLogger, 8);
  const gated = gatedSummarizer(gate);
  const handle = await startWorker({ config, logger: silentLogger, database, summarizer: gated.summarizer, skipMigrations: true });
  const close = async () => {
    await handle.stop();
    await database.close();
    await proxy.close();
  };
  try {
    const conversation = await createConversation(db.pool);
    await addPairs(db.pool, conversation, 30);
    await gated.inFlight;
    return { proxy, gated, handle, conversation, close };
  } catch (error) {
    await close();
    throw error;
  }
}

const lockedJobs = async () =>
  (await db.pool.query<{ n: number }>('select count(*)::int as n from graphile_worker._private_jobs where locked_at is not null')).rows[0]!
    .n;
const completed = async (c: string) => (await summariesOfConversationRead(db.pool, c)).some((r) => r.status === 'completed');

describe('a worker through a PostgreSQL outage', () => {
  it('rides it out in-process: a new runner, a claim its dead task left open taken over at once (not after the 60 s lease)', async () => {
    const {
      proxy,
      gated,
      handle,
      conversation: c,
      close,
    } = await workerBehindProxy({ SOURCEBOUND_SHUTDOWN_TIMEOUT_MS: '1000' }, { thenThrow: true });
    try {
      await proxy.down();
      await until(async () => handle.health().recovering, 10_000, 'the worker notices the outage');
      // The task dies while the database is away: its claim stays running under its 60 s lease.
      gated.release();
      await proxy.up();
      const back = Date.now();
      await until(async () => completed(c), 30_000, 'range completed after the outage');
      expect(Date.now() - back).toBeLessThan(30_000);
      expect(handle.health()).toMatchObject({ running: true, recovering: false, restarts: 1 });
      const attempts = await attemptsOfConversationRead(db.pool, c);
      expect(attempts.map((a) => [a.outcome, a.spent])).toEqual([
        ['unknown', true],
        ['ok', true],
      ]);
      // Both by this process: the first generation's claim, handed back, then the second's.
      expect(attempts[1]!.workerId).toBe(`${handle.workerId}/r1`);
      expect(attempts[0]!.workerId).toBe(handle.workerId);
      // No job left locked: the one that completed the range reads the marks
      // once more before it ends, so it may still be finishing.
      await until(async () => (await lockedJobs()) === 0, 10_000, 'no job left locked');
      expect(await handle.metrics.registry.getSingleMetricAsString('sourcebound_worker_restarts_total')).toMatch(
        /sourcebound_worker_restarts_total\{reason="[a-z_]+"\} 1/,
      );
    } finally {
      await close();
    }
  });

  it('a call that returns while the database is away commits once it is back: the answer in hand costs one attempt', async () => {
    const { proxy, gated, handle, conversation: c, close } = await workerBehindProxy({ SOURCEBOUND_SHUTDOWN_TIMEOUT_MS: '1000' });
    try {
      await proxy.down();
      await until(async () => handle.health().recovering, 10_000, 'the worker notices the outage');
      // The answer arrives while the database is away: its commit fails, and is tried again.
      gated.release();
      await gated.answered;
      await proxy.up();
      await until(async () => completed(c), 30_000, 'range completed by the retried commit');
      const attempts = await attemptsOfConversationRead(db.pool, c);
      expect(attempts.map((a) => [a.outcome, a.spent, a.workerId])).toEqual([['ok', true, handle.workerId]]);
      await until(async () => (await lockedJobs()) === 0, 10_000, 'no job left locked');
    } finally {
      await close();
    }
  });

  it('a call still running when the database is back commits normally: the outage costs it no attempt', async () => {
    const { proxy, gated, handle, conversation: c, close } = await workerBehindProxy({ SOURCEBOUND_SHUTDOWN_TIMEOUT_MS: '500' });
    try {
      await proxy.down();
      await until(async () => handle.health().recovering, 10_000, 'the worker notices the outage');
      await proxy.up();
      await until(async () => handle.health().restarts === 1 && handle.health().running, 20_000, 'a new runner');
      // Longer than the shutdown deadline (500 ms): a retirement is not a shutdown, the call is not cut.
      await new Promise((r) => setTimeout(r, 1500));
      gated.release();
      await until(async () => completed(c), 20_000, 'range completed by the call that outlived the outage');
      const attempts = await attemptsOfConversationRead(db.pool, c);
      expect(attempts.map((a) => [a.outcome, a.spent, a.workerId])).toEqual([['ok', true, handle.workerId]]);
      await until(async () => (await lockedJobs()) === 0, 10_000, 'no job left locked');
    } finally {
      await close();
    }
  });

  it('exits 1 with the reason at error when PostgreSQL does not come back within SOURCEBOUND_RECOVERY_TIMEOUT_MS', async () => {
    const proxy = await startTcpProxy({ host: target.hostname, port: Number(target.port || 5432) });
    try {
      const w = spawnSourcebound(['worker', '--no-migrate'], {
        DATABASE_URL: proxy.through(db.url),
        ANTHROPIC_API_KEY: server.apiKey,
        ANTHROPIC_BASE_URL: server.url,
        SOURCEBOUND_FLEET_CONCURRENCY: '0',
        SOURCEBOUND_RECOVERY_TIMEOUT_MS: '2000',
        SOURCEBOUND_POLL_INTERVAL_MS: '200',
      });
      server.setDefault(behaviours.echo());
      await w.waitForLog((l) => l.msg === 'worker started', 60_000);
      await proxy.down();
      const lost = Date.now();
      expect(await w.exited).toBe(1);
      // The recovery timeout, plus the shutdown of what is left: bounded, never a hang.
      expect(Date.now() - lost).toBeLessThan(20_000);
      // What stopped the work is said at error: the recovery timeout, and what was lost.
      const context = `stderr: ${w.stderr.slice(-3000)}\nlast logs: ${JSON.stringify(w.logs.slice(-20))}`;
      expect(w.logs.find((l) => /could not start again within 2000 ms/.test(l.msg))?.level, context).toBe(50);
      expect(w.logs.find((l) => l.msg.startsWith('worker lost its database'))?.level, context).toBe(50);
      // No crash beside it (Node prints its version after an uncaught error): graphile-worker's
      // double release of its LISTEN client once ended the process here first (src/db/worker-pool.ts).
      expect(w.stderr, context).not.toMatch(/Node\.js v\d|Unhandled|uncaught/i);
    } finally {
      await proxy.close();
    }
  });
});
