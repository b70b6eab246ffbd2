import { describe, expect, it } from 'vitest';
import {
  ConversationNotFoundError,
  messagesBytes,
  projectConversationHistory,
  projectedBytes,
  toAnthropicMessages,
  type ConversationProjection,
  type PairItem,
  type SummaryItem,
} from '../../src/projection/index.ts';
import { ConversationReader } from '../../src/projection/reader.ts';
import { CONVERSATION_PROMPT_VERSION } from '../../src/gateway/prompts.ts';
import { createTestDatabase } from '../support/db.ts';
import { addPairs, createConversation } from '../support/fixtures.ts';
import { insertSummary, rangeSource, sized } from './support.ts';

const db = await createTestDatabase();
const LARGE = 10_000_000;

// These tests are about what a budget holds, laid out anew (fidelity.ts): the newest-first layout.
// The cache-stable layout, which rewrites with the same rules, has its own tests (stable.test.ts).
// A history that fits is sent whole and raw; so by default these ask for one byte less than the
// whole history raw, where the layout must choose what to summarize.
const newestFirst = (conversationId: string, budgetBytes: number, scope = 'tenant-a') =>
  projectConversationHistory({ pool: db.pool, conversationId, scope, budgetBytes, layout: 'newest-first' });
const project = async (conversationId: string, budgetBytes?: number, scope = 'tenant-a') =>
  newestFirst(conversationId, budgetBytes ?? Math.max(0, (await newestFirst(conversationId, LARGE, scope)).bytes - 1), scope);

async function conversation(pairs: number, text?: (i: number) => { user: string; assistant: string }) {
  const id = await createConversation(db.pool);
  const written = await addPairs(db.pool, id, pairs, text);
  return { id, written };
}

const pairIndexes = (p: ConversationProjection) => p.items.flatMap((i) => (i.kind === 'pair' ? [i.pairIndex] : []));
const summaries = (p: ConversationProjection) => p.items.filter((i): i is SummaryItem => i.kind === 'summary');
const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => from + i);

/** What every projection must satisfy, whatever the case. */
function checkInvariants(p: ConversationProjection): void {
  expect(p.bytes).toBe(messagesBytes(toAnthropicMessages(p)));
  expect(p.bytes).toBeLessThanOrEqual(p.budgetBytes);
  // Items and omitted spans cover every pair exactly once, in order.
  const covered = [
    ...p.omitted.flatMap((s) => range(s.fromPair, s.toPair)),
    ...p.items.flatMap((i) => (i.kind === 'pair' ? [i.pairIndex] : range(i.fromPair, i.toPair))),
  ].sort((a, b) => a - b);
  expect(covered).toEqual(range(0, p.pairCount - 1));
}

describe('projectConversationHistory', () => {
  it('projects every pair raw and in order when the budget holds them all', async () => {
    const { id, written } = await conversation(12);
    const p = await project(id, LARGE);
    checkInvariants(p);
    expect(p).toMatchObject({ conversationId: id, scope: 'tenant-a', pairCount: 12, omitted: [], budgetBytes: LARGE });
    expect(pairIndexes(p)).toEqual(range(0, 11));
    const first = p.items[0] as PairItem;
    expect(first).toEqual({
      kind: 'pair',
      pairIndex: 0,
      runId: written[0]!.runId,
      userMessageId: written[0]!.userMessageId,
      assistantMessageId: written[0]!.assistantMessageId,
      userText: 'question 0',
      assistantText: 'answer 0',
    });
    // Everything fits raw: no summary is needed, so none is judged.
    expect(p.summaryNotUsed).toEqual([]);
  });

  it('projects an empty conversation as nothing', async () => {
    const id = await createConversation(db.pool);
    const p = await project(id);
    expect(p).toMatchObject({ items: [], omitted: [], summaryNotUsed: [], bytes: 0, pairCount: 0 });
    expect(toAnthropicMessages(p)).toEqual([]);
  });

  it('uses a completed, source-bound @4 summary beside the ten original user messages', async () => {
    const { id, written } = await conversation(30);
    const recordId = await insertSummary(db.pool, { conversationId: id, fromPair: 0, summary: 'The assistant compared two funds.' });
    const p = await project(id);
    checkInvariants(p);
    const [summary] = summaries(p);
    expect(summary).toMatchObject({
      kind: 'summary',
      fromPair: 0,
      toPair: 9,
      recordId,
      promptVersion: 'conversation-compaction@4',
      model: 'test/model',
      summary: 'The assistant compared two funds.',
    });
    expect(summary!.userMessages).toEqual(
      range(0, 9).map((i) => ({ pairIndex: i, messageId: written[i]!.userMessageId, text: `question ${i}` })),
    );
    expect(summary!.label).toMatch(/non-authoritative summary of the assistant's replies for pairs 0-9/);
    expect(p.items[0]).toBe(summary);
    expect(pairIndexes(p)).toEqual(range(10, 29));
  });

  it('accepts @2 records, never @1, run-compaction or unknown versions', async () => {
    for (const [version, used] of [
      ['conversation-compaction@2', true],
      ['conversation-compaction@1', false],
      ['conversation-compaction@9', false],
      ['run-compaction@1', false],
      ['', false],
    ] as const) {
      const { id } = await conversation(30);
      const recordId = await insertSummary(db.pool, { conversationId: id, fromPair: 0, promptVersion: version });
      const p = await project(id);
      checkInvariants(p);
      if (used) {
        expect(
          summaries(p).map((s) => [s.recordId, s.promptVersion]),
          version,
        ).toEqual([[recordId, version]]);
      } else {
        expect(summaries(p), version).toEqual([]);
        expect(pairIndexes(p), version).toEqual(range(1, 29));
        expect(p.summaryNotUsed[0], version).toEqual({ fromPair: 0, toPair: 9, reason: 'version_not_allowed', recordId });
      }
    }
  });

  it('refuses a completed record over the 6,000-character ceiling, whatever made it', async () => {
    const { id } = await conversation(30);
    const over = await insertSummary(db.pool, { conversationId: id, fromPair: 0, summary: '😀'.repeat(6001) });
    const p = await project(id);
    expect(summaries(p)).toEqual([]);
    expect(pairIndexes(p)).toEqual(range(1, 29));
    expect(p.summaryNotUsed[0]).toEqual({ fromPair: 0, toPair: 9, reason: 'over_cap', recordId: over });
    // At the ceiling (counted in code points, not UTF-16 units) a record passes this check.
    const other = await conversation(30);
    await insertSummary(db.pool, { conversationId: other.id, fromPair: 0, summary: '😀'.repeat(6000) });
    expect((await project(other.id)).summaryNotUsed.filter((n) => n.reason === 'over_cap')).toEqual([]);
  });

  it('refuses a completed record whose text is only white space or invisible characters (stable layout too)', async () => {
    // The database asks only for a non-empty text: records from before the gateway's isBlank, or written by hand.
    for (const blank of [' \n\t ', '\u200b\u200b', '\u2800']) {
      const { id } = await conversation(30);
      const recordId = await insertSummary(db.pool, { conversationId: id, fromPair: 0, summary: blank });
      const budgetBytes = (await newestFirst(id, LARGE)).bytes - 1;
      for (const layout of ['newest-first', 'stable'] as const) {
        const p = await projectConversationHistory({ pool: db.pool, conversationId: id, scope: 'tenant-a', budgetBytes, layout });
        checkInvariants(p);
        expect(summaries(p), JSON.stringify(blank)).toEqual([]);
        expect(pairIndexes(p).at(-1)).toBe(29);
        expect(p.summaryNotUsed.find((n) => n.fromPair === 0)).toEqual({ fromPair: 0, toPair: 9, reason: 'blank', recordId });
        // No text block the Messages API refuses ("text content blocks must contain non-whitespace text").
        for (const m of toAnthropicMessages(p)) for (const b of m.content as { text: string }[]) expect(b.text.trim()).not.toBe('');
      }
    }
  });

  it('prefers the current prompt version, then the newest record', async () => {
    const { id } = await conversation(30);
    await insertSummary(db.pool, {
      conversationId: id,
      fromPair: 0,
      promptVersion: 'conversation-compaction@2',
      summary: 'v2, newest',
      ageSeconds: 0,
    });
    await insertSummary(db.pool, { conversationId: id, fromPair: 0, summary: 'v4, newest of all', ageSeconds: 0 });
    await insertSummary(db.pool, {
      conversationId: id,
      fromPair: 0,
      model: 'old/model',
      promptVersion: CONVERSATION_PROMPT_VERSION,
      summary: 'current, older',
      ageSeconds: 200,
    });
    const newest = await insertSummary(db.pool, {
      conversationId: id,
      fromPair: 0,
      model: 'new/model',
      promptVersion: CONVERSATION_PROMPT_VERSION,
      summary: 'current, newer',
      ageSeconds: 100,
    });
    const p = await project(id);
    expect(summaries(p).map((s) => [s.recordId, s.summary, s.model])).toEqual([[newest, 'current, newer', 'new/model']]);
  });

  it('among legacy records prefers the newer prompt version over the later completion', async () => {
    const { id } = await conversation(30);
    const v3 = await insertSummary(db.pool, {
      conversationId: id,
      fromPair: 0,
      promptVersion: 'conversation-compaction@3',
      summary: 'v3, older',
      ageSeconds: 200,
    });
    await insertSummary(db.pool, {
      conversationId: id,
      fromPair: 0,
      promptVersion: 'conversation-compaction@2',
      summary: 'v2, newer',
      ageSeconds: 0,
    });
    const p = await project(id);
    expect(summaries(p).map((s) => [s.recordId, s.summary])).toEqual([[v3, 'v3, older']]);
  });

  it('falls back to a usable older-version record when the current one no longer binds', async () => {
    const { id, written } = await conversation(30);
    const v2 = await insertSummary(db.pool, { conversationId: id, fromPair: 0, promptVersion: 'conversation-compaction@2' });
    // A @4 record bound to a different assistant message in pair 4.
    const ids = (await rangeSource(db.pool, id, 0)).flatMap((s) => [s.userMessageId, s.assistantMessageId]);
    ids[9] = written[20]!.assistantMessageId;
    await insertSummary(db.pool, { conversationId: id, fromPair: 0, sourceMessageIds: ids });
    const p = await project(id);
    expect(summaries(p).map((s) => s.recordId)).toEqual([v2]);
  });

  describe('seed case B: the source changed while an old summary stays stored', () => {
    it('an edit of pair 3 makes the summary unusable; its pairs are projected raw', async () => {
      const { id, written } = await conversation(30);
      const recordId = await insertSummary(db.pool, { conversationId: id, fromPair: 0 });
      expect(summaries(await project(id))).toHaveLength(1);

      await db.pool.query(`update sourcebound.messages set content = 'question 3, corrected' where id = $1`, [written[3]!.userMessageId]);
      const p = await project(id);
      checkInvariants(p);
      expect(summaries(p)).toEqual([]);
      expect(pairIndexes(p)).toEqual(range(1, 29));
      expect((p.items.find((it) => it.kind === 'pair' && it.pairIndex === 3) as PairItem).userText).toBe('question 3, corrected');
      expect(p.summaryNotUsed[0]).toEqual({ fromPair: 0, toPair: 9, reason: 'binding_changed', recordId });
    });

    it('an edit of an assistant reply in the range also unbinds it', async () => {
      const { id, written } = await conversation(30);
      const recordId = await insertSummary(db.pool, { conversationId: id, fromPair: 0 });
      await db.pool.query(`update sourcebound.messages set content = 'answer 9 (revised)' where id = $1`, [written[9]!.assistantMessageId]);
      const p = await project(id);
      expect(summaries(p)).toEqual([]);
      expect(p.summaryNotUsed[0]).toEqual({ fromPair: 0, toPair: 9, reason: 'binding_changed', recordId });
    });

    it('a message of pair 3 replaced by a new message id makes the summary unusable', async () => {
      const { id, written } = await conversation(30);
      const recordId = await insertSummary(db.pool, { conversationId: id, fromPair: 0 });
      const client = await db.pool.connect();
      try {
        await client.query('begin');
        await client.query('delete from sourcebound.messages where id = $1', [written[3]!.userMessageId]);
        await client.query(
          `insert into sourcebound.messages (conversation_id, run_id, role, content) values ($1, $2, 'user', 'question 3')`,
          [id, written[3]!.runId],
        );
        await client.query('commit');
      } finally {
        client.release();
      }
      const p = await project(id);
      checkInvariants(p);
      expect(summaries(p)).toEqual([]);
      const pair3 = p.items.find((it) => it.kind === 'pair' && it.pairIndex === 3) as PairItem;
      // Same text, new identity: the binding is by id as well as by content.
      expect(pair3.userText).toBe('question 3');
      expect(pair3.userMessageId).not.toBe(written[3]!.userMessageId);
      expect(p.summaryNotUsed[0]).toEqual({ fromPair: 0, toPair: 9, reason: 'binding_changed', recordId });
    });

    it('a pair that stops being eligible shifts the ranges: the old record no longer binds either range', async () => {
      const { id, written } = await conversation(31);
      const recordId = await insertSummary(db.pool, { conversationId: id, fromPair: 0 });
      await db.pool.query(`update sourcebound.runs set status = 'failed' where id = $1`, [written[2]!.runId]);
      const p = await project(id);
      checkInvariants(p);
      expect(p.pairCount).toBe(30);
      expect(summaries(p)).toEqual([]);
      expect(p.summaryNotUsed[0]).toEqual({ fromPair: 0, toPair: 9, reason: 'binding_changed', recordId });
    });
  });

  it('ignores a completed record whose ids do not match the current pairs', async () => {
    const { id } = await conversation(30);
    const current = (await rangeSource(db.pool, id, 0)).flatMap((s) => [s.userMessageId, s.assistantMessageId]);
    // Ids in the wrong order (assistant before user) with the right hash; then the ids of another range.
    const swapped = current.map((_, i) => current[i % 2 === 0 ? i + 1 : i - 1]!);
    const a = await insertSummary(db.pool, { conversationId: id, fromPair: 0, sourceMessageIds: swapped, model: 'm/a' });
    const other = (await rangeSource(db.pool, id, 10)).flatMap((s) => [s.userMessageId, s.assistantMessageId]);
    const b = await insertSummary(db.pool, { conversationId: id, fromPair: 0, sourceMessageIds: other, model: 'm/b' });
    const p = await project(id);
    expect(summaries(p)).toEqual([]);
    expect(p.summaryNotUsed[0]).toMatchObject({ fromPair: 0, toPair: 9, reason: 'binding_changed' });
    expect([a, b]).toContain(p.summaryNotUsed[0]!.recordId);
  });

  it('ignores a record whose hash does not match though its ids do', async () => {
    const { id } = await conversation(30);
    const recordId = await insertSummary(db.pool, { conversationId: id, fromPair: 0, sourceHash: 'ab'.repeat(32) });
    const p = await project(id);
    expect(summaries(p)).toEqual([]);
    expect(p.summaryNotUsed[0]).toEqual({ fromPair: 0, toPair: 9, reason: 'binding_changed', recordId });
  });

  it('the database refuses a misaligned record and one with 19 source ids', async () => {
    const { id } = await conversation(30);
    await expect(insertSummary(db.pool, { conversationId: id, fromPair: 5, toPair: 14 })).rejects.toThrow(
      /conversation_summaries_range_aligned/,
    );
    await expect(insertSummary(db.pool, { conversationId: id, fromPair: 0, toPair: 10 })).rejects.toThrow(
      /conversation_summaries_range_aligned/,
    );
    const ids = (await rangeSource(db.pool, id, 0)).flatMap((s) => [s.userMessageId, s.assistantMessageId]);
    await expect(insertSummary(db.pool, { conversationId: id, fromPair: 0, sourceMessageIds: ids.slice(0, 19) })).rejects.toThrow(
      /conversation_summaries_twenty_sources/,
    );
    // A record in another scope than its conversation's cannot exist at all.
    await expect(insertSummary(db.pool, { conversationId: id, fromPair: 0, scope: 'tenant-b' })).rejects.toThrow(
      /conversation_summaries_conversation_fk/,
    );
  });

  it('never uses a record whose hash version this build cannot compute', async () => {
    const { id } = await conversation(30);
    const recordId = await insertSummary(db.pool, { conversationId: id, fromPair: 0, hashVersion: 2 });
    const p = await project(id);
    expect(summaries(p)).toEqual([]);
    expect(p.summaryNotUsed[0]).toEqual({ fromPair: 0, toPair: 9, reason: 'hash_version_unknown', recordId });
  });

  it('reports a failed-for-good record and projects its pairs raw', async () => {
    const { id } = await conversation(30);
    const recordId = await insertSummary(db.pool, { conversationId: id, fromPair: 0, status: 'failed' });
    const p = await project(id);
    expect(pairIndexes(p)).toEqual(range(1, 29));
    expect(p.summaryNotUsed[0]).toEqual({ fromPair: 0, toPair: 9, reason: 'failed', recordId });
  });

  it('never uses running, pending or stale records', async () => {
    for (const status of ['running', 'pending', 'stale'] as const) {
      const { id } = await conversation(30);
      await insertSummary(db.pool, { conversationId: id, fromPair: 0, status, summary: 'not final' });
      const p = await project(id);
      expect(summaries(p), status).toEqual([]);
      expect(p.summaryNotUsed[0], status).toEqual({ fromPair: 0, toPair: 9, reason: 'not_yet_summarized' });
    }
  });

  describe('seed case C: a stored summary that the next request cannot fit', () => {
    // Range 0-9 has long replies and a long summary (smaller than the replies); everything newer is short.
    async function setup() {
      const { id } = await conversation(30, (i) => ({ user: `question ${i}`, assistant: i < 10 ? sized(1000, 'r') : `answer ${i}` }));
      const raw = await project(id, LARGE);
      const recordId = await insertSummary(db.pool, { conversationId: id, fromPair: 0, summary: sized(4000, 's') });
      const withSummary = await project(id);
      /** The exact bytes of the projection of pairs `from`..29 raw, with the note for the pairs before. */
      const bytesFrom = (from: number) =>
        messagesBytes(
          toAnthropicMessages({
            items: raw.items.slice(from),
            omitted: from === 0 ? [] : [{ fromPair: 0, toPair: from - 1, reason: 'budget' }],
          }),
        );
      return { id, recordId, withSummary, bytesFrom };
    }

    it('uses the summary where user messages + summary fit and the originals do not', async () => {
      const { id } = await conversation(30, (i) => ({ user: `question ${i}`, assistant: i < 10 ? sized(1000, 'r') : `answer ${i}` }));
      const raw = await project(id, LARGE);
      const recordId = await insertSummary(db.pool, { conversationId: id, fromPair: 0, summary: sized(400, 's') });
      const verdict = await new ConversationReader(db.pool, {
        conversationId: id,
        scope: 'tenant-a',
        count: 30,
        budgetBytes: LARGE,
        onRead: undefined,
      }).summary(0);
      if (verdict === 'changed' || verdict.kind !== 'usable') throw new Error('the summary should be usable');
      const item = verdict.item;
      // Pairs 10-29 raw and the summary item beside them, with a little room; the ten originals are far over.
      const budget = projectedBytes([item, ...raw.items.slice(10)], []) + 100;
      const p = await project(id, budget);
      checkInvariants(p);
      expect(summaries(p).map((s) => s.recordId)).toEqual([recordId]);
      expect(pairIndexes(p)).toEqual(range(10, 29));
    });

    it('falls back to the newest original pairs of the range when the summary does not fit', async () => {
      const { id, recordId, withSummary, bytesFrom } = await setup();
      expect(withSummary.bytes).toBeGreaterThan(bytesFrom(7));
      const p = await project(id, bytesFrom(7));
      checkInvariants(p);
      expect(p.bytes).toBe(bytesFrom(7));
      expect(summaries(p)).toEqual([]);
      expect(pairIndexes(p)).toEqual(range(7, 29));
      expect(p.omitted).toEqual([{ fromPair: 0, toPair: 6, reason: 'budget' }]);
      expect(recordId).toBeTruthy();

      const tighter = await project(id, bytesFrom(7) - 1);
      expect(pairIndexes(tighter)).toEqual(range(8, 29));
      expect(tighter.omitted).toEqual([{ fromPair: 0, toPair: 7, reason: 'budget' }]);
    });

    it('leaves the range out when not even one of its pairs fits, and says so', async () => {
      const { id, recordId, bytesFrom } = await setup();
      const p = await project(id, bytesFrom(9) - 1);
      checkInvariants(p);
      expect(p.items.every((i) => i.kind === 'pair' && i.pairIndex >= 10)).toBe(true);
      expect(pairIndexes(p)).toEqual(range(10, 29));
      expect(p.omitted).toEqual([{ fromPair: 0, toPair: 9, reason: 'budget' }]);
      expect(p.summaryNotUsed.find((n) => n.fromPair === 0)).toMatchObject({ reason: 'does_not_fit', recordId });
    });

    it('never uses a summary larger than its ten original pairs: more budget never carries fewer pairs', async () => {
      // Short replies and a verbose (valid) summary: the candidate costs more than the originals.
      const { id } = await conversation(40);
      const raw = await project(id, LARGE);
      const recordId = await insertSummary(db.pool, { conversationId: id, fromPair: 10, summary: sized(4000, 's') });
      const p = await project(id, raw.bytes - 1);
      checkInvariants(p);
      expect(summaries(p)).toEqual([]);
      expect(pairIndexes(p)).toEqual(range(1, 39));
      expect(p.summaryNotUsed.find((s) => s.fromPair === 10)).toEqual({
        fromPair: 10,
        toPair: 19,
        reason: 'larger_than_original',
        recordId,
      });
      // Unlimited budget: the originals, never the bigger, lossy summary.
      expect((await project(id, LARGE)).bytes).toBe(raw.bytes);
      // Pairs carried never fall as the budget grows (issue 11 item 8: 8,798 carried 40, 8,851 carried 30).
      let carried = 0;
      for (let budget = 0; budget <= raw.bytes + 200; budget += 97) {
        const q = await project(id, budget);
        const n = q.pairCount - q.omitted.reduce((m, s) => m + s.toPair - s.fromPair + 1, 0);
        expect(n, `budget ${budget}`).toBeGreaterThanOrEqual(carried);
        carried = n;
      }
    });
  });

  it('budget 0 projects nothing and omits every pair', async () => {
    const { id } = await conversation(25);
    const p = await project(id, 0);
    checkInvariants(p);
    expect(p).toMatchObject({
      items: [],
      bytes: 0,
      budgetBytes: 0,
      pairCount: 25,
      omitted: [{ fromPair: 0, toPair: 24, reason: 'budget' }],
    });
    expect(toAnthropicMessages(p)).toEqual([]);
  });

  it('a newest pair larger than the budget is left out alone, without reading its text, and the older pairs still come', async () => {
    const { id } = await conversation(12, (i) => ({ user: `q${i}`, assistant: i === 11 ? sized(5000) : `a${i}` }));
    const reads: { query: string; rows: number; textRows?: number }[] = [];
    for (const layout of ['newest-first', 'stable'] as const) {
      const p = await projectConversationHistory({
        pool: db.pool,
        conversationId: id,
        scope: 'tenant-a',
        budgetBytes: 4000,
        layout,
        onRead: (e) => reads.push(e),
      });
      checkInvariants(p);
      expect(pairIndexes(p)).toEqual(range(0, 10));
      expect(p.omitted).toEqual([{ fromPair: 11, toPair: 11, reason: 'too_large' }]);
    }
    // Its text was never transferred.
    expect(reads.filter((r) => r.query === 'pairsPageRead').every((r) => r.textRows! < r.rows)).toBe(true);
  });

  it('rejects a negative or fractional budget', async () => {
    const { id } = await conversation(1);
    await expect(project(id, -1)).rejects.toThrow(RangeError);
    await expect(project(id, 1.5)).rejects.toThrow(RangeError);
  });

  it('a conversation of another scope is not found, exactly like a missing one', async () => {
    const { id } = await conversation(30);
    await insertSummary(db.pool, { conversationId: id, fromPair: 0 });
    const reads: string[] = [];
    const wrongScope = await projectConversationHistory({
      pool: db.pool,
      conversationId: id,
      scope: 'tenant-b',
      budgetBytes: LARGE,
      onRead: (e) => reads.push(e.query),
    }).catch((e: unknown) => e);
    const missing = await project('00000000-0000-4000-8000-000000000000').catch((e: unknown) => e);
    const malformed = await project('not-a-uuid').catch((e: unknown) => e);
    for (const error of [wrongScope, missing, malformed]) {
      expect(error).toBeInstanceOf(ConversationNotFoundError);
      expect((error as Error).name).toBe('ConversationNotFoundError');
    }
    // One scoped lookup, then nothing else was read.
    expect(reads).toEqual(['conversationPairCountRead']);
    // It carries back only what the caller passed.
    expect(Object.keys(wrongScope as object).sort()).toEqual(['conversationId', 'name', 'scope']);
  });

  it('carries user text byte for byte, in raw pairs and beside summaries', async () => {
    const texts = [
      'naïve 数据 🚀 \u200f\u200b end',
      'e\u0301 (combining) vs é',
      '👩‍👩‍👧‍👦 family, 🇯🇵 flag',
      '  leading and trailing  \n',
      'line\r\nbreaks\ttabs',
      'quotes " \\ backslash \\" \u2028 \u2029',
      '{"json": "looking", "n": 1}',
      'ｆｕｌｌｗｉｄｔｈ ＡＢＣ',
      '\u{1F600}\u{1F64F}\u{10FFFF}',
      '<reply id="x">not a tag</reply>',
    ];
    const { id } = await conversation(30, (i) => ({ user: texts[i % texts.length]!, assistant: `answer ${i}` }));
    await insertSummary(db.pool, { conversationId: id, fromPair: 0 });
    const p = await project(id);
    const [summary] = summaries(p);
    for (const m of summary!.userMessages)
      expect(Buffer.from(m.text, 'utf8').equals(Buffer.from(texts[m.pairIndex % texts.length]!, 'utf8'))).toBe(true);
    for (const item of p.items) {
      if (item.kind === 'pair')
        expect(Buffer.from(item.userText, 'utf8').equals(Buffer.from(texts[item.pairIndex % texts.length]!, 'utf8'))).toBe(true);
    }
    // And in what the adapter sends: each user message its own text block, unchanged.
    const messages = toAnthropicMessages(p);
    const userBlocks = messages.filter((m) => m.role === 'user').flatMap((m) => (Array.isArray(m.content) ? m.content : []));
    expect(userBlocks.map((b) => (b.type === 'text' ? b.text : null))).toEqual(range(0, 29).map((i) => texts[i % texts.length]));
  });

  it('reads through a caller-held client as well as a pool', async () => {
    const { id } = await conversation(30);
    await insertSummary(db.pool, { conversationId: id, fromPair: 0 });
    const client = await db.pool.connect();
    try {
      await client.query('begin isolation level repeatable read');
      const viaClient = await projectConversationHistory({
        pool: client,
        conversationId: id,
        scope: 'tenant-a',
        budgetBytes: LARGE,
        layout: 'newest-first',
      });
      await client.query('commit');
      expect(viaClient).toEqual(await project(id, LARGE));
    } finally {
      client.release();
    }
  });
});
