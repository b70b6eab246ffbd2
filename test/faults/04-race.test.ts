import pg from 'pg';
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
 * Scenario 4, race: eight workers, then an enqueue storm: every conversation
 * enqueued 1,000 times from four connections at once, with sweeps on top. The
 * claim (advisory lock + unique identity + lease) must turn all of it into
 * exactly one model call per range. The lease is long here (60 s): this
 * scenario is about concurrent claims, not takeovers.
 */

const CONVERSATIONS = size(3, 8);
const PAIRS = 65; // four plannable ranges each
const WORKERS = 8;
const ENQUEUES = 1000;
const STORM_CLIENTS = 4;

const db = await createTestDatabase();
const server = await startMessagesServer();
const pool = harnessPool(db.url);
const fleet = new Fleet(WORKERS, workerEnv(db.url, server, { SOURCEBOUND_LEASE_MS: '60000', SOURCEBOUND_MODEL_TIMEOUT_MS: '30000' }));
afterAll(async () => {
  await fleet.stop();
  await pool.end();
  await server.close();
});

describe('fault scenario 4: eight workers and an enqueue storm', () => {
  it('one model call and one completed record per range', async () => {
    const startedAt = Date.now();
    server.setDefault(behaviours.echo(300));
    await fleet.start();
    const canaries = scopeCanaries(['tenant-a', 'tenant-b']);
    // Written while the workers run: the triggers' own enqueues race the storm too.
    const conversations = await seedConversations(pool, { count: CONVERSATIONS, pairs: PAIRS, canaries });
    const sweeper = startSweeper(pool, 250);

    const clients = await Promise.all(
      Array.from({ length: STORM_CLIENTS }, async () => {
        const c = new pg.Client({ connectionString: db.url, application_name: 'faults-storm' });
        await c.connect();
        return c;
      }),
    );
    const stormStart = Date.now();
    try {
      await Promise.all(
        clients.map(async (client, k) => {
          for (let i = k; i < ENQUEUES; i += STORM_CLIENTS) {
            for (const c of conversations) await client.query('select sourcebound.enqueue_compaction($1)', [c.id]);
          }
        }),
      );
    } finally {
      // Ended here even when an enqueue fails, so that the failure is what the run reports.
      await Promise.all(clients.map((c) => c.end()));
    }
    const stormSeconds = (Date.now() - stormStart) / 1000;

    await quiesce(pool, server, { timeoutMs: size(180_000, 600_000), what: 'race' });
    await sweeper.stop();

    const checks = await finalChecks(pool, { canaries });
    const {
      rows: [perRange],
    } = await pool.query<{ maxAttempts: number; records: number }>(
      `select coalesce(max(n), 0)::int as "maxAttempts", count(*)::int as records from (
         select s.id, count(a.id) as n from sourcebound.conversation_summaries s
         left join sourcebound.conversation_summary_attempts a on a.summary_id = s.id group by s.id) x`,
    );
    const ranges = CONVERSATIONS * 4;
    const figures = recordFigures({
      id: '4-race',
      title: `race: ${WORKERS} workers, ${ENQUEUES} enqueues per conversation`,
      startedAt,
      checks,
      server,
      fleet,
      faults: {
        enqueues: ENQUEUES * CONVERSATIONS,
        'storm seconds': stormSeconds.toFixed(1),
        sweeps: sweeper.sweeps(),
        'model calls per range (max)': perRange!.maxAttempts,
      },
      notes: [`model calls ${server.count} for ${ranges} ranges; summary records ${perRange!.records}`],
    });

    expectZeroFigures(figures, checks);
    expect(figures.completedRanges).toBe(ranges);
    expect(perRange!.records).toBe(ranges);
    expect(server.count).toBe(ranges);
    expect(checks.attempts).toBe(ranges);
    expect(figures.unexpectedExits).toBe(0);
  });
});
