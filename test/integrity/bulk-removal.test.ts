import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compactionMarksRead } from '../../src/db/queries/summaries.ts';
import { createTestDatabase } from '../support/db.ts';
import { addPairs, createConversation, drift, pairCount } from '../support/fixtures.ts';

/**
 * One statement that takes many pairs of a conversation out of their places
 * (0033: deleted, made ineligible, moved to another conversation, reordered):
 * they leave together and the rest is renumbered once. Each row's trigger
 * used to shift every later pair by one: 200 pairs were 19,900 row updates
 * of the index (2.5 s), 1,000 pairs 499,500 (7 minutes). Counted, not timed:
 * the index rows this statement updated and deleted.
 */
const db = await createTestDatabase();

let client: pg.Client;
beforeAll(async () => {
  client = new pg.Client({ connectionString: db.url });
  await client.connect();
});
afterAll(async () => {
  await client.end();
});

/** Runs one statement in its own transaction; the rows of sourcebound.pairs it updated and deleted. */
async function pairWrites(sql: string, params: unknown[]): Promise<{ updated: number; deleted: number }> {
  const read = async () =>
    (
      await client.query<{ updated: number; deleted: number }>(
        `select n_tup_upd::int as updated, n_tup_del::int as deleted from pg_stat_xact_user_tables where schemaname = 'sourcebound' and relname = 'pairs'`,
      )
    ).rows[0]!;
  await client.query('begin');
  try {
    const before = await read();
    await client.query(sql, params);
    const after = await read();
    await client.query('commit');
    return { updated: after.updated - before.updated, deleted: after.deleted - before.deleted };
  } catch (error) {
    await client.query('rollback');
    throw error;
  }
}

const PAIRS = 200;

describe('a statement that takes many pairs away', () => {
  it.each([
    ['deletes every run of the conversation', `delete from sourcebound.runs where conversation_id = $1`],
    ['cancels every run of the conversation', `update sourcebound.runs set status = 'cancelled' where conversation_id = $1`],
    ['deletes every user message of the conversation', `delete from sourcebound.messages where conversation_id = $1 and role = 'user'`],
  ])('%s: each pair leaves once, nothing is shifted', async (_name, sql) => {
    const c = await createConversation(db.pool);
    await addPairs(db.pool, c, PAIRS);
    const writes = await pairWrites(sql, [c]);
    expect(writes).toEqual({ updated: 0, deleted: PAIRS });
    expect(await pairCount(db.pool, c)).toBe(0);
    expect(await drift(db.pool, c)).toEqual([]);
    expect(await compactionMarksRead(db.pool, c)).toEqual([]);
  });

  it('the oldest 150 of 200 runs deleted: the other 50 renumbered once, their ranges marked', async () => {
    const c = await createConversation(db.pool);
    const written = await addPairs(db.pool, c, PAIRS);
    await db.pool.query('delete from sourcebound.compaction_marks where conversation_id = $1', [c]);
    const writes = await pairWrites(`delete from sourcebound.runs where id = any($1::uuid[])`, [written.slice(0, 150).map((w) => w.runId)]);
    expect(writes).toEqual({ updated: 50, deleted: 150 });
    expect(await drift(db.pool, c)).toEqual([]);
    const { rows } = await db.pool.query<{ run_id: string }>(
      'select run_id from sourcebound.pairs where conversation_id = $1 order by pair_index',
      [c],
    );
    expect(rows.map((r) => r.run_id)).toEqual(written.slice(150).map((w) => w.runId));
    // 50 pairs: ranges 0, 10 and 20 are plannable, and each has a new source.
    expect((await compactionMarksRead(db.pool, c)).map((m) => m.fromPair)).toEqual([0, 10, 20]);
  });

  it.each([
    [
      'moves every run to another conversation',
      `with m as (update sourcebound.messages set conversation_id = $2 where conversation_id = $1)
       update sourcebound.runs set conversation_id = $2 where conversation_id = $1`,
    ],
    ['reorders every run of the conversation', `update sourcebound.runs set seq = default where conversation_id = $1`],
  ])('%s: the pairs leave their places together, and the index rows written grow with the pairs, not their square', async (_name, sql) => {
    const c = await createConversation(db.pool);
    const written = await addPairs(db.pool, c, PAIRS);
    const other = await createConversation(db.pool);
    const writes = await pairWrites(sql, sql.includes('$2') ? [c, other] : [c]);
    // Was 19,900 updates (every pair shifted once per pair before it) for either.
    expect(writes.updated + writes.deleted).toBeLessThanOrEqual(2 * PAIRS);
    const to = sql.includes('$2') ? other : c;
    expect(await drift(db.pool, c)).toEqual([]);
    expect(await drift(db.pool, to)).toEqual([]);
    const { rows } = await db.pool.query<{ run_id: string }>(
      'select run_id from sourcebound.pairs where conversation_id = $1 order by pair_index',
      [to],
    );
    expect(rows.map((r) => r.run_id)).toEqual(written.map((w) => w.runId));
  });

  it('every other run deleted: the index rows written grow with the pairs, not their square', async () => {
    const c = await createConversation(db.pool);
    const written = await addPairs(db.pool, c, PAIRS);
    const writes = await pairWrites(`delete from sourcebound.runs where id = any($1::uuid[])`, [
      written.filter((_, i) => i % 2 === 0).map((w) => w.runId),
    ]);
    // Was 10,000 updates.
    expect(writes.deleted).toBe(PAIRS / 2);
    expect(writes.updated).toBeLessThanOrEqual(PAIRS / 2);
    expect(await drift(db.pool, c)).toEqual([]);
  });

  it('one pair removed in the middle: only the later pairs move, by one', async () => {
    const c = await createConversation(db.pool);
    const written = await addPairs(db.pool, c, 40);
    const writes = await pairWrites(`update sourcebound.runs set status = 'failed' where id = $1`, [written[25]!.runId]);
    expect(writes).toEqual({ updated: 14, deleted: 1 });
    expect(await drift(db.pool, c)).toEqual([]);
  });
});
