import { describe, expect, it } from 'vitest';
import { compactConversation } from '../../src/conversation/compact.ts';
import { attemptsOfConversationRead, summariesOfConversationRead } from '../../src/db/queries/summaries.ts';
import { createOfflineSummarizer } from '../../src/gateway/offline.ts';
import type { Summarizer } from '../../src/support/summary-contract.ts';
import { addPairs, createConversation } from '../support/fixtures.ts';
import { compactionSetup } from './setup.ts';

/**
 * A per-scope limit on summarizer calls (SOURCEBOUND_SCOPE_CALLS_PER_HOUR): a
 * tenant that writes 20,000 tiny pairs cannot spend the fleet's calls. Over
 * the limit a range is deferred to the next clock hour, with no attempt spent
 * and no call made; other scopes are not touched.
 */
const { db, ctx } = await compactionSetup();

function counting(): { summarizer: Summarizer; calls: () => number } {
  const offline = createOfflineSummarizer({ maxChars: 6000 });
  let calls = 0;
  return {
    summarizer: {
      model: offline.model,
      summarize: (r) => {
        calls++;
        return offline.summarize(r);
      },
    },
    calls: () => calls,
  };
}

describe('per-scope summarizer call limit', () => {
  it('over the limit: deferred to the next hour, no attempt spent, no call; another scope is not limited', async () => {
    const { summarizer, calls } = counting();
    const limited = ctx({ summarizer, scopeCallsPerHour: 2 });
    const a = await createConversation(db.pool, 'tenant-limited');
    await addPairs(db.pool, a, 60);
    const report = await compactConversation(limited, a);
    expect(report.ranges.map((r) => r.result)).toEqual(['completed', 'completed', 'deferred']);
    expect(calls()).toBe(2);
    // The hour the calls were counted in, as the database saw it; the range waits for the next one
    // (within the few milliseconds between the worker's clock and the commit's now()).
    const {
      rows: [window],
    } = await db.pool.query<{ hour: Date }>(`select hour_start as hour from sourcebound.scope_call_windows where scope = 'tenant-limited'`);
    const nextHour = window!.hour.getTime() + 3_600_000;
    const records = await summariesOfConversationRead(db.pool, a);
    const deferred = records.find((r) => r.fromPair === 20)!;
    expect(deferred).toMatchObject({ status: 'pending', attemptsSpent: 0, failureReason: 'deferred: scope_call_limit' });
    expect(Math.abs(deferred.notBefore!.getTime() - nextHour)).toBeLessThan(1000);
    const attempts = (await attemptsOfConversationRead(db.pool, a)).filter((x) => x.summaryId === deferred.id);
    expect(attempts.map((x) => [x.outcome, x.spent])).toEqual([['deferred', false]]);

    // A second job in the same hour makes no call at all.
    await compactConversation(limited, a);
    expect(calls()).toBe(2);

    // Another tenant has its own count.
    const b = await createConversation(db.pool, 'tenant-other');
    await addPairs(db.pool, b, 40);
    expect((await compactConversation(limited, b)).ranges.map((r) => r.result)).toEqual(['completed', 'completed']);
    expect(calls()).toBe(4);
  });

  it('concurrent workers never admit more than the limit: one statement decides', async () => {
    const admitted = await Promise.all(
      Array.from({ length: 20 }, () =>
        db.pool
          .query<{ until: Date | null }>(`select sourcebound.scope_call_admit('tenant-race', 7) as until`)
          .then((r) => r.rows[0]!.until === null),
      ),
    );
    expect(admitted.filter(Boolean)).toHaveLength(7);
    const { rows } = await db.pool.query(`select calls from sourcebound.scope_call_windows where scope = 'tenant-race'`);
    expect(rows).toEqual([{ calls: 7 }]);
  });

  it('0 means no limit: nothing is counted', async () => {
    const { rows } = await db.pool.query(`select sourcebound.scope_call_admit('tenant-free', 0) as until`);
    expect(rows[0].until).toBeNull();
    expect(
      (await db.pool.query(`select count(*)::int as n from sourcebound.scope_call_windows where scope = 'tenant-free'`)).rows[0].n,
    ).toBe(0);
  });
});
