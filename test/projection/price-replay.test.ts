import { existsSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { DEMO_DATA, readThreads } from '../../src/demo.ts';
import { replayThread } from '../../bench/lib/replay.ts';
import { createTestDatabase } from '../support/db.ts';

const db = await createTestDatabase();

const SHARED = '/work/shared/data/oasst1-threads.jsonl';
const shared = existsSync(SHARED) ? readThreads(SHARED) : [];

/**
 * Real threads replayed turn by turn with the projection before every
 * request, each request priced as prompt caching bills it: the projection
 * never costs more than sending the whole history would have, however soon
 * the conversation ends. The shared threads named here each cost more than
 * the whole history before the ledger (1.004-1.24x: a summary swapped in, or
 * the history written again, a few turns before the thread ended); the demo's
 * long threads run everywhere.
 */
describe('the projection never costs more than sending the whole history (real threads, priced as cached)', () => {
  const cases: [string, number][] = [
    ['oasst1-en-long-033', 64 * 1024], ['oasst1-en-long-038', 64 * 1024], ['oasst1-en-long-044', 64 * 1024],
    ['oasst1-en-long-044', 32 * 1024], ['oasst1-en-long-016', 32 * 1024], ['oasst1-en-long-027', 32 * 1024], ['oasst1-en-long-023', 32 * 1024],
    // Short threads of long replies: the budget is reached with nothing saved, and every layout down to
    // the low-water mark writes more than the whole history's request would.
    ['oasst1-en-medium-039', 12 * 1024], ['oasst1-en-medium-026', 12 * 1024], ['oasst1-en-medium-050', 10 * 1024], ['oasst1-en-medium-029', 16 * 1024],
    // Budgets the thread never reaches: summaries swapped in a few turns before it ended.
    ['oasst1-en-long-033', 80 * 1024], ['oasst1-en-long-045', 96 * 1024],
  ];
  it.each(cases.filter(([id]) => shared.some((t) => t.id === id)))('%s at %i bytes', async (id, budget) => {
    const costs = await replayThread(db.pool, shared.find((t) => t.id === id)!, { budgets: [budget], layouts: ['stable'], lag: 3 });
    expect(costs.get(`${budget} stable`)).toBeLessThanOrEqual(1);
  }, 60_000);

  // A budget that is the window less the new message, moving every turn (the layout is shared by budgets
  // within 25%): before, a call whose budget rose past every stored one laid the history out anew, and
  // with summaries ready wrote it all again (up to 1.42x).
  const moving: [string, number][] = [['oasst1-en-medium-023', 16 * 1024], ['oasst1-en-medium-048', 8 * 1024], ['oasst1-en-long-033', 64 * 1024], ['oasst1-en-long-011', 32 * 1024]];
  it.each(moving.filter(([id]) => shared.some((t) => t.id === id)))('%s in a window of %i bytes', async (id, window) => {
    const costs = await replayThread(db.pool, shared.find((t) => t.id === id)!, { budgets: [window], layouts: ['stable'], lag: 3, moving: true });
    expect(costs.get(`${window} stable`)).toBeLessThanOrEqual(1);
  }, 60_000);

  // One user message edited in place N pairs back at 70% of the thread; each of these cost more than the
  // whole history before the fix its label names.
  // - inside the layout: the rewrite ('changed') took the whole conversation, written again, whatever
  //   the ledger held (1.153x, 1.053x); it is now one of the shapes, taken only when the ledger pays.
  // - among the pairs added since the layout (before the conversation first reached the budget, most of
  //   it is such pairs): the requests since held the old text, yet the next budget rewrite counted them
  //   as cached and wrote a head it believed read (1.025-1.162x); the edit is now known
  //   (messages.edited_at, projection_edits()).
  // - in the tail after the head's gap: the head was still in the cache up to its breakpoint, yet the
  //   rewrite wrote it all again (1.014-1.065x); the layout now keeps its head's own hash.
  const edited: [string, number, number, string][] = [
    ['oasst1-en-long-039', 32 * 1024, 3, 'inside the layout'], ['oasst1-en-long-013', 32 * 1024, 3, 'inside the layout'],
    ['oasst1-en-medium-047', 32 * 1024, 10, 'among the pairs added since the layout'], ['oasst1-en-medium-022', 32 * 1024, 10, 'among the pairs added since the layout'],
    ['oasst1-en-medium-006', 32 * 1024, 10, 'among the pairs added since the layout'], ['oasst1-en-medium-004', 16 * 1024, 3, 'among the pairs added since the layout'],
    ['oasst1-en-long-041', 32 * 1024, 3, 'in the tail after the head'], ['oasst1-en-long-044', 32 * 1024, 3, 'in the tail after the head'],
    ['oasst1-en-long-040', 32 * 1024, 3, 'in the tail after the head'], ['oasst1-en-long-023', 32 * 1024, 2, 'in the tail after the head'],
  ];
  it.each(edited.filter(([id]) => shared.some((t) => t.id === id)))('%s at %i bytes, a user message edited %i pairs back %s', async (id, budget, back) => {
    const thread = shared.find((t) => t.id === id)!;
    const at = Math.floor(thread.pairs.length * 0.7);
    const costs = await replayThread(db.pool, thread, { budgets: [budget], layouts: ['stable'], lag: 3, edits: [{ turn: at, pair: at - back }] });
    expect(costs.get(`${budget} stable`)).toBeLessThanOrEqual(1);
    // Every stored layout with a gap keeps its head's hash; one without a gap has none.
    const { rows: [mismatch] } = await db.pool.query(
      `select count(*)::int as n from sourcebound.projection_layouts where (jsonb_array_length(gaps) > 0) <> (head_sha256 is not null)`);
    expect(mismatch.n).toBe(0);
  }, 60_000);

  it.each(readThreads(DEMO_DATA).filter((t) => t.pairs.length >= 40).map((t) => [t.id, t] as const))('%s at 8, 16, 32 and 64 KiB', async (_, thread) => {
    const budgets = [8, 16, 32, 64].map((k) => k * 1024);
    const costs = await replayThread(db.pool, thread, { budgets, layouts: ['stable'], lag: 3 });
    for (const budget of budgets) expect(costs.get(`${budget} stable`)).toBeLessThanOrEqual(1);
  }, 60_000);
});
