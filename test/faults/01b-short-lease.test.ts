import { afterAll, describe, expect, it } from 'vitest';
import { createTestDatabase } from '../support/db.ts';
import { behaviours, startMessagesServer } from '../support/messages-server.ts';
import { Fleet, workerEnv } from './support/fleet.ts';
import {
  expectZeroFigures,
  finalChecks,
  harnessPool,
  quiesce,
  recordFigures,
  scopeCanaries,
  seedConversations,
  size,
  startSweeper,
} from './support/scenario.ts';

/**
 * Scenario 1b, a lease shorter than the model call and not renewed (renewal
 * off; the worker warns about this configuration): ONE worker process running four jobs, calls that take
 * 1.5-3.5 s against a 2 s lease, and a sweep every half second. Expired
 * claims are taken over by other jobs of the same process while the first
 * call still runs; the late first result must be dropped (lease lost), never
 * committed over the takeover. This is the process-level check of the
 * regression in test/regressions/same-worker-takeover.test.ts.
 */

const CONVERSATIONS = size(8, 30);

const db = await createTestDatabase();
const server = await startMessagesServer();
const pool = harnessPool(db.url);
const fleet = new Fleet(
  1,
  workerEnv(db.url, server, {
    SOURCEBOUND_WORKER_CONCURRENCY: '4',
    SOURCEBOUND_MODEL_CONCURRENCY: '4',
    SOURCEBOUND_LEASE_MS: '2000',
    // Renewal off: the lease runs out under the call, as when renewals cannot reach the database.
    SOURCEBOUND_LEASE_RENEW_MS: '0',
    SOURCEBOUND_MODEL_TIMEOUT_MS: '8000',
  }),
);
afterAll(async () => {
  await fleet.stop();
  await pool.end();
  await server.close();
});

describe('fault scenario 1b: lease shorter than the call, one process', () => {
  it('takeovers within one process never commit a late result; every attempt is settled', async () => {
    const startedAt = Date.now();
    // Calls of 1.5 s to 3.5 s, in a fixed rotation, against a 2 s lease.
    const delays = [1500, 3500, 1800, 2600, 1500, 3000];
    for (let i = 0; i < 200; i++) server.enqueue(behaviours.echo(delays[i % delays.length]));
    server.setDefault(behaviours.echo(1500));
    const canaries = scopeCanaries(['tenant-a', 'tenant-b']);
    await seedConversations(pool, { count: CONVERSATIONS, pairs: 30, canaries });
    await fleet.start();
    const sweeper = startSweeper(pool, 500);
    await quiesce(pool, server, { timeoutMs: size(180_000, 600_000), what: 'short lease' });
    await sweeper.stop();

    const checks = await finalChecks(pool, { canaries });
    const {
      rows: [takeovers],
    } = await pool.query<{ n: number }>(
      `select count(*)::int as n from sourcebound.conversation_summary_attempts where reason like 'lease_expired%'`,
    );
    const leaseLost = fleet.findLogs((l) => l.msg.startsWith('lease lost before commit')).length;
    const figures = recordFigures({
      id: '1b-short-lease',
      title: 'lease (2 s) shorter than calls (1.5-3.5 s), one process',
      startedAt,
      checks,
      server,
      fleet,
      faults: { 'claims taken over after lease': takeovers!.n, 'late results dropped (lease lost)': leaseLost },
      notes: ['takeovers here are by other jobs of the same worker process, which share its lease owner id'],
    });

    expectZeroFigures(figures, checks);
    expect(figures.completedRanges + figures.failedRanges).toBe(figures.ranges);
    expect(takeovers!.n).toBeGreaterThan(0);
    expect(figures.unexpectedExits).toBe(0);
  });
});
