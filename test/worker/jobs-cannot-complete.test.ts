import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/support/config.ts';
import { openDatabase } from '../../src/db/database.ts';
import { silentLogger } from '../../src/support/logger.ts';
import { startWorker } from '../../src/worker/supervisor.ts';
import { RestartStreaks, UNHEALTHY_STREAK } from '../../src/worker/restart-streak.ts';
import { createTestDatabase } from '../support/db.ts';
import { createRuntimeRoles } from '../support/roles.ts';
import { addPairs, createConversation } from '../support/fixtures.ts';
import { until } from '../support/processes.ts';

/**
 * A worker whose jobs cannot be marked complete (issue 36, item 6: "/healthz
 * is not 200 while jobs cannot complete"). graphile-worker stops its runner
 * when `complete_job` fails; the next runner takes the same job and stops the
 * same way. The worker used to restart it within 100 ms, five times a second
 * for ever, and /healthz said 200 between two restarts.
 *
 * The fault is real: the worker runs as a login role of `sourcebound_worker`,
 * whose DELETE on graphile-worker's jobs table is taken away, so every
 * completion fails with PostgreSQL's 42501 while every other write works.
 */
const db = await createTestDatabase();
const roles = await createRuntimeRoles(db, 'complete', {
  beforeDrop: () => db.pool.query('grant delete on graphile_worker._private_jobs to sourcebound_worker'),
});

describe('a worker whose jobs cannot complete', () => {
  it('is unhealthy with the cause named, restarts with growing waits, and completes the job once it can', async () => {
    await db.pool.query('revoke delete on graphile_worker._private_jobs from sourcebound_worker');
    const config = loadConfig({
      DATABASE_URL: roles.urlAs(roles.names.worker),
      SOURCEBOUND_SUMMARIZER: 'offline',
      SOURCEBOUND_POLL_INTERVAL_MS: '100',
      SOURCEBOUND_METRICS_PORT: '0',
    });
    const database = await openDatabase(config, silentLogger, 4);
    const handle = await startWorker({ config, logger: silentLogger, database, skipMigrations: true });
    try {
      const c = await createConversation(db.pool);
      await addPairs(db.pool, c, 30);
      const healthz = async () => {
        const r = await fetch(`http://127.0.0.1:${handle.httpPort}/healthz`);
        return { status: r.status, body: (await r.json()) as { problem: string | null; restarts: number } };
      };
      await until(async () => handle.health().restartStreak !== null, 30_000, 'a restart streak');
      const unhealthy = await healthz();
      expect(unhealthy.status).toBe(503);
      expect(unhealthy.body.problem).toMatch(/^the graphile-worker runner stopped \d+ times in a row, each soon after its start/);
      expect(unhealthy.body.problem).toContain('permission denied for table _private_jobs');
      // Restarts wait 0.2, 0.4, 0.8, 1.6 s...: in 4 s more, a handful, where it used to be twenty.
      const before = handle.health().restarts;
      await new Promise((resolve) => setTimeout(resolve, 4000));
      const during = handle.health().restarts - before;
      expect(during).toBeLessThanOrEqual(4);
      expect((await healthz()).status).toBe(503);
      // Completion works again: the job is completed by the next runner, and the queue empties.
      await db.pool.query('grant delete on graphile_worker._private_jobs to sourcebound_worker');
      await until(
        async () => (await db.pool.query('select count(*)::int as n from graphile_worker._private_jobs')).rows[0].n === 0,
        40_000,
        'the job completed',
      );
      expect(handle.health().running).toBe(true);
    } finally {
      await handle.stop();
      await database.close();
    }
  }, 90_000);
});

describe('restart streaks', () => {
  it('count runners that stop soon after their start, double the wait, and end once a runner has run long enough', () => {
    let now = 0;
    const streaks = new RestartStreaks(() => now, 60_000);
    const waits: number[] = [];
    for (let i = 0; i < 6; i++) {
      now += 500;
      waits.push(streaks.stopped('runner_stopped', Object.assign(new Error('permission denied'), { code: '42501' })));
      expect(streaks.current() === null).toBe(i + 1 < UNHEALTHY_STREAK);
      streaks.started();
    }
    expect(waits).toEqual([0, 200, 400, 800, 1600, 3200]);
    expect(streaks.current()).toEqual({ runnersStopped: 6, lastReason: 'runner_stopped', lastError: 'permission denied' });
    now += 60_000;
    expect(streaks.current()).toBeNull();
    // A runner that ran a minute and then stopped starts a new streak: no wait.
    expect(streaks.stopped('runner_stopped', Object.assign(new Error('x'), { code: '42501' }))).toBe(0);
    expect(streaks.current()).toBeNull();
    // A lost connection or a server shutting down is not a streak's: no wait, not counted.
    streaks.started();
    for (const error of [
      null,
      Object.assign(new Error('gone'), { code: 'ECONNRESET' }),
      Object.assign(new Error('bye'), { code: '57P01' }),
    ]) {
      now += 100;
      expect(streaks.stopped('runner_stopped', error)).toBe(0);
      streaks.started();
    }
    now += 100;
    expect(streaks.stopped('runner_stopped', Object.assign(new Error('x'), { code: '42501' }))).toBe(200);
  });
});
