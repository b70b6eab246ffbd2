import { afterAll, describe, expect, it } from 'vitest';
import { createTestDatabase } from '../support/db.ts';
import { behaviours, startMessagesServer } from '../support/messages-server.ts';
import { Fleet } from './support/fleet.ts';
import {
  expectZeroFigures,
  finalChecks,
  harnessPool,
  quiesce,
  recordFigures,
  scopeCanaries,
  seedConversations,
  size,
  sleep,
} from './support/scenario.ts';

/**
 * Scenario 1c, a worker SIGKILLed mid-call under the DEFAULT configuration
 * (lease 30 s renewed every 10 s, heartbeat every 5 s, no harness sweeper):
 * three workers, a slow model; once the first holds claims whose calls are
 * in flight it is killed and not started again. The others must notice: every
 * range it held is settled by another worker within 60 s, none of its
 * graphile-worker jobs stays locked, and no identity gets more than two
 * model calls.
 */

const CONVERSATIONS = size(12, 40);
const PAIRS = 45;
const MODEL_DELAY_MS = 3000;
const SETTLE_LIMIT_MS = 60_000;

const db = await createTestDatabase();
const server = await startMessagesServer();
const pool = harnessPool(db.url);
// Only what a deployment must set: where the database and the model are. Every other setting is its default.
const fleet = new Fleet(3, {
  DATABASE_URL: db.url,
  ANTHROPIC_API_KEY: server.apiKey,
  ANTHROPIC_BASE_URL: server.url,
  SOURCEBOUND_MODEL: 'claude-test',
  LOG_LEVEL: 'info',
});
afterAll(async () => {
  await fleet.stop();
  await pool.end();
  await server.close();
});

describe('fault scenario 1c: a worker SIGKILLed mid-call, default configuration', () => {
  it('its ranges are settled by the others within 60 s, its jobs unlocked, at most two calls per identity', async () => {
    const startedAt = Date.now();
    server.setDefault(behaviours.echo(MODEL_DELAY_MS));
    const canaries = scopeCanaries(['tenant-a', 'tenant-b']);
    await seedConversations(pool, { count: CONVERSATIONS, pairs: PAIRS, canaries });
    await fleet.start();
    const victimId = String(fleet.logs[0]!.find((l) => l.msg === 'worker started')!.workerId);
    const {
      rows: [registered],
    } = await pool.query<{ ids: string[] }>(`select graphile_worker_ids as ids from sourcebound.workers where worker_id = $1`, [victimId]);
    const graphileIds = registered!.ids;
    expect(graphileIds.length).toBeGreaterThan(0);

    // Killed as soon as it holds claims whose calls are under way (the model answers after 3 s).
    const heldBy = async () =>
      (
        await pool.query<{ id: string }>(
          `select s.id from sourcebound.conversation_summaries s
       where s.status = 'running' and (s.lease_owner = $1 or starts_with(s.lease_owner, $1 || '/r'))`,
          [victimId],
        )
      ).rows.map((r) => r.id);
    for (let i = 0; i < 300 && (await heldBy()).length === 0; i++) await sleep(50);
    await fleet.kill(0);
    const killedAt = Date.now();
    // What it held at its death: its running claims and the jobs locked for it.
    const held = await heldBy();
    expect(held.length).toBeGreaterThan(0);
    const {
      rows: [locked],
    } = await pool.query<{ n: number }>(`select count(*)::int as n from graphile_worker._private_jobs where locked_by = any($1::text[])`, [
      graphileIds,
    ]);

    // Every range it held settled (completed, or failed for good) by another worker; the clock runs from the kill.
    let settledAfterMs = -1;
    while (Date.now() - killedAt < SETTLE_LIMIT_MS + 30_000) {
      const {
        rows: [open],
      } = await pool.query<{ n: number }>(
        `select count(*)::int as n from sourcebound.conversation_summaries where id = any($1::uuid[]) and status not in ('completed', 'failed')`,
        [held],
      );
      if (open!.n === 0) {
        settledAfterMs = Date.now() - killedAt;
        break;
      }
      await sleep(250);
    }
    const {
      rows: [stillLocked],
    } = await pool.query<{ n: number }>(`select count(*)::int as n from graphile_worker._private_jobs where locked_by = any($1::text[])`, [
      graphileIds,
    ]);
    const reaped = fleet.findLogs((l) => l.msg.startsWith('a worker stopped beating') && l.deadWorkerId === victimId);

    await quiesce(pool, server, { timeoutMs: size(180_000, 600_000), what: 'SIGKILL, default configuration' });
    const checks = await finalChecks(pool, { canaries });
    const {
      rows: [calls],
    } = await pool.query<{ most: number; settledBy: string[] }>(
      `select (select coalesce(max(n), 0)::int from (select count(*) as n from sourcebound.conversation_summary_attempts group by summary_id) a) as most,
              (select array_agg(distinct a.worker_id) from sourcebound.conversation_summary_attempts a
               where a.summary_id = any($1::uuid[]) and a.outcome = 'ok') as "settledBy"`,
      [held],
    );
    const figures = recordFigures({
      id: '1c-sigkill-default',
      title: 'a worker SIGKILLed mid-call, default configuration (3 workers)',
      startedAt,
      checks,
      server,
      fleet,
      faults: {
        'claims the killed worker held': held.length,
        'its jobs locked at the kill': locked!.n,
        'its ranges settled after (s)': settledAfterMs < 0 ? 'not within 90 s' : (settledAfterMs / 1000).toFixed(1),
        'its jobs still locked after': stillLocked!.n,
        'most calls of one identity': calls!.most,
      },
      notes: [
        `model delay ${MODEL_DELAY_MS} ms; lease, renewal, heartbeat and poll interval at their defaults; no harness sweeper until quiescence`,
      ],
    });

    expectZeroFigures(figures, checks);
    expect(figures.unexpectedExits).toBe(0);
    expect(settledAfterMs).toBeGreaterThanOrEqual(0);
    expect(settledAfterMs).toBeLessThanOrEqual(SETTLE_LIMIT_MS);
    expect(stillLocked!.n).toBe(0);
    expect(reaped).toHaveLength(1);
    expect(reaped[0]).toMatchObject({ jobsUnlocked: locked!.n });
    expect(Number(reaped[0]!.claimsReleased)).toBeGreaterThan(0);
    expect(calls!.most).toBeLessThanOrEqual(2);
    expect(calls!.settledBy ?? []).not.toContain(victimId);
    expect(figures.completedRanges + figures.failedRanges).toBe(figures.ranges);
  });
});
