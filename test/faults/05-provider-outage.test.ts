import { afterAll, describe, expect, it } from 'vitest';
import { createTestDatabase } from '../support/db.ts';
import { addPairs } from '../support/fixtures.ts';
import { behaviours, startMessagesServer, type Behaviour } from '../support/messages-server.ts';
import { until } from '../support/processes.ts';
import { Fleet, workerEnv } from './support/fleet.ts';
import {
  expectZeroFigures,
  finalChecks,
  harnessPool,
  quiesce,
  recordFigures,
  scopeCanaries,
  scopedText,
  seedConversations,
  size,
  sleep,
  startSweeper,
} from './support/scenario.ts';

/**
 * Scenario 5, provider outage: the Messages API answers 529 (with some 429
 * and 503 mixed in, all with `retry-after: 1`) for a while, then recovers;
 * later a 401 period (bad key) comes and goes. Refusals before generation are
 * deferrals and a 401 is a configuration error: neither may spend an attempt,
 * so every range still completes with exactly one spent attempt, its `ok`.
 */

const CONVERSATIONS = size(12, 40);
const OUTAGE_MS = size(8000, 30_000);
const AUTH_OUTAGE_MS = size(5000, 20_000);

const db = await createTestDatabase();
const server = await startMessagesServer();
const pool = harnessPool(db.url);
const fleet = new Fleet(2, workerEnv(db.url, server));
afterAll(async () => {
  await fleet.stop();
  await pool.end();
  await server.close();
});

const retryAfter = { 'retry-after': '1' };
const refusals: Behaviour[] = [
  behaviours.httpError(529, 'overloaded_error', retryAfter),
  behaviours.rateLimited(1),
  behaviours.httpError(503, 'api_error', retryAfter),
];

describe('fault scenario 5: provider outage (529/429/503, then 401)', () => {
  it('every range completes; no attempt is spent on refusals or on a bad key', async () => {
    const startedAt = Date.now();
    const canaries = scopeCanaries(['tenant-a', 'tenant-b']);

    // Phase 1: overloaded from the first request.
    server.setDefault(refusals[0]!);
    for (let i = 0; i < 30; i++) server.enqueue(refusals[i % 3]!);
    const conversations = await seedConversations(pool, { count: CONVERSATIONS, pairs: 45, canaries });
    await fleet.start();
    const sweeper = startSweeper(pool, 1000);
    await sleep(OUTAGE_MS);
    const refusalCount = server.count;
    server.setDefault(behaviours.echo(200));
    await quiesce(pool, server, { timeoutMs: size(120_000, 300_000), what: 'after the 529 outage' });
    const afterOutage = server.count;

    // Phase 2: the key stops working, while new ranges appear.
    server.setDefault(behaviours.httpError(401, 'authentication_error'));
    for (const [i, c] of conversations.entries()) {
      await addPairs(pool, c.id, 10, scopedText(canaries[c.scope]!, `c${i}`), { startAt: 45 });
    }
    await until(async () => server.count > afterOutage, 60_000, 'a request during the 401 period');
    await sleep(AUTH_OUTAGE_MS);
    const unauthorized = server.count - afterOutage;
    server.setDefault(behaviours.echo(200));
    await quiesce(pool, server, { timeoutMs: size(180_000, 400_000), what: 'after the 401 period' });
    await sweeper.stop();

    const checks = await finalChecks(pool, { canaries });
    const {
      rows: [free],
    } = await pool.query<{ spent: number; unspent: number }>(
      `select count(*) filter (where spent)::int as spent, count(*) filter (where not spent)::int as unspent
       from sourcebound.conversation_summary_attempts where outcome in ('deferred', 'config')`,
    );
    const loud = fleet.findLogs((l) => l.level >= 50 && /configuration error/.test(l.msg)).length;
    const ranges = CONVERSATIONS * 3;
    const figures = recordFigures({
      id: '5-provider-outage',
      title: 'provider outage: 529/429/503, then 401',
      startedAt,
      checks,
      server,
      fleet,
      faults: {
        'outage s (529/429/503)': OUTAGE_MS / 1000,
        'refusals answered': refusalCount,
        '401 period s': AUTH_OUTAGE_MS / 1000,
        '401s answered': unauthorized,
        'attempts spent on refusals/401': free!.spent,
      },
      notes: [`${loud} loud configuration-error log lines during the 401 period`],
    });

    expectZeroFigures(figures, checks);
    expect(figures.completedRanges).toBe(ranges);
    expect(free!.spent).toBe(0);
    expect(checks.outcomes['deferred'] ?? 0).toBe(refusalCount);
    expect(checks.outcomes['config'] ?? 0).toBeGreaterThan(0);
    // Exactly one spent attempt per range: its ok.
    expect(checks.spentAttempts).toBe(ranges);
    expect(loud).toBeGreaterThan(0);
  });
});
