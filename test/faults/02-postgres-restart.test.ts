import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { freePort, startEmbeddedPostgres, type EmbeddedPostgres } from '../../src/db/embedded.ts';
import { migrateDatabase } from '../../src/db/migrate.ts';
import { silentLogger } from '../../src/support/logger.ts';
import { behaviours, startMessagesServer } from '../support/messages-server.ts';
import { startPgBouncer, type PgBouncer } from '../support/pgbouncer.ts';
import { until } from '../support/processes.ts';
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
  sleep,
} from './support/scenario.ts';

/**
 * Scenario 2, PostgreSQL restart drills. Not the suite's shared server: this
 * scenario starts its own embedded PostgreSQL in a temporary folder on a free
 * port (never the machine's), runs two workers against it and restarts it
 * DRILLS times while they drain: each drill seeds fresh conversations, waits
 * until calls are in flight, stops the server (a fast shutdown: every
 * connection is cut), keeps it down DOWN_MS and starts it on the same folder
 * and port. The workers must ride every restart out in-process: no exit, no
 * hang, every range of the drill settled within 30 s of the server's return.
 * The lease (60 s) is longer than that bound, so a claim the worker did not
 * hand back itself would miss it. No harness sweeper runs: nothing re-enqueues
 * for the workers. Then the same drills run POOLED_DRILLS times with two new
 * workers in the production topology: DATABASE_URL through a real PgBouncer
 * (transaction mode) in front of that server, DATABASE_DIRECT_URL the server.
 */

const DRILLS = Number(process.env.FAULTS_DRILLS ?? size(5, 20));
const POOLED_DRILLS = Number(process.env.FAULTS_POOLED_DRILLS ?? size(2, 5));
const CONVERSATIONS_PER_DRILL = 6;
const PAIRS = 45; // two ranges each
const WORKERS = 2;
const DOWN_MS = 2700;
const RECOVERY_BOUND_MS = 30_000;

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
const drillEnv = { SOURCEBOUND_FLEET_CONCURRENCY: '8', SOURCEBOUND_LEASE_MS: '60000', SOURCEBOUND_RECOVERY_TIMEOUT_MS: '60000' };
const fleet = new Fleet(WORKERS, workerEnv(url, server, drillEnv), { autoRestart: true, restartDelayMs: 2000 });
let bouncer: PgBouncer | null = null;
let pooledFleet: Fleet | null = null;
afterAll(async () => {
  await fleet.stop();
  await pooledFleet?.stop();
  await bouncer?.stop();
  await pool.end().catch(() => {});
  await server.close();
  await postgres.stop();
  rmSync(folder, { recursive: true, force: true });
});

describe('fault scenario 2: PostgreSQL restart drills under draining workers', () => {
  it('every drill: workers stay up, every range settles within 30 s of the return, nothing duplicated', async () => {
    const startedAt = Date.now();
    server.setDefault(behaviours.echo(400));
    const canaries = scopeCanaries(['tenant-a', 'tenant-b']);
    await fleet.start();
    const recoverySeconds: number[] = [];
    const pooledSeconds: number[] = [];
    const hangs: string[] = [];
    let inFlightAtStop = 0;

    /** One drill: fresh conversations, a restart mid-drain, seconds from the return to all settled (null: not within the bound x4). */
    const drill = async (label: string): Promise<number | null> => {
      const seeded = await seedConversations(pool, { count: CONVERSATIONS_PER_DRILL, pairs: PAIRS, canaries });
      const ids = seeded.map((s) => s.id);
      const total = ids.length * 2;
      // Mid-drain: some ranges of this drill done, calls in flight.
      await until(async () => (await settled(ids)) >= 2, 60_000, `${label}: first ranges settled`);
      await server.waitFor(() => server.inFlight > 0, 60_000);
      inFlightAtStop += server.inFlight;
      await postgres.stop();
      await sleep(DOWN_MS);
      postgres = await startEmbeddedPostgres({ dataDir, port, logger: silentLogger, settings });
      const back = Date.now();
      try {
        await until(async () => (await settled(ids)) === total, RECOVERY_BOUND_MS * 4, `${label}: all ${total} ranges settled`);
        return (Date.now() - back) / 1000;
      } catch {
        hangs.push(label);
        return null;
      }
    };

    for (let d = 0; d < DRILLS && hangs.length === 0; d++) {
      const seconds = await drill(`drill ${d + 1}`);
      if (seconds !== null) recoverySeconds.push(seconds);
    }
    // The production topology: new workers through PgBouncer, sessions direct.
    await fleet.stop();
    bouncer = await startPgBouncer({ serverUrl: url, poolSize: 6 });
    pooledFleet = new Fleet(WORKERS, workerEnv(bouncer.url('postgres'), server, { ...drillEnv, DATABASE_DIRECT_URL: url }), {
      autoRestart: true,
      restartDelayMs: 2000,
    });
    await pooledFleet.start();
    for (let d = 0; d < POOLED_DRILLS && hangs.length === 0; d++) {
      const seconds = await drill(`pooled drill ${d + 1}`);
      if (seconds !== null) pooledSeconds.push(seconds);
    }

    if (process.env.FAULTS_LOG_FILE) {
      const { writeFileSync } = await import('node:fs');
      writeFileSync(
        process.env.FAULTS_LOG_FILE,
        [...fleet.logs, ...pooledFleet.logs].map((lines, i) => lines.map((l) => JSON.stringify({ proc: i, ...l })).join('\n')).join('\n'),
      );
    }
    await quiesce(pool, server, { timeoutMs: 120_000, what: 'PostgreSQL restart drills' }).catch(async (error: Error) => {
      const { rows } = await pool.query(
        `select id, key, attempts, max_attempts, run_at, locked_at, locked_by, left(last_error, 200) as last_error from graphile_worker._private_jobs`,
      );
      throw new Error(`${error.message}; jobs: ${JSON.stringify(rows)}`, { cause: error });
    });
    const checks = await finalChecks(pool, { canaries });
    const fleets = [fleet, pooledFleet];
    const findLogs = (predicate: Parameters<Fleet['findLogs']>[0]) => fleets.flatMap((f) => f.findLogs(predicate));
    const exits = fleets.flatMap((f) => f.unexpectedExits());
    const restartLines = findLogs((l) => l.msg === 'worker runner restarted');
    const lostLines = findLogs((l) => l.msg.startsWith('worker lost its database'));
    const handedBack = findLogs((l) => l.msg.startsWith('the retired runner'));
    const preparedErrors = findLogs((l) => /prepared statement/i.test(JSON.stringify(l))).length;
    const resumedClaims = handedBack.reduce((n, l) => n + Number(l.resumedClaims ?? 0), 0);
    const unlockedJobs = handedBack.reduce((n, l) => n + Number(l.unlockedJobs ?? 0), 0);
    const recoveredInMs = restartLines.map((l) => Number(l.recoveredInMs ?? 0));
    const max = (xs: number[]) => (xs.length ? Math.max(...xs) : 0);
    const p50 = (xs: number[]) => (xs.length ? [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]! : 0);
    const figures = recordFigures({
      id: '2-postgres-restart',
      title: `PostgreSQL restart drills (${DRILLS} direct, ${POOLED_DRILLS} through PgBouncer) under 2 draining workers`,
      startedAt,
      checks,
      server,
      fleet: fleets,
      faults: {
        'restarts (drills)': DRILLS + POOLED_DRILLS,
        'seconds down each': DOWN_MS / 1000,
        'calls in flight at stop': inFlightAtStop,
        hangs: hangs.length,
        'worker exits': exits.length,
        'runner restarts in-process': restartLines.length,
        's from return to all settled, p50 / max': `${p50(recoverySeconds).toFixed(1)} / ${max(recoverySeconds).toFixed(1)}`,
        'through PgBouncer, p50 / max': `${p50(pooledSeconds).toFixed(1)} / ${max(pooledSeconds).toFixed(1)}`,
        'prepared-statement errors': preparedErrors,
        'claims handed back at once': resumedClaims,
        'jobs unlocked': unlockedJobs,
      },
      notes: [
        `seconds from the server's return until every range of the drill settled: ${recoverySeconds.map((s) => s.toFixed(1)).join(', ')}; ` +
          `through PgBouncer: ${pooledSeconds.map((s) => s.toFixed(1)).join(', ')}`,
        `worker log lines at error "worker lost its database...": ${lostLines.filter((l) => l.level === 50).length} of ${lostLines.length}; ` +
          `in-process recoveries took ${p50(recoveredInMs)} ms p50, ${max(recoveredInMs)} ms max (from the loss to a new runner)`,
        `lease 60 s, recovery bound 30 s: no range waited for a lease`,
      ],
    });

    expectZeroFigures(figures, checks);
    expect(hangs).toEqual([]);
    expect(exits).toEqual([]);
    expect(recoverySeconds.length).toBe(DRILLS);
    expect(pooledSeconds.length).toBe(POOLED_DRILLS);
    expect(max([...recoverySeconds, ...pooledSeconds])).toBeLessThanOrEqual(RECOVERY_BOUND_MS / 1000);
    expect(preparedErrors).toBe(0);
    expect(figures.completedRanges + figures.failedRanges).toBe((DRILLS + POOLED_DRILLS) * CONVERSATIONS_PER_DRILL * 2);
    expect(lostLines.length).toBeGreaterThan(0);
    expect(lostLines.every((l) => l.level === 50)).toBe(true);
    // Every drill made a worker replace its runner. Not each worker: since a lost
    // connection recovers only when a new session cannot answer (or the server's start
    // time changed), a worker may ride a restart out on graphile-worker's own reconnect
    // (CI at d66ed5b: 12 replacements for 7 drills of 2 workers, every range settled).
    expect(restartLines.length).toBeGreaterThanOrEqual(DRILLS + POOLED_DRILLS);
  });
});

/** Ranges of these conversations settled (completed or failed for good); 0 while the server is down. */
async function settled(ids: string[]): Promise<number> {
  try {
    const { rows } = await pool.query<{ n: number }>(
      `select count(*)::int as n from sourcebound.conversation_summaries where status in ('completed', 'failed') and conversation_id = any($1::uuid[])`,
      [ids],
    );
    return rows[0]!.n;
  } catch {
    return 0;
  }
}
