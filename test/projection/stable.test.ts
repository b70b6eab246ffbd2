import { describe, expect, it } from 'vitest';
import { sourceHash, sourceMessageIds } from '../../src/conversation/source-hash.ts';
import {
  FILL_RATIO,
  HEAD_MAX_RATIO,
  MAX_GAP_PAIRS,
  TAIL_PAIRS,
  messagesBytes,
  projectConversationHistory,
  projectedBytes,
  toAnthropicMessages,
  type ConversationProjection,
  type PairItem,
  type ReadEvent,
} from '../../src/projection/index.ts';
import { createTestDatabase } from '../support/db.ts';
import { addPairs, createConversation } from '../support/fixtures.ts';
import { insertSummary, rangeSource } from './support.ts';
import { projectionLayoutWrite } from '../../src/db/queries/projection.ts';

const db = await createTestDatabase();
const SCOPE = 'tenant-a';

const project = (conversationId: string, budgetBytes: number, extra: Partial<Parameters<typeof projectConversationHistory>[0]> = {}) =>
  projectConversationHistory({ pool: db.pool, conversationId, scope: SCOPE, budgetBytes, ...extra });

/** The history as JSON messages without the breakpoint (it moves to the end every turn). */
const plain = (p: ConversationProjection) => toAnthropicMessages(p, { cacheBreakpoint: false }).map((m) => JSON.stringify(m));

/** Replies of varying length, like a real conversation (deterministic). */
const reply = (i: number) => ({
  user: `question ${i}: ${'why '.repeat(1 + ((i * 7) % 13))}?`,
  assistant: `answer ${i}: ${'because of the fund fees and overlap. '.repeat(3 + ((i * 11) % 29))}`,
});

/** The pair the first item starts with. */
const firstPair = (p: ConversationProjection) => {
  const i = p.items[0]!;
  return i.kind === 'pair' ? i.pairIndex : i.fromPair;
};

/** Verbatim user messages a projection carries (raw pairs, and the ten beside each summary). */
const users = (p: ConversationProjection) => p.items.reduce((n, i) => n + (i.kind === 'pair' ? 1 : i.userMessages.length), 0);

/** One more turn: the next projection at `budget` keeps the layout and extends `before` byte for byte. */
async function extendsOnNextTurn(
  id: string,
  budget: number,
  before: ConversationProjection,
  turn: number,
): Promise<ConversationProjection> {
  await addPairs(db.pool, id, 1, reply, { startAt: turn });
  const next = await project(id, budget);
  expect(next.cache.rewrite).toBeNull();
  expect(plain(next).slice(0, plain(before).length)).toEqual(plain(before));
  return next;
}

/**
 * The fidelity rules (src/projection/fidelity.ts) on one projection: the newest pairs raw (at least the
 * newest min(TAIL_PAIRS, half the budget), a pair over half the budget excepted); older material is what
 * is left out (one gap after the summaries, of at most MAX_GAP_PAIRS; else only single pairs too large);
 * the head within half the budget.
 */
async function checkFidelity(conversationId: string, p: ConversationProjection): Promise<void> {
  const all = (await project(conversationId, 10_000_000, { layout: 'newest-first', persistLayout: false })).items as PairItem[];
  const shown = new Set(p.items.flatMap((i) => (i.kind === 'pair' ? [i.pairIndex] : [])));
  const half = Math.floor(p.budgetBytes / 2);
  let floorBytes = 0;
  for (let i = all.length - 1, n = 0; i >= 0 && n < TAIL_PAIRS; i--) {
    const size = projectedBytes([all[i]!], []);
    if (size > half) break;
    floorBytes += size;
    if (floorBytes > half) break;
    n += 1;
    expect(shown.has(i), `pair ${i} of the floor`).toBe(true);
  }
  const head = p.items.filter((i) => i.kind === 'summary');
  expect(projectedBytes(head, [])).toBeLessThanOrEqual(Math.floor(HEAD_MAX_RATIO * p.budgetBytes));
  const rawFrom = Math.min(...shown);
  const inside = p.omitted.filter((s) => s.toPair >= rawFrom);
  for (const s of inside) expect(s.reason, JSON.stringify(s)).toBe('too_large');
  const gaps = p.omitted.filter((s) => s.fromPair > 0 && s.reason === 'budget');
  expect(gaps.length).toBeLessThanOrEqual(1);
  for (const g of gaps) expect(g.toPair - g.fromPair + 1).toBeLessThanOrEqual(MAX_GAP_PAIRS);
}

/** Every summary item binds its current source now: ids and hash recomputed from the stored pairs. */
async function checkBindings(conversationId: string, p: ConversationProjection): Promise<void> {
  for (const item of p.items) {
    if (item.kind !== 'summary') continue;
    const source = await rangeSource(db.pool, conversationId, item.fromPair, item.toPair);
    const { rows } = await db.pool.query(
      'select source_message_ids::text[] as ids, source_hash from sourcebound.conversation_summaries where id = $1',
      [item.recordId],
    );
    expect(rows[0].ids).toEqual(sourceMessageIds(source));
    expect(rows[0].source_hash).toBe(sourceHash(source));
    // Never inside the newest 20.
    expect(item.toPair).toBeLessThan(p.pairCount - 20);
  }
}

describe('cache-stable projection (default layout)', () => {
  it.each([16 * 1024, 32 * 1024, 64 * 1024])(
    'over 200 turns at %i bytes: fidelity rules on every request, only appends between rewrites',
    async (budget) => {
      const id = await createConversation(db.pool);
      let previous: string[] | null = null;
      let rewrites = 0;
      let appended = 0;
      let appendedBytes = 0;
      let summariesShown = 0;
      const fills: number[] = [];
      for (let turn = 0; turn < 200; turn++) {
        await addPairs(db.pool, id, 1, reply, { startAt: turn });
        // Summaries arrive as a worker would make them: range k once 10k+29 pairs exist, a few turns late.
        const k = Math.floor((turn - 33) / 10);
        if (turn >= 33 && (turn - 33) % 10 === 0)
          await insertSummary(db.pool, {
            conversationId: id,
            fromPair: k * 10,
            summary: `Fees and overlap of pairs ${k * 10}-${k * 10 + 9} were compared.`,
          });
        const p = await project(id, budget);
        expect(p.bytes).toBeLessThanOrEqual(budget);
        expect(p.bytes).toBe(messagesBytes(toAnthropicMessages(p)));
        expect(p.problems).toEqual([]);
        await checkBindings(id, p);
        await checkFidelity(id, p);
        summariesShown += p.items.filter((i) => i.kind === 'summary').length;
        const whole = await project(id, 10_000_000, { layout: 'newest-first', persistLayout: false });
        if (whole.bytes > budget) fills.push(p.bytes / budget);
        const now = plain(p);
        if (p.cache.rewrite === null) {
          // Between rewrites the history only grows at its end: the previous one is a prefix, byte for byte.
          expect(previous).not.toBeNull();
          expect(now.slice(0, previous!.length)).toEqual(previous);
          expect(now.length).toBe(previous!.length + 2);
          appended += 1;
        } else {
          rewrites += 1;
          expect(p.cache.layoutSaved).toBe(true);
          // Rule 3: a rewrite of a history larger than the budget fills at least three quarters of it.
          if (whole.bytes > budget) expect(p.bytes).toBeGreaterThanOrEqual(FILL_RATIO * budget);
        }
        appendedBytes += Buffer.byteLength(
          JSON.stringify(toAnthropicMessages({ items: p.items.slice(-1), omitted: [] }, { cacheBreakpoint: false })),
        );
        previous = now;
      }
      // A rewrite leaves a quarter of the budget free: the next is a quarter budget of new exchanges away.
      expect(rewrites).toBeLessThanOrEqual(Math.ceil(appendedBytes / (budget * (1 - FILL_RATIO))) + 2);
      expect(appended).toBeGreaterThan(0);
      expect(summariesShown).toBeGreaterThan(0);
      // The budget is used: no request whose history exceeds it is below half, and the mean is high.
      expect(Math.min(...fills)).toBeGreaterThanOrEqual(0.5);
      expect(fills.reduce((a, b) => a + b, 0) / fills.length).toBeGreaterThanOrEqual(0.85);
    },
    180_000,
  );

  it('a conversation resumed after the cache lifetime is laid out afresh; within it the layout is kept and its use recorded', async () => {
    const id = await createConversation(db.pool);
    await addPairs(db.pool, id, 60, reply);
    for (const k of [0, 1, 2])
      await insertSummary(db.pool, { conversationId: id, fromPair: k * 10, summary: `Fees of pairs ${k * 10}-${k * 10 + 9}.` });
    const budget = 16 * 1024;
    let clock = Date.UTC(2026, 0, 1);
    const at = (extra: Partial<Parameters<typeof projectConversationHistory>[0]> = {}) =>
      project(id, budget, { now: () => clock, ...extra });
    expect((await at()).cache.rewrite).toBe('first');
    const usedAt = async () =>
      (
        await db.pool.query('select used_at from sourcebound.projection_layouts where conversation_id = $1', [id])
      ).rows[0].used_at.getTime();
    expect(await usedAt()).toBe(clock);
    // A turn two minutes later: kept, and its use recorded (the cache's lifetime starts again).
    await addPairs(db.pool, id, 1, reply, { startAt: 60 });
    clock += 120_000;
    expect((await at()).cache.rewrite).toBeNull();
    expect(await usedAt()).toBe(clock);
    // Four more minutes (six since the layout was made, four since its last use): still kept.
    await addPairs(db.pool, id, 1, reply, { startAt: 61 });
    clock += 240_000;
    expect((await at()).cache.rewrite).toBeNull();
    // The user comes back after ten minutes: the cache is gone, the request pays a write anyway,
    // so it is laid out for fidelity as a new conversation would be.
    await addPairs(db.pool, id, 1, reply, { startAt: 62 });
    clock += 600_000;
    const resumed = await at();
    expect(resumed.cache.rewrite).toBe('expired');
    const fresh = await project(id, budget, { persistLayout: false, now: () => clock, layout: 'stable', cacheTtlSeconds: 1 });
    expect(plain(resumed)).toEqual(plain(fresh));
    // With the one-hour cache the same pause keeps the layout.
    await addPairs(db.pool, id, 1, reply, { startAt: 63 });
    clock += 600_000;
    expect((await at({ cacheTtlSeconds: 3600 })).cache.rewrite).toBeNull();
    await expect(at({ cacheTtlSeconds: 0 })).rejects.toThrow(/cacheTtlSeconds must be a positive number/);
  });

  it('a pasted 9.5 KB message never hides everything older (16 KiB): older pairs and summaries still come', async () => {
    const id = await createConversation(db.pool);
    await addPairs(db.pool, id, 39, reply);
    for (const k of [0, 1])
      await insertSummary(db.pool, { conversationId: id, fromPair: k * 10, summary: `Fees of pairs ${k * 10}-${k * 10 + 9}.` });
    await addPairs(
      db.pool,
      id,
      1,
      () => ({ user: `please read this log:\n${'ERROR disk full at sector 7; '.repeat(330)}`, assistant: 'The disk is full.' }),
      { startAt: 39 },
    );
    await addPairs(db.pool, id, 1, reply, { startAt: 40 });
    for (const layout of ['stable', 'newest-first'] as const) {
      const p = await project(id, 16 * 1024, { layout });
      await checkFidelity(id, p);
      const pasted = p.items.find((i) => i.kind === 'pair' && i.pairIndex === 39);
      // It fits the budget: it comes, and older pairs fill what is left.
      expect(pasted, layout).toBeDefined();
      expect(p.items.filter((i) => (i.kind === 'pair' ? i.pairIndex : i.fromPair) < 39).length, layout).toBeGreaterThan(0);
      expect(p.bytes, layout).toBeGreaterThanOrEqual(FILL_RATIO * 16 * 1024);
    }
    // At 8 KiB it is larger than the budget: left out alone, said so, and the pairs before it come.
    const small = await project(id, 8 * 1024, { layout: 'newest-first' });
    expect(small.omitted).toContainEqual({ fromPair: 39, toPair: 39, reason: 'too_large' });
    expect(small.items.at(-1)).toMatchObject({ kind: 'pair', pairIndex: 40 });
    expect(small.items.filter((i) => i.kind === 'pair' && i.pairIndex < 39).length).toBeGreaterThan(0);
    const messages = toAnthropicMessages(small);
    expect(JSON.stringify(messages)).toContain('1 exchange (pair 39) was left out of this request, too large for it,');
  });

  it('a pair edited inside the prefix rewrites it with the new text, never the old', async () => {
    const id = await createConversation(db.pool);
    const written = await addPairs(db.pool, id, 40, reply);
    await project(id, 64 * 1024);
    await db.pool.query('update sourcebound.messages set content = $2 where id = $1', [written[35]!.assistantMessageId, 'edited answer']);
    const p = await project(id, 64 * 1024);
    expect(p.cache.rewrite).toBe('changed');
    const item = p.items.find((i) => i.kind === 'pair' && i.pairIndex === 35);
    expect(item).toMatchObject({ assistantText: 'edited answer' });
  });

  it('a call that keeps its layout reuses the items read before only while their content is equal (frozen), and an edit is seen at once', async () => {
    const id = await createConversation(db.pool);
    const written = await addPairs(db.pool, id, 40, reply);
    await insertSummary(db.pool, { conversationId: id, fromPair: 0, summary: 'Fees compared.' });
    const a = await project(id, 16 * 1024);
    const b = await project(id, 16 * 1024);
    expect(b.cache.rewrite).toBeNull();
    expect([b.items, b.omitted, b.bytes]).toEqual([a.items, a.omitted, a.bytes]);
    expect(b.items.every((it, i) => it === a.items[i] && Object.isFrozen(it))).toBe(true);
    // The newest pair edited: the next call carries the new text.
    await db.pool.query('update sourcebound.messages set content = $2 where id = $1', [written[39]!.assistantMessageId, 'edited answer']);
    const c = await project(id, 16 * 1024);
    expect(c.items.at(-1)).toMatchObject({ kind: 'pair', pairIndex: 39, assistantText: 'edited answer' });
    // And back to the text it had: equal content, an equal item.
    await db.pool.query('update sourcebound.messages set content = $2 where id = $1', [
      written[39]!.assistantMessageId,
      reply(39).assistant,
    ]);
    expect((await project(id, 16 * 1024)).items.at(-1)).toEqual(a.items.at(-1));
  });

  it('a summary in the layout whose source changes is dropped at once (Case B), and the originals come back', async () => {
    const id = await createConversation(db.pool);
    const written = await addPairs(db.pool, id, 45, reply);
    const recordId = await insertSummary(db.pool, { conversationId: id, fromPair: 0, summary: 'Fees compared.' });
    const budget = 16 * 1024;
    const before = await project(id, budget);
    expect(before.items[0]).toMatchObject({ kind: 'summary', recordId });
    await extendsOnNextTurn(id, budget, before, 45);
    await db.pool.query('update sourcebound.messages set content = $2 where id = $1', [
      written[3]!.assistantMessageId,
      'a different answer',
    ]);
    const after = await project(id, budget);
    expect(after.cache.rewrite).toBe('changed');
    expect(after.items.some((i) => i.kind === 'summary')).toBe(false);
    expect(after.summaryNotUsed[0]).toMatchObject({ fromPair: 0, reason: 'binding_changed', recordId });
    await checkBindings(id, after);
  });

  it('a pair that stops being eligible rewrites the layout', async () => {
    const id = await createConversation(db.pool);
    const written = await addPairs(db.pool, id, 30, reply);
    await project(id, 16 * 1024);
    await db.pool.query(`update sourcebound.runs set status = 'failed' where id = $1`, [written[29]!.runId]);
    const p = await project(id, 16 * 1024);
    expect(p.cache.rewrite).toBe('changed');
    expect(p.pairCount).toBe(29);
    expect(p.bytes).toBeLessThanOrEqual(16 * 1024);
  });

  it('after older pairs stop being eligible, the smaller layout is stored and the next turns extend it', async () => {
    const id = await createConversation(db.pool);
    const written = await addPairs(db.pool, id, 100, reply);
    const budget = 16 * 1024;
    expect((await project(id, budget)).cache.layoutSaved).toBe(true);
    for (const pair of written.slice(10, 20))
      await db.pool.query(`update sourcebound.runs set status = 'failed' where id = $1`, [pair.runId]);
    const rewritten = await project(id, budget);
    expect(rewritten.pairCount).toBe(90);
    expect(rewritten.cache).toMatchObject({ rewrite: 'changed', layoutSaved: true });
    const { rows } = await db.pool.query(
      'select end_pair from sourcebound.projection_layouts where conversation_id = $1 and budget_bytes = $2',
      [id, budget],
    );
    expect(rows[0].end_pair).toBe(90);
    // Until the count passes the old 100, every turn used to be a rewrite from a start that moved.
    let before = rewritten;
    for (let turn = 100; turn < 103; turn++) before = await extendsOnNextTurn(id, budget, before, turn);
  });

  it('a rewrite stores its layout only over the layout it read: a concurrent rewrite is never undone', async () => {
    const id = await createConversation(db.pool);
    await addPairs(db.pool, id, 40, reply);
    const budget = 8192;
    // What a call that started before the current layout was stored would write.
    const stale = {
      startPair: 0,
      endPair: 1,
      summaries: [],
      gaps: [],
      prefixSha256: 'a'.repeat(64),
      prefixBytes: 10,
      savedCost: 0,
      savesBytes: 0,
      headSha256: null,
      usedAt: new Date(),
    };
    const first = await project(id, budget);
    expect(first.cache.layoutSaved).toBe(true);
    const read = async () =>
      (
        await db.pool.query(
          'select start_pair, end_pair, prefix_sha256 from sourcebound.projection_layouts where conversation_id = $1 and budget_bytes = $2',
          [id, budget],
        )
      ).rows[0];
    const stored = await read();
    const args = { conversationId: id, scope: SCOPE, budgetBytes: budget, layout: stale };
    // It read no layout, or another one: nothing is written, and it says so.
    expect(await projectionLayoutWrite(db.pool, { ...args, replaces: null })).toBe(false);
    expect(await projectionLayoutWrite(db.pool, { ...args, replaces: { ...stale, prefixSha256: 'b'.repeat(64) } })).toBe(false);
    expect(await read()).toEqual(stored);
    // It read the stored one: written, even with fewer pairs.
    const current = {
      startPair: stored.start_pair,
      endPair: stored.end_pair,
      summaries: [],
      gaps: [],
      prefixSha256: stored.prefix_sha256,
      prefixBytes: 0,
      savedCost: 0,
      savesBytes: 0,
      headSha256: null,
      usedAt: new Date(),
    };
    expect(await projectionLayoutWrite(db.pool, { ...args, replaces: current })).toBe(true);
    expect(await read()).toEqual({ start_pair: 0, end_pair: 1, prefix_sha256: 'a'.repeat(64) });
    // The projection finds it stale and lays out anew.
    expect((await project(id, budget)).cache).toMatchObject({ rewrite: 'changed', layoutSaved: true });
  });

  it('a read-only caller still gets its projection; only the layout is not stored', async () => {
    const id = await createConversation(db.pool);
    await addPairs(db.pool, id, 40, reply);
    const client = await db.pool.connect();
    try {
      await client.query('begin isolation level repeatable read read only');
      const p = await projectConversationHistory({ pool: client, conversationId: id, scope: SCOPE, budgetBytes: 8192 });
      // The caller's transaction is still usable after the refused write.
      await client.query('select 1');
      await client.query('commit');
      expect(p.cache).toMatchObject({ rewrite: 'first', layoutSaved: false });
      expect(p.bytes).toBeLessThanOrEqual(8192);
    } finally {
      client.release();
    }
    // With persistLayout off nothing is stored.
    const unsaved = await project(id, 8192, { persistLayout: false });
    expect(unsaved.cache).toMatchObject({ rewrite: 'first', layoutSaved: false });
    // Outside a transaction, a caller's client stores it.
    const other = await db.pool.connect();
    try {
      const p = await projectConversationHistory({ pool: other, conversationId: id, scope: SCOPE, budgetBytes: 8192 });
      expect(p.cache.layoutSaved).toBe(true);
    } finally {
      other.release();
    }
  });

  it('a budget that moves a little every turn (the window less the new message) keeps its layout and stores a few rows, not one a turn', async () => {
    const id = await createConversation(db.pool);
    const window = 16 * 1024;
    let rewrites = 0;
    let previous: string[] | null = null;
    for (let turn = 0; turn < 80; turn++) {
      const next = { role: 'user' as const, content: reply(turn).user };
      const budget = window - Buffer.byteLength(JSON.stringify(next));
      const p = await project(id, budget);
      expect(p.bytes).toBeLessThanOrEqual(budget);
      if (p.cache.rewrite === null) {
        expect(plain(p).slice(0, previous!.length)).toEqual(previous);
      } else {
        rewrites += 1;
      }
      previous = plain(p);
      await addPairs(db.pool, id, 1, reply, { startAt: turn });
    }
    // Laid out anew only when the history reaches the budget (as at a fixed budget, every quarter budget
    // of new exchanges): not on every turn, and one stored row, whether the budget is above or below
    // the one it is stored under.
    expect(rewrites).toBeLessThanOrEqual(16);
    const { rows } = await db.pool.query('select count(*)::int as n from sourcebound.projection_layouts where conversation_id = $1', [id]);
    expect(rows[0].n).toBe(1);
  });

  it('the layout of one budget never leaks into another scope or a budget more than 25% away', async () => {
    const id = await createConversation(db.pool);
    await addPairs(db.pool, id, 40, reply);
    const a = await project(id, 8192);
    const b = await project(id, Math.floor(8192 / 0.8) + 1);
    const c = await project(id, Math.ceil(8192 * 0.8) - 1);
    expect(a.cache.rewrite).toBe('first');
    expect(b.cache.rewrite).toBe('first');
    expect(c.cache.rewrite).toBe('first');
    await expect(projectConversationHistory({ pool: db.pool, conversationId: id, scope: 'tenant-b', budgetBytes: 8192 })).rejects.toThrow(
      /not found/,
    );
  });

  it('an unchanged layout is read at the cost of what it holds, not of the conversation', async () => {
    const id = await createConversation(db.pool);
    await addPairs(db.pool, id, 2000, reply);
    await project(id, 16 * 1024);
    await addPairs(db.pool, id, 1, reply, { startAt: 2000 });
    const reads: ReadEvent[] = [];
    const p = await project(id, 16 * 1024, { onRead: (e) => reads.push(e) });
    expect(p.cache.rewrite).toBeNull();
    // The count, the layout, one page of the pairs it spans (its gap included): nothing older, no records (no summary in it).
    const pairRows = reads.filter((r) => r.query === 'pairsPageRead').reduce((n, r) => n + r.rows, 0);
    expect(pairRows).toBe(p.pairCount - firstPair(p));
    expect(pairRows).toBeLessThanOrEqual(p.items.length + MAX_GAP_PAIRS);
    expect(reads.length).toBe(3);
  });
});
