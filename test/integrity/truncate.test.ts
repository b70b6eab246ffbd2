import { describe, expect, it } from 'vitest';
import { createTestDatabase } from '../support/db.ts';
import { addPairs, createConversation, drift, pairCount } from '../support/fixtures.ts';

/**
 * TRUNCATE fires no row trigger: the pair index and the marks follow a
 * truncation of the messages through a statement trigger (0030). The runs
 * cannot be truncated (the run history's guards refuse it, 0013).
 */
async function marks(db: Awaited<ReturnType<typeof createTestDatabase>>, c: string): Promise<number[]> {
  const { rows } = await db.pool.query<{ from_pair: number }>(
    'select from_pair from sourcebound.compaction_marks where conversation_id = $1 order by from_pair',
    [c],
  );
  return rows.map((r) => r.from_pair);
}

describe('TRUNCATE of the conversation store', () => {
  it('truncate sourcebound.messages empties the pair index and the marks; the next pairs count from 0', async () => {
    const db = await createTestDatabase();
    const a = await createConversation(db.pool);
    const b = await createConversation(db.pool);
    await addPairs(db.pool, a, 45);
    await addPairs(db.pool, b, 12);
    expect(await marks(db, a)).toEqual([0, 10]);

    await db.pool.query('truncate sourcebound.messages');
    const {
      rows: [left],
    } = await db.pool.query<{ pairs: number; marks: number }>(
      `select (select count(*)::int from sourcebound.pairs) as pairs, (select count(*)::int from sourcebound.compaction_marks) as marks`,
    );
    expect(left).toEqual({ pairs: 0, marks: 0 });
    expect(await drift(db.pool, a)).toEqual([]);

    // Was: indexed 45..74 after the 45 vanished pairs, every claim 'gone'.
    await addPairs(db.pool, a, 30);
    expect(await pairCount(db.pool, a)).toBe(30);
    const {
      rows: [last],
    } = await db.pool.query<{ n: number }>('select max(pair_index)::int as n from sourcebound.pairs where conversation_id = $1', [a]);
    expect(last!.n).toBe(29);
    expect(await drift(db.pool, a)).toEqual([]);
    expect(await marks(db, a)).toEqual([0]);
    expect(await drift(db.pool, b)).toEqual([]);
  });

  it('the runs cannot be truncated, with CASCADE or without', async () => {
    const db = await createTestDatabase();
    const c = await createConversation(db.pool);
    await addPairs(db.pool, c, 3);
    await expect(db.pool.query('truncate sourcebound.runs cascade')).rejects.toThrow(/cannot be truncated/);
    await expect(db.pool.query('truncate sourcebound.runs, sourcebound.messages')).rejects.toThrow(/foreign key|cannot be truncated/);
    expect(await pairCount(db.pool, c)).toBe(3);
  });
});
