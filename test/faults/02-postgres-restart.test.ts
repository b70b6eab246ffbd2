import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { freePort, startEmbeddedPostgres, type EmbeddedPostgres } from '../../src/db/embedded.ts';
import { migrateDatabase } from '../../src/db/migrate.ts';
import { silentLogger } from '../../src/logger.ts';
import { behaviours, startMessagesServer } from '../support/messages-server.ts';
import { until } from '../support/processes.ts';
import { Fleet, workerEnv } from './support/fleet.ts';
import {
  expectZeroFigures, finalChecks, harnessPool, quiesce, recordFigures, scopeCanaries, seedConversations, size, sleep, startSweeper,
} from './support/scenario.ts';

/**
 * Scenario 2, PostgreSQL restart mid-run. Not the suite's shared server: this
 * scenario starts its own embedded PostgreSQL in a temporary folder on a free
 * port, runs workers against it, stops it (a fast shutdown: every connection
 * is cut) while calls are in flight, keeps it down for a while and starts it
 * again on the same folder and port. Workers that exit are restarted by the
 * harness after 2 s, the way a process manager would; the figures say how
 * many exited and how many rode the outage out.
 */

const CONVERSATIONS = size(12, 40);
const PAIRS = 45;
const WORKERS = 2;
const RESTARTS = size(1, 3);
const DOWN_MS = size(5000, 15_000);

const folder = mkdtempSync(join(tmpdir(), 'sourcebound-faults-pg-'));
// As root the server runs as 'postgres', which must be able to enter the folder.
chmodSync(folder, 0o755);
const dataDir = join(folder, 'pgdata');
const port = await freePort();
const settings = { fsync: 'off', synchronous_commit: 'off', full_page_writes: 'off' };
let postgres: EmbeddedPostgres = await startEmbeddedPostgres({ dataDir, port, logger: silentLogger, settings });
const url = postgres.connectionString;
await migrateDatabase(url, silentLogger);

const server = await startMessagesServer();
const pool = harnessPool(url);
const fleet = new Fleet(WORKERS, workerEnv(url, server, { SOURCEBOUND_FLEET_CONCURRENCY: '8' }), { autoRestart: true, restartDelayMs: 2000 });
afterAll(async () => {
  await fleet.stop();
  await pool.end().catch(() => {});
  await server.close();
  await postgres.stop();
  rmSync(folder, { recursive: true, force: true });
});

describe('fault scenario 2: PostgreSQL restart mid-run', () => {
  it('workers recover after the server comes back and finish; no partial commit', async () => {
    const startedAt = Date.now();
    server.setDefault(behaviours.echo(1000));
    const canaries = scopeCanaries(['tenant-a', 'tenant-b']);
    await seedConversations(pool, { count: CONVERSATIONS, pairs: PAIRS, canaries });
    await fleet.start();
    const sweeper = startSweeper(pool, 1000);
    const total = CONVERSATIONS * 2;
    let inFlightAtStop = 0;

    for (let r = 0; r < RESTARTS; r++) {
      // Stop while calls are in flight and some ranges are done (r+1)/(RESTARTS+1) of the way.
      const target = Math.floor((total * (r + 1)) / (RESTARTS + 2));
      await until(async () => (await completed()) >= target, 120_000, `${target} ranges completed before restart ${r + 1}`);
      await server.waitFor(() => server.inFlight > 0, 60_000);
      inFlightAtStop += server.inFlight;
      await postgres.stop();
      await sleep(DOWN_MS);
      postgres = await startEmbeddedPostgres({ dataDir, port, logger: silentLogger, settings });
    }

    await quiesce(pool, server, { timeoutMs: size(240_000, 600_000), what: 'PostgreSQL restart' });
    await sweeper.stop();
    // Every slot has a live worker again (either it reconnected, or it exited and was restarted).
    await until(async () => fleet.alive().length === WORKERS, 60_000, 'all workers alive');

    const checks = await finalChecks(pool, { canaries });
    const exits = fleet.unexpectedExits();
    const reconnected = fleet.findLogs((l) => /re-?established|reconnect/i.test(l.msg)).length;
    const stopReasons = [...new Set(fleet.findLogs((l) => l.msg.startsWith('Runner stopping')).map((l) => l.msg.replace(/\d+\.\d+\.\d+\.\d+:\d+/g, 'host:port')))];
    const runnerFailed = fleet.findLogs((l) => l.msg === 'worker runner failed').length;
    const figures = recordFigures({
      id: '2-postgres-restart',
      title: 'PostgreSQL stopped and restarted mid-run',
      startedAt,
      checks,
      server,
      fleet,
      faults: {
        'server restarts': RESTARTS,
        'seconds down each': DOWN_MS / 1000,
        'calls in flight at stop': inFlightAtStop,
        'worker exits, restarted by harness': exits.length,
      },
      notes: [
        `workers that exited during the outage: ${exits.length} (exit codes ${JSON.stringify([...new Set(exits.map((e) => e.code))])}, `
          + `${runnerFailed} logged "worker runner failed"); admission/LISTEN reconnect log lines: ${reconnected}`,
        ...stopReasons.slice(0, 3).map((r) => `graphile-worker: ${r}`),
      ],
    });

    expectZeroFigures(figures, checks);
    expect(figures.completedRanges + figures.failedRanges).toBe(total);
    // A worker that gives up exits non-zero with one logged reason, not a stack trace from a second stop.
    for (const e of exits) {
      expect(e.code).toBe(1);
      expect(e.stderrTail).not.toMatch(/already stopped/);
    }
  });
});

async function completed(): Promise<number> {
  try {
    const { rows } = await pool.query<{ n: number }>(`select count(*)::int as n from sourcebound.conversation_summaries where status in ('completed', 'failed')`);
    return rows[0]!.n;
  } catch {
    return 0;
  }
}

