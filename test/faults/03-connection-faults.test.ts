import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { createTestDatabase } from '../support/db.ts';
import { behaviours, startMessagesServer } from '../support/messages-server.ts';
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
  startSweeper,
} from './support/scenario.ts';

/**
 * Scenario 3, connection faults: while three workers compact, a terminator
 * watches pg_stat_activity of this database and pg_terminate_backend()s the
 * workers' connections: the ones caught inside a claim or a commit
 * transaction (by their last statement), and every few seconds all of them
 * (pool, LISTEN and admission connections). To catch commits, which last a
 * few milliseconds, an ambush holds the row locks of a few running claims for
 * 200 ms now and then, so their commits wait where the terminator sees them.
 * The harness's own connections are
 * spared (application_name faults-*). Workers that exit are restarted by the
 * harness; the figures say how many did.
 *
 * No range may fail for good: a terminated connection is not a lost database
 * (the worker recovers its runner only when a new session cannot answer), and
 * a commit cut with the model's answer in hand is tried again, not left to a
 * lease expiry that would spend the attempt (src/conversation/commit-retry.ts).
 * Earlier, each cut probe or LISTEN connection retired the runner and handed
 * its claims over as spent attempts: 2-5 of 40 ranges ended failed for good.
 */

const CONVERSATIONS = size(20, 80);
const PAIRS = 45;
const WORKERS = 3;
const FAULT_MS = size(25_000, 120_000);
const TARGETED_KILLS = size(30, 150);
const SWEEP_KILL_EVERY_MS = 3000;

const db = await createTestDatabase();
const server = await startMessagesServer();
const pool = harnessPool(db.url);
const fleet = new Fleet(WORKERS, workerEnv(db.url, server, { SOURCEBOUND_FLEET_CONCURRENCY: '6' }), {
  autoRestart: true,
  restartDelayMs: 1000,
});
afterAll(async () => {
  await fleet.stop();
  await pool.end();
  await server.close();
});

// The statement a backend is running tells which transaction it is in: the
// claim and the commit are one statement each (0020_compaction_functions.sql).
const CLAIM = /sourcebound\.claim_range\(/i;
const COMMIT = /sourcebound\.commit_summary\(/i;

/** "n (reason k, ...)" from the workers' "worker runner restarted" lines. */
function restartsByReason(lines: { msg: string; reason?: unknown }[]): string {
  const reasons = new Map<string, number>();
  for (const l of lines) if (l.msg === 'worker runner restarted') reasons.set(String(l.reason), (reasons.get(String(l.reason)) ?? 0) + 1);
  const n = [...reasons.values()].reduce((a, b) => a + b, 0);
  return n === 0 ? '0' : `${n} (${[...reasons].map(([r, k]) => `${r} ${k}`).join(', ')})`;
}

describe('fault scenario 3: connections terminated mid-claim and mid-commit', () => {
  it('claims and commits cut by pg_terminate_backend leave no partial state; work completes', async () => {
    const startedAt = Date.now();
    server.setDefault(behaviours.echo(500));
    const canaries = scopeCanaries(['tenant-a', 'tenant-b']);
    await seedConversations(pool, { count: CONVERSATIONS, pairs: PAIRS, canaries });
    await fleet.start();
    const sweeper = startSweeper(pool, 1000);

    const killer = new pg.Client({ connectionString: db.url, application_name: 'faults-terminator' });
    killer.on('error', () => {});
    await killer.connect();
    // Commits are a few milliseconds long: to catch some, the ambush holds the row locks of a few running
    // claims for a moment, so commits for them wait (inside their transaction) where the terminator sees them.
    const ambush = new pg.Client({ connectionString: db.url, application_name: 'faults-ambush' });
    ambush.on('error', () => {});
    await ambush.connect();
    const killed = { claim: 0, commit: 0, 'other in transaction': 0, 'all worker connections': 0 };
    const deadline = Date.now() + FAULT_MS;
    let nextSweepKill = Date.now() + SWEEP_KILL_EVERY_MS;
    for (let round = 0; Date.now() < deadline; round++) {
      const ambushing = round % 4 === 0;
      if (ambushing) {
        await ambush.query('begin');
        await ambush.query(
          `select id from sourcebound.conversation_summaries where status = 'running' order by random() limit 3 for update skip locked`,
        );
        await sleep(200);
      }
      const { rows } = await killer.query<{ pid: number; state: string; query: string }>(
        `select pid, state, query from pg_stat_activity
         where datname = current_database() and pid <> pg_backend_pid() and backend_type = 'client backend'
           and coalesce(application_name, '') not like 'faults-%'`,
      );
      const targeted = killed.claim + killed.commit + killed['other in transaction'];
      for (const r of rows) {
        const inTransaction = r.state === 'idle in transaction' || (r.state === 'active' && (CLAIM.test(r.query) || COMMIT.test(r.query)));
        if (!inTransaction || targeted >= TARGETED_KILLS) continue;
        const kind = CLAIM.test(r.query) ? 'claim' : COMMIT.test(r.query) ? 'commit' : 'other in transaction';
        const {
          rows: [t],
        } = await killer.query<{ ok: boolean }>('select pg_terminate_backend($1) as ok', [r.pid]);
        if (t!.ok) killed[kind]++;
      }
      if (Date.now() >= nextSweepKill) {
        nextSweepKill = Date.now() + SWEEP_KILL_EVERY_MS;
        const {
          rows: [all],
        } = await killer.query<{ n: number }>(
          `select count(*) filter (where pg_terminate_backend(pid))::int as n from pg_stat_activity
           where datname = current_database() and pid <> pg_backend_pid() and backend_type = 'client backend'
             and coalesce(application_name, '') not like 'faults-%'`,
        );
        killed['all worker connections'] += all!.n;
      }
      if (ambushing) await ambush.query('commit');
      await sleep(25);
    }
    await killer.end();
    await ambush.end();

    await quiesce(pool, server, { timeoutMs: size(240_000, 600_000), what: 'connection faults' });
    await sweeper.stop();
    await until(async () => fleet.alive().length === WORKERS, 60_000, 'all workers alive');

    const checks = await finalChecks(pool, { canaries });
    const exits = fleet.unexpectedExits();
    const {
      rows: [takeovers],
    } = await pool.query<{ n: number }>(
      `select count(*)::int as n from sourcebound.conversation_summary_attempts where reason like 'lease_expired%'`,
    );
    const lines = fleet.logs.flat();
    const count = (msg: RegExp) => lines.filter((l) => msg.test(l.msg)).length;
    const figures = recordFigures({
      id: '3-connection-faults',
      title: 'pg_terminate_backend on worker connections',
      startedAt,
      checks,
      server,
      fleet,
      faults: {
        'terminated mid-claim': killed.claim,
        'mid-commit': killed.commit,
        'other mid-transaction': killed['other in transaction'],
        'in periodic sweeps': killed['all worker connections'],
        'worker exits, restarted by harness': exits.length,
        'commits retried after a lost connection': count(/^commit lost its connection/),
        'cut commits that had landed': count(/^the commit that lost its connection had landed/),
        'lost connections with PostgreSQL answering (no recovery)': count(/^a worker connection was lost but PostgreSQL answers/),
        'runner restarts in-process': restartsByReason(lines),
        'claims taken over after lease or hand-back': takeovers!.n,
      },
      notes: [
        `${FAULT_MS / 1000} s of faults, then run to quiescence; all worker backends terminated every ${SWEEP_KILL_EVERY_MS / 1000} s`,
      ],
    });

    expectZeroFigures(figures, checks);
    expect(figures.failedRanges).toBe(0);
    expect(figures.completedRanges).toBe(figures.ranges);
    expect(killed.claim + killed.commit).toBeGreaterThan(0);
    for (const e of exits) expect(e.stderrTail).not.toMatch(/already stopped|Unhandled|uncaught/i);
  });
});
