import { existsSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { DEMO_DATA, readThreads } from '../../src/cli/demo-threads.ts';
import { replayThread } from '../../bench/lib/replay.ts';
import { createTestDatabase } from '../support/db.ts';

const db = await createTestDatabase();

const SHARED = '/work/shared/data/oasst1-threads.jsonl';
const shared = existsSync(SHARED) ? readThreads(SHARED) : [];

/**
 * Real threads replayed turn by turn with the projection before every
 * request, each request priced as prompt caching bills it. Fidelity comes
 * first (the newest pairs raw, the budget used), so a history just over its
 * budget is written again at every rewrite and may cost more than sending
 * all of it cached would have (which the budget forbids). What the cache-stable
 * layout guarantees is against the layout it replaces: it never costs more
 * than laying the history out anew on every request (newest-first), for
 * budgets moving or fixed, and with a message edited in place.
 */
describe('the stable layout never costs more than laying the history out anew (real threads, priced as cached)', () => {
  const cases: [string, number][] = [
    ['oasst1-en-long-033', 64 * 1024],
    ['oasst1-en-long-044', 32 * 1024],
    ['oasst1-en-long-016', 32 * 1024],
    ['oasst1-en-medium-039', 12 * 1024],
    ['oasst1-en-medium-050', 10 * 1024],
    ['oasst1-en-long-045', 16 * 1024],
  ];
  it.each(cases.filter(([id]) => shared.some((t) => t.id === id)))(
    '%s at %i bytes',
    async (id, budget) => {
      const costs = await replayThread(
        db.pool,
        shared.find((t) => t.id === id)!,
        { budgets: [budget], layouts: ['stable', 'newest-first'], lag: 3 },
      );
      expect(costs.get(`${budget} stable`)).toBeLessThanOrEqual(costs.get(`${budget} newest-first`)!);
    },
    60_000,
  );

  const moving: [string, number][] = [
    ['oasst1-en-medium-023', 16 * 1024],
    ['oasst1-en-long-011', 32 * 1024],
  ];
  it.each(moving.filter(([id]) => shared.some((t) => t.id === id)))(
    '%s in a window of %i bytes',
    async (id, window) => {
      const costs = await replayThread(
        db.pool,
        shared.find((t) => t.id === id)!,
        { budgets: [window], layouts: ['stable', 'newest-first'], lag: 3, moving: true },
      );
      expect(costs.get(`${window} stable`)).toBeLessThanOrEqual(costs.get(`${window} newest-first`)!);
    },
    60_000,
  );

  const edited: [string, number, number][] = [
    ['oasst1-en-long-039', 32 * 1024, 3],
    ['oasst1-en-medium-047', 32 * 1024, 10],
  ];
  it.each(edited.filter(([id]) => shared.some((t) => t.id === id)))(
    '%s at %i bytes, a user message edited %i pairs back',
    async (id, budget, back) => {
      const thread = shared.find((t) => t.id === id)!;
      const at = Math.floor(thread.pairs.length * 0.7);
      const costs = await replayThread(db.pool, thread, {
        budgets: [budget],
        layouts: ['stable', 'newest-first'],
        lag: 3,
        edits: [{ turn: at, pair: at - back }],
      });
      expect(costs.get(`${budget} stable`)).toBeLessThanOrEqual(costs.get(`${budget} newest-first`)!);
    },
    60_000,
  );

  it.each(
    readThreads(DEMO_DATA)
      .filter((t) => t.pairs.length >= 40)
      .map((t) => [t.id, t] as const),
  )(
    '%s at 8, 16, 32 and 64 KiB',
    async (_, thread) => {
      const budgets = [8, 16, 32, 64].map((k) => k * 1024);
      const costs = await replayThread(db.pool, thread, { budgets, layouts: ['stable', 'newest-first'], lag: 3 });
      for (const budget of budgets) expect(costs.get(`${budget} stable`)).toBeLessThanOrEqual(costs.get(`${budget} newest-first`)!);
    },
    60_000,
  );
});
