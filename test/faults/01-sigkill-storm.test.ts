import { afterAll, describe, expect, it } from 'vitest';
import { createTestDatabase } from '../support/db.ts';
import { behaviours, startMessagesServer } from '../support/messages-server.ts';
import { Fleet, workerEnv } from './support/fleet.ts';
import { openRangesByIds } from './support/invariants.ts';
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
  startSweeper,
} from './support/scenario.ts';

/**
 * Scenario 1, SIGKILL storm: four workers compact many conversations against
 * a slow model while a random worker is SIGKILLed every few seconds and
 * started again. A killed worker's claim is taken over after its 4 s lease
 * (its attempt counts); its graphile job stays locked for hours, so the
 * harness sweeps every second the way the crontab does every minute.
 */

const CONVERSATIONS = size(40, 200);
const PAIRS = 45;
const WORKERS = 4;
const KILLS = size(10, 50);
// Slow enough that the work outlasts the kills (about 1.75 s apart).
const MODEL_DELAY_MS = 2000;

const db = await createTestDatabase();
const server = await startMessagesServer();
const pool = harnessPool(db.url);
// Lease 4 s > deadline 3.5 s: only a dead worker's claim is ever taken over.
const fleet = new Fleet(WORKERS, workerEnv(db.url, server, { SOURCEBOUND_LEASE_MS: '4000', SOURCEBOUND_MODEL_TIMEOUT_MS: '3500' }));
afterAll(async () => {
  await fleet.stop();
  await pool.end();
  await server.close();
});

describe('fault scenario 1: SIGKILL storm', () => {
  it('every range ends completed once or failed after two spent attempts; nothing else moves', async () => {
    const startedAt = Date.now();
    server.setDefault(behaviours.echo(MODEL_DELAY_MS));
    const canaries = scopeCanaries(['tenant-a', 'tenant-b']);
    await seedConversations(pool, { count: CONVERSATIONS, pairs: PAIRS, canaries });
    await fleet.start();
    const sweeper = startSweeper(pool, 1000);

    const restarting: Promise<unknown>[] = [];
    let kills = 0;
    while (kills < KILLS) {
      await sleep(1000 + Math.random() * 1500);
      if ((await openRangesByIds(pool)) === 0) break;
      const alive = fleet.alive();
      if (alive.length === 0) continue;
      const victim = alive[Math.floor(Math.random() * alive.length)]!;
      await fleet.kill(victim);
      kills++;
      // Restarted at once, in the background: the storm goes on while it boots.
      fleet.restarts++;
      restarting.push(fleet.spawn(victim));
    }
    await Promise.all(restarting);
    await quiesce(pool, server, { timeoutMs: size(240_000, 900_000), what: 'SIGKILL storm' });
    await sweeper.stop();

    const checks = await finalChecks(pool, { canaries });
    const {
      rows: [takeovers],
    } = await pool.query<{ n: number }>(
      `select count(*)::int as n from sourcebound.conversation_summary_attempts where reason like 'lease_expired%'`,
    );
    const figures = recordFigures({
      id: '1-sigkill-storm',
      title: `SIGKILL storm (${WORKERS} workers, slow model)`,
      startedAt,
      checks,
      server,
      fleet,
      faults: { SIGKILLs: fleet.kills, restarts: fleet.restarts, 'claims taken over after lease': takeovers!.n },
      notes: [`model delay ${MODEL_DELAY_MS} ms, lease 4000 ms, a kill every 1-2.5 s, sweep every 1 s`],
    });

    expectZeroFigures(figures, checks);
    expect(figures.completedRanges + figures.failedRanges).toBe(figures.ranges);
    expect(figures.ranges).toBe(CONVERSATIONS * 2);
    expect(figures.unexpectedExits).toBe(0);
    // Every attempt a kill left open was settled by a takeover, and counted.
    expect(checks.outcomes['open'] ?? 0).toBe(0);
    expect(fleet.kills).toBeGreaterThan(0);
  });
});
