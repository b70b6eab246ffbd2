import { describe, expect, it } from 'vitest';
import type pg from 'pg';
import { sourceHash, sourceMessageIds, type SourcePair } from '../../src/conversation/source-hash.ts';
import { MAX_PAGE_PAIRS, projectConversationHistory, type ReadEvent } from '../../src/projection/index.ts';
import { createTestDatabase } from '../support/db.ts';
import { addPairs, createConversation } from '../support/fixtures.ts';

const db = await createTestDatabase();
const PAIRS = 2_000;
const BUDGET = 16 * 1024;

/** A 2,000-pair conversation; with `summarized`, a usable @3 record for every plannable range. */
async function longConversation(summarized: boolean): Promise<string> {
  const id = await createConversation(db.pool);
  await addPairs(db.pool, id, PAIRS, (i) => ({
    user: `question ${i} about fund fees`,
    assistant: `answer ${i}: ${'the fee is 0.2% a year; '.repeat(3)}`,
  }));
  if (summarized) {
    const { rows } = await db.pool.query<SourcePair>(
      `select user_message_id as "userMessageId", user_text as "userText", assistant_message_id as "assistantMessageId", assistant_text as "assistantText"
       from sourcebound.eligible_pairs where conversation_id = $1 order by pair_index`,
      [id],
    );
    const ranges = Array.from({ length: (PAIRS - 30) / 10 + 1 }, (_, k) => rows.slice(k * 10, k * 10 + 10));
    await db.pool.query(
      `insert into sourcebound.conversation_summaries
         (conversation_id, scope, from_pair, to_pair, source_message_ids, source_hash, hash_version, model, prompt_version, status, summary, completed_at)
       select $1, 'tenant-a', f, f + 9, array(select jsonb_array_elements_text(ids)::uuid), h, 1, 'test/model', 'conversation-compaction@3', 'completed',
              'Fees were compared.', now()
       from unnest($2::int[], $3::jsonb[], $4::text[]) as t(f, ids, h)`,
      [id, ranges.map((_, k) => k * 10), ranges.map((r) => JSON.stringify(sourceMessageIds(r))), ranges.map((r) => sourceHash(r))],
    );
  }
  return id;
}

describe('cost grows with the budget, not the conversation', () => {
  it.each([
    ['raw pairs', false],
    ['summarized ranges', true],
  ])('a 2,000-pair conversation with a 16 KiB budget reads what fits plus at most one page (%s)', async (_, summarized) => {
    const id = await longConversation(summarized);
    const reads: ReadEvent[] = [];
    const p = await projectConversationHistory({
      pool: db.pool,
      conversationId: id,
      scope: 'tenant-a',
      budgetBytes: BUDGET,
      layout: 'newest-first',
      onRead: (e) => reads.push(e),
    });
    expect(p.pairCount).toBe(PAIRS);
    expect(p.bytes).toBeLessThanOrEqual(BUDGET);
    if (summarized) expect(p.items.some((i) => i.kind === 'summary')).toBe(true);

    // What is read is what the layout reaches (from its first item on: gap included), plus at most one page.
    const first =
      p.items[0]!.kind === 'pair' ? (p.items[0] as { pairIndex: number }).pairIndex : (p.items[0] as { fromPair: number }).fromPair;
    const pages = reads.filter((r) => r.query === 'pairsPageRead');
    const pairRows = pages.reduce((n, r) => n + r.rows, 0);
    expect(pairRows).toBeLessThanOrEqual(PAIRS - first + MAX_PAGE_PAIRS);
    expect(Math.max(...pages.map((r) => r.rows))).toBeLessThanOrEqual(MAX_PAGE_PAIRS);
    expect(pairRows).toBeLessThan(PAIRS / 4);
    // Summary records are read for the ranges of the pages read, not for the conversation.
    const records = reads.filter((r) => r.query === 'summariesForRangesRead');
    expect(records.reduce((n, r) => n + r.rows, 0)).toBeLessThanOrEqual(Math.ceil(pairRows / 10) + MAX_PAGE_PAIRS / 10);
    // One scoped index lookup for the count, then pages of pairs and of records.
    expect(reads.filter((r) => r.query === 'conversationPairCountRead')).toHaveLength(1);
    expect(reads.length).toBe(1 + pages.length + records.length);
    expect(records.length).toBeLessThanOrEqual(pages.length);
  });
});

describe('what a projection sends', () => {
  /** A pool whose clients log the text of every statement they send. */
  function logging(sent: string[]): pg.Pool {
    return new Proxy(db.pool, {
      get(target, prop, receiver) {
        if (prop !== 'connect') return Reflect.get(target, prop, receiver);
        return async () => {
          const client = await target.connect();
          return new Proxy(client, {
            get(c, p, r) {
              if (p !== 'query') return Reflect.get(c, p, r);
              return (...args: unknown[]) => {
                sent.push(typeof args[0] === 'string' ? args[0] : (args[0] as { text: string }).text);
                return (c.query as (...a: unknown[]) => unknown).apply(c, args);
              };
            },
          });
        };
      },
    });
  }

  it('a stable call that rewrites nothing: one statement, a projection function whose plans the connection keeps, and no transaction', async () => {
    const id = await longConversation(true);
    const first: string[] = [];
    const args = { conversationId: id, scope: 'tenant-a', budgetBytes: BUDGET };
    await projectConversationHistory({ ...args, pool: logging(first) });
    // The first call lays out anew: it reads further than one statement gives, inside one snapshot.
    expect(first[0]).toMatch(/^select \* from sourcebound\.projection_read\(/);
    expect(first[1]).toMatch(/^begin isolation level repeatable read read only$/);
    expect(first[2]).toMatch(/^select \* from sourcebound\.projection_read\(/);
    expect(first).toContain('rollback');
    const sent: string[] = [];
    const p = await projectConversationHistory({ ...args, pool: logging(sent) });
    expect(p.cache.rewrite).toBeNull();
    // One statement sees one snapshot (0040): the count, the layout, its pairs and its summaries' records.
    expect(sent).toEqual(['select * from sourcebound.projection_read($1, $2, $3, $4, $5, $6, $7)']);
    expect(await projectConversationHistory({ ...args, pool: db.pool })).toEqual(p);
  });
});
