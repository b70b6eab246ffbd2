import { describe, expect, it } from 'vitest';
import { sourceHash, sourceMessageIds } from '../../src/hash.ts';
import {
  ROOM_MIN_RATIO, messagesBytes, projectConversationHistory, toAnthropicMessages, type ConversationProjection, type ReadEvent,
} from '../../src/projection/index.ts';
import { createTestDatabase } from '../support/db.ts';
import { addPairs, createConversation } from '../support/fixtures.ts';
import { insertSummary, rangeSource } from './support.ts';
import { projectionLayoutWrite } from '../../src/db/queries/projection.ts';
import { PromptCache } from '../../bench/lib/prompt-cache.ts';

const db = await createTestDatabase();
const SCOPE = 'tenant-a';

const project = (conversationId: string, budgetBytes: number, extra: Partial<Parameters<typeof projectConversationHistory>[0]> = {}) =>
  projectConversationHistory({ pool: db.pool, conversationId, scope: SCOPE, budgetBytes, ...extra });

/** The history as JSON messages without the breakpoint (it moves to the end every turn). */
const plain = (p: ConversationProjection) => toAnthropicMessages(p, { cacheBreakpoint: false }).map((m) => JSON.stringify(m));

/** Replies of varying length, like a real conversation (deterministic). */
const reply = (i: number) => ({
  user: `question ${i}: ${'why '.repeat(1 + (i * 7) % 13)}?`,
  assistant: `answer ${i}: ${'because of the fund fees and overlap. '.repeat(3 + (i * 11) % 29)}`,
});

/** The pair the first item starts with. */
const firstPair = (p: ConversationProjection) => { const i = p.items[0]!; return i.kind === 'pair' ? i.pairIndex : i.fromPair; };

/** Verbatim user messages a projection carries (raw pairs, and the ten beside each summary). */
const users = (p: ConversationProjection) => p.items.reduce((n, i) => n + (i.kind === 'pair' ? 1 : i.userMessages.length), 0);

/** One more turn: the next projection at `budget` keeps the layout and extends `before` byte for byte. */
async function extendsOnNextTurn(id: string, budget: number, before: ConversationProjection, turn: number): Promise<ConversationProjection> {
  await addPairs(db.pool, id, 1, reply, { startAt: turn });
  const next = await project(id, budget);
  expect(next.cache.rewrite).toBeNull();
  expect(plain(next).slice(0, plain(before).length)).toEqual(plain(before));
  return next;
}

/** Every summary item binds its current source now: ids and hash recomputed from the stored pairs. */
async function checkBindings(conversationId: string, p: ConversationProjection): Promise<void> {
  for (const item of p.items) {
    if (item.kind !== 'summary') continue;
    const source = await rangeSource(db.pool, conversationId, item.fromPair, item.toPair);
    const { rows } = await db.pool.query('select source_message_ids::text[] as ids, source_hash from sourcebound.conversation_summaries where id = $1', [item.recordId]);
    expect(rows[0].ids).toEqual(sourceMessageIds(source));
    expect(rows[0].source_hash).toBe(sourceHash(source));
    // Never inside the newest 20.
    expect(item.toPair).toBeLessThan(p.pairCount - 20);
  }
}

describe('cache-stable projection (default layout)', () => {
  it.each([16 * 1024, 32 * 1024, 64 * 1024])('over 200 turns at %i bytes: only appends between rewrites, rewrites bounded, budget never exceeded', async (budget) => {
    const id = await createConversation(db.pool);
    let previous: string[] | null = null;
    let rewrites = 0;
    let keptHead = 0;
    let appended = 0;
    let appendedBytes = 0;
    for (let turn = 0; turn < 200; turn++) {
      await addPairs(db.pool, id, 1, reply, { startAt: turn });
      // Summaries arrive as a worker would make them: range k once 10k+29 pairs exist, a few turns late.
      const k = Math.floor((turn - 33) / 10);
      if (turn >= 33 && (turn - 33) % 10 === 0) await insertSummary(db.pool, { conversationId: id, fromPair: k * 10, summary: `Fees and overlap of pairs ${k * 10}-${k * 10 + 9} were compared.` });
      const p = await project(id, budget);
      expect(p.bytes).toBeLessThanOrEqual(budget);
      expect(p.bytes).toBe(messagesBytes(toAnthropicMessages(p)));
      expect(p.problems).toEqual([]);
      await checkBindings(id, p);
      const now = plain(p);
      if (p.cache.rewrite === null) {
        // Between rewrites the history only grows at its end: the previous one is a prefix, byte for byte.
        expect(previous).not.toBeNull();
        expect(now.slice(0, previous!.length)).toEqual(previous);
        expect(now.length).toBe(previous!.length + 2);
        appended += 1;
      } else {
        rewrites += 1;
        // How much of the previous history the rewrite kept byte for byte (read from the cache).
        let same = 0;
        while (previous !== null && same < Math.min(previous.length, now.length) && previous[same] === now[same]) same += 1;
        if (same > 0) keptHead += 1;
        if (process.env.DEBUG_STABLE) console.log(turn, p.cache.rewrite, p.bytes, p.items.length, p.omitted[0]?.toPair, same);
        expect(p.cache.layoutSaved).toBe(true);
      }
      appendedBytes += Buffer.byteLength(JSON.stringify(toAnthropicMessages({ items: p.items.slice(-1), omitted: [] }, { cacheBreakpoint: false })));
      previous = now;
    }
    // A rewrite leaves about half the budget free: the next is half a budget of new exchanges away
    // (plus one rewrite when swapping in ready summaries pays for itself).
    const bound = Math.ceil(appendedBytes / (budget * ROOM_MIN_RATIO)) + 3;
    expect(rewrites).toBeLessThanOrEqual(bound);
    expect(appended).toBeGreaterThanOrEqual(200 * 0.85);
    // Most rewrites keep the head of the history they replace, so they write only what follows it.
    expect(keptHead).toBeGreaterThanOrEqual((rewrites - 1) / 2);
  }, 120_000);

  it('keeps the whole history while it fits, then keeps its cached head, leaves out the middle and pays no more than sending everything', async () => {
    // An app that asks before every request: each request's end is a cache entry (its breakpoint).
    const id = await createConversation(db.pool);
    const budget = 8 * 1024;
    const cache = new PromptCache();
    const wholeCache = new PromptCache();
    const first = await project(id, budget);
    expect(first.cache).toMatchObject({ mode: 'stable', rewrite: 'first', layoutSaved: true });
    let before = first;
    let p = first;
    let turn = 0;
    let priced = cache.price(toAnthropicMessages(p));
    let whole = wholeCache.price(toAnthropicMessages(first));
    while (p.cache.rewrite !== 'budget' || turn < 2) {
      await addPairs(db.pool, id, 1, reply, { startAt: turn++ });
      before = p;
      p = await project(id, budget);
      expect(p.bytes).toBeLessThanOrEqual(budget);
      priced = cache.price(toAnthropicMessages(p));
      whole = wholeCache.price(toAnthropicMessages(await project(id, 10_000_000, { layout: 'newest-first', persistLayout: false })));
    }
    expect(before.omitted).toEqual([]);
    // The head of the previous history stays byte for byte and is read from the cache, then a gap, then the newest pairs.
    expect(p.omitted).toHaveLength(1);
    const gap = p.omitted[0]!;
    expect(gap.fromPair).toBeGreaterThan(0);
    expect(gap.toPair).toBeLessThan(p.pairCount - 1);
    const head = p.items.filter((i) => i.kind === 'pair' && i.pairIndex < gap.fromPair);
    expect(head.length).toBeGreaterThan(0);
    expect(plain(p).slice(0, 2 * head.length)).toEqual(plain(before).slice(0, 2 * head.length));
    const headBytes = plain(p).slice(0, 2 * head.length).reduce((n, m) => n + Buffer.byteLength(m), 0);
    expect(priced.read).toBeGreaterThanOrEqual(headBytes);
    expect(p.items.at(-1)).toMatchObject({ kind: 'pair', pairIndex: p.pairCount - 1 });
    // Nothing saved yet: the rewrite reads the longest head the cache holds and writes no more than the
    // newest exchange, so it costs no more than the whole history's request (which writes that exchange too).
    expect(priced.cost).toBeLessThanOrEqual(whole.cost);
    expect(p.bytes).toBeLessThan(whole.bytes);
    // The note about omitted exchanges is fixed until the next rewrite.
    const next = await extendsOnNextTurn(id, budget, p, turn);
    expect(next.omitted).toEqual(p.omitted);
  });

  it('a budget rewrite keeps no head the cache does not hold: pairs written at once have no entry before their end', async () => {
    // Ten pairs written before the first request: the only cache entries are at the ends of the requests
    // since (pairs 9, 10, ...), all past any head that leaves room for the newest exchange. Keeping pairs
    // 0-1 would write them again at 1.25x for one more user message; the newest items cost less.
    const id = await createConversation(db.pool);
    await addPairs(db.pool, id, 10, reply);
    const budget = 8 * 1024;
    const cache = new PromptCache();
    let p = await project(id, budget);
    cache.price(toAnthropicMessages(p));
    let turn = 10;
    let priced;
    do {
      await addPairs(db.pool, id, 1, reply, { startAt: turn++ });
      p = await project(id, budget);
      priced = cache.price(toAnthropicMessages(p));
    } while (p.cache.rewrite !== 'budget');
    expect(priced.read).toBe(0);
    // So the rewrite lays out the newest items alone: nothing before them is sent, and the note says so.
    expect(p.omitted).toEqual([{ fromPair: 0, toPair: firstPair(p) - 1, reason: 'budget' }]);
    expect(p.items.at(-1)).toMatchObject({ kind: 'pair', pairIndex: p.pairCount - 1 });
  });

  it('a conversation that has just outgrown the budget keeps its cached head; a summary block comes once the layout has saved its price', async () => {
    const id = await createConversation(db.pool);
    const budget = 16 * 1024;
    const rewrites: ConversationProjection[] = [];
    for (let turn = 0; turn < 90; turn++) {
      await addPairs(db.pool, id, 1, reply, { startAt: turn });
      if (turn >= 30 && turn % 10 === 0) await insertSummary(db.pool, { conversationId: id, fromPair: turn - 30, summary: `Fees of pairs ${turn - 30}-${turn - 21}.` });
      const p = await project(id, budget);
      expect(p.bytes).toBeLessThanOrEqual(budget);
      await checkBindings(id, p);
      if (p.cache.rewrite === 'budget') rewrites.push(p);
    }
    // The first budget rewrite: nothing saved yet, so the head of the whole history stays (read from the cache).
    expect(rewrites[0]!.items[0]).toMatchObject({ kind: 'pair', pairIndex: 0 });
    expect(rewrites[0]!.omitted).toHaveLength(1);
    // Later, with summaries ready and reads saved, a block of summaries (ten user messages each) replaces it.
    const block = rewrites.find((p) => p.items[0]!.kind === 'summary');
    expect(block).toBeDefined();
    const before = rewrites[rewrites.indexOf(block!) - 1]!;
    expect(users(block!)).toBeGreaterThan(users(before));
  }, 60_000);

  it('a budget rewrite keeps the cached head rather than writing everything again when summaries would make the whole conversation fit', async () => {
    // An app that asks before every request; the history is about to reach the budget when the
    // summaries of pairs 0-19 become usable, so they wait (kept raw for the cache). With them the whole
    // conversation would fit the low-water mark, but it starts with them: every byte written again at
    // 1.25x for a projection that has saved nothing yet. The cached head is kept instead.
    const id = await createConversation(db.pool);
    const budget = await (async () => {
      const probe = await createConversation(db.pool);
      await addPairs(db.pool, probe, 41, reply);
      return (await project(probe, 10_000_000, { persistLayout: false })).bytes - 200;
    })();
    const cache = new PromptCache();
    let p = await project(id, budget);
    cache.price(toAnthropicMessages(p));
    let turn = 0;
    let priced;
    do {
      await addPairs(db.pool, id, 1, reply, { startAt: turn++ });
      if (turn === 40) {
        await insertSummary(db.pool, { conversationId: id, fromPair: 0, summary: 'Fees compared.' });
        await insertSummary(db.pool, { conversationId: id, fromPair: 10, summary: 'Overlap compared.' });
      }
      p = await project(id, budget);
      priced = cache.price(toAnthropicMessages(p));
      if (turn === 40) expect(p.summaryNotUsed.filter((n) => n.reason === 'kept_raw_for_cache')).toHaveLength(2);
    } while (p.cache.rewrite !== 'budget' || turn <= 40);
    // What the whole conversation with the summaries would cost, written anew.
    const whole = await project(id, budget, { layout: 'newest-first' });
    expect(whole.omitted).toEqual([]);
    expect(whole.bytes).toBeLessThanOrEqual(p.cache.lowWaterBytes);
    // The rewrite read its head from the cache and costs less than writing the whole again.
    expect(priced.read).toBeGreaterThan(p.bytes / 2);
    expect(priced.cost).toBeLessThan(whole.bytes * 1.25);
    expect(p.items[0]).toMatchObject({ kind: 'pair', pairIndex: 0 });
    expect(p.bytes).toBeLessThanOrEqual(budget);
  });

  it('a summary that became usable inside the kept head is reported as kept raw for the cache', async () => {
    // An app that asks before every request, so the ends of its requests are cache entries.
    const id = await createConversation(db.pool);
    const budget = 32 * 1024;
    for (let turn = 0; turn < 40; turn++) {
      await addPairs(db.pool, id, 1, reply, { startAt: turn });
      expect((await project(id, budget)).omitted).toEqual([]);
    }
    const recordId = await insertSummary(db.pool, { conversationId: id, fromPair: 0, summary: 'Fees compared.' });
    let p = await project(id, budget);
    let turn = 40;
    while (p.cache.rewrite !== 'budget') {
      await addPairs(db.pool, id, 1, reply, { startAt: turn++ });
      p = await project(id, budget);
    }
    // Nothing saved yet: the head stays raw from pair 0 (read from the cache), and range 0-9 says why.
    expect(p.items[0]).toMatchObject({ kind: 'pair', pairIndex: 0 });
    expect(p.items.slice(0, 10).every((i) => i.kind === 'pair')).toBe(true);
    expect(p.summaryNotUsed).toContainEqual({ fromPair: 0, toPair: 9, reason: 'kept_raw_for_cache', recordId });
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

  it('a summary in the layout whose source changes is dropped at once (Case B), and the originals come back', async () => {
    const id = await createConversation(db.pool);
    const written = await addPairs(db.pool, id, 45, reply);
    const recordId = await insertSummary(db.pool, { conversationId: id, fromPair: 0, summary: 'Fees compared.' });
    const before = await project(id, 1_000_000);
    expect(before.items[0]).toMatchObject({ kind: 'summary', recordId });
    await extendsOnNextTurn(id, 1_000_000, before, 45);
    await db.pool.query('update sourcebound.messages set content = $2 where id = $1', [written[3]!.assistantMessageId, 'a different answer']);
    const after = await project(id, 1_000_000);
    expect(after.cache.rewrite).toBe('changed');
    expect(after.items.some((i) => i.kind === 'summary')).toBe(false);
    expect(after.summaryNotUsed[0]).toMatchObject({ fromPair: 0, reason: 'binding_changed', recordId });
    await checkBindings(id, after);
  });

  it('a summary that becomes ready waits for the next rewrite unless swapping it in pays for itself in the turns left, with savings already made', async () => {
    const id = await createConversation(db.pool);
    await addPairs(db.pool, id, 45, reply);
    // The same conversation at two budgets: one its history almost fills (a forced rewrite is a few turns
    // away), one it will not reach for a thousand turns.
    const whole = await project(id, 1_000_000);
    const tight = whole.bytes + 3000;
    expect((await project(id, tight)).cache.rewrite).toBe('first');
    expect(whole.cache.rewrite).toBe('first');
    await addPairs(db.pool, id, 1, reply, { startAt: 45 });
    const recordId = await insertSummary(db.pool, { conversationId: id, fromPair: 0, summary: 'Fees compared.' });
    // A few turns of smaller reads do not pay for writing the history again: it waits.
    const waited = await project(id, tight);
    expect(waited.cache.rewrite).toBeNull();
    expect(waited.summaryNotUsed.find((s) => s.fromPair === 0)).toEqual({ fromPair: 0, toPair: 9, reason: 'kept_raw_for_cache', recordId });
    // Hundreds of expected turns of smaller reads would pay for it, but the projection has sent the whole
    // history so far and saved nothing against it: if the conversation ended now, the swap would have
    // cost more than not compacting. It waits too.
    const unpaid = await project(id, 1_000_000);
    expect(unpaid.cache.rewrite).toBeNull();
    expect(unpaid.summaryNotUsed.find((s) => s.fromPair === 0)).toEqual({ fromPair: 0, toPair: 9, reason: 'kept_raw_for_cache', recordId });
    // With the swap's price saved (as by a layout that left part of the history out for many turns), it is swapped in at once.
    const ledger = 'update sourcebound.projection_layouts set saved_cost = $2 where conversation_id = $1 and budget_bytes = 1000000';
    await db.pool.query(ledger, [id, 1000]);
    expect((await project(id, 1_000_000)).cache.rewrite).toBeNull();
    await db.pool.query(ledger, [id, 100_000]);
    const swapped = await project(id, 1_000_000);
    expect(swapped.cache.rewrite).toBe('summaries');
    expect(swapped.items[0]).toMatchObject({ kind: 'summary', fromPair: 0, recordId });
    expect(swapped.bytes).toBeLessThan(waited.bytes);
    // The new layout carries the ledger on: less the swap's price, and it now leaves the range's replies out.
    const { rows: [row] } = await db.pool.query('select saved_cost, saves_bytes from sourcebound.projection_layouts where conversation_id = $1 and budget_bytes = 1000000', [id]);
    expect(row.saved_cost).toBeGreaterThan(0);
    expect(row.saved_cost).toBeLessThan(100_000);
    expect(Number(row.saves_bytes)).toBe(unpaid.bytes - swapped.bytes);
    // The ranges still shown raw say why, as before the swap.
    expect(swapped.summaryNotUsed).toEqual([
      { fromPair: 10, toPair: 19, reason: 'not_yet_summarized' },
      { fromPair: 20, toPair: 29, reason: 'not_yet_summarized' },
      { fromPair: 30, toPair: 39, reason: 'not_yet_summarized' },
      { fromPair: 40, toPair: 45, reason: 'incomplete_range' },
    ]);
    await checkBindings(id, swapped);
    // And the next turn extends each layout.
    await extendsOnNextTurn(id, tight, waited, 46);
    const next = await project(id, 1_000_000);
    expect(next.cache.rewrite).toBeNull();
    expect(plain(next).slice(0, plain(swapped).length)).toEqual(plain(swapped));
  });

  it('a rewrite stores what its layout leaves out of the whole history (the ledger), never more than it does', async () => {
    const id = await createConversation(db.pool);
    const budget = 16 * 1024;
    let checked = 0;
    for (let turn = 0; turn < 80; turn++) {
      await addPairs(db.pool, id, 1, reply, { startAt: turn });
      const reads: ReadEvent[] = [];
      const p = await project(id, budget, { onRead: (e) => reads.push(e) });
      // The whole history's size is read only when there is no layout to extend (here the first call):
      // a budget rewrite knows it from the layout it replaces and its ledger (a read of every pair's row saved).
      expect(reads.some((e) => e.query === 'projectionHistoryBytesRead')).toBe(turn === 0);
      if (p.cache.rewrite !== 'budget' || p.omitted.length === 0) continue;
      // The whole history now (no summaries exist: the newest-first fill of a huge budget is all of it, raw).
      const whole = await project(id, 10_000_000, { layout: 'newest-first', persistLayout: false });
      expect(whole.omitted).toEqual([]);
      const { rows: [row] } = await db.pool.query('select saves_bytes, end_pair from sourcebound.projection_layouts where conversation_id = $1 and budget_bytes = $2', [id, budget]);
      expect(row.end_pair).toBe(p.pairCount);
      // A lower bound (texts' UTF-8 lengths; JSON only adds), here exact: the texts need no escaping.
      expect(Number(row.saves_bytes)).toBeLessThanOrEqual(whole.bytes - p.bytes);
      expect(Number(row.saves_bytes)).toBeGreaterThanOrEqual(whole.bytes - p.bytes - 200);
      checked += 1;
    }
    expect(checked).toBeGreaterThan(1);
  }, 60_000);

  it('keeps a summary block at the start, leaves the pairs between it and the raw tail out, and says so there', async () => {
    const id = await createConversation(db.pool);
    await addPairs(db.pool, id, 80, reply);
    for (let k = 0; k < 6; k++) await insertSummary(db.pool, { conversationId: id, fromPair: k * 10, summary: `Fees and overlap ${k}.` });
    const budget = 16 * 1024;
    const p = await project(id, budget);
    expect(p.bytes).toBeLessThanOrEqual(budget);
    const kinds = p.items.map((i) => i.kind);
    const firstPair = kinds.indexOf('pair');
    expect(firstPair).toBeGreaterThan(0);
    expect(kinds.slice(0, firstPair).every((k) => k === 'summary')).toBe(true);
    expect(kinds.slice(firstPair).every((k) => k === 'pair')).toBe(true);
    const block = p.items.slice(0, firstPair) as { fromPair: number; toPair: number }[];
    const tailStart = (p.items[firstPair] as { pairIndex: number }).pairIndex;
    // The block is the newest summarized ranges, consecutive, ending at range 50-59.
    expect(block.at(-1)!.toPair).toBe(59);
    expect(p.omitted).toEqual([
      ...(block[0]!.fromPair > 0 ? [{ fromPair: 0, toPair: block[0]!.fromPair - 1, reason: 'budget' }] : []),
      { fromPair: 60, toPair: tailStart - 1, reason: 'budget' },
    ]);
    const messages = toAnthropicMessages(p);
    const gapTurn = messages[2 * firstPair]!.content as { text: string }[];
    expect(gapTurn[0]!.text).toBe(`[sourcebound note: ${tailStart - 60} exchanges (pairs 60-${tailStart - 1}) were left out of this request here, between the turn above and this one.]`);
    // Two breakpoints: after the block (a rewrite of the newer part reads it from the cache) and at the end.
    const marked = messages.flatMap((m, i) => ((m.content as { cache_control?: unknown }[]).some((b) => b.cache_control) ? [i] : []));
    expect(marked).toEqual([2 * firstPair - 1, messages.length - 1]);
    await checkBindings(id, p);
    // Turns append after the tail; the block and the note stay byte for byte.
    await extendsOnNextTurn(id, budget, p, 80);
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
    for (const pair of written.slice(10, 20)) await db.pool.query(`update sourcebound.runs set status = 'failed' where id = $1`, [pair.runId]);
    const rewritten = await project(id, budget);
    expect(rewritten.pairCount).toBe(90);
    expect(rewritten.cache).toMatchObject({ rewrite: 'changed', layoutSaved: true });
    const { rows } = await db.pool.query('select end_pair from sourcebound.projection_layouts where conversation_id = $1 and budget_bytes = $2', [id, budget]);
    expect(rows[0].end_pair).toBe(90);
    // Until the count passes the old 100, every turn used to be a rewrite from a start that moved.
    let before = rewritten;
    for (let turn = 100; turn < 105; turn++) before = await extendsOnNextTurn(id, budget, before, turn);
  });

  it('a stored layout that laid nothing out is never kept: a pair that became the newest after a shift is projected', async () => {
    const id = await createConversation(db.pool);
    const written = await addPairs(db.pool, id, 5, reply);
    // The newest pair alone is over the budget: the stored layout holds no item and covers pairs 0-5.
    await addPairs(db.pool, id, 1, () => ({ user: 'paste this log', assistant: 'x'.repeat(10_000) }));
    const first = await project(id, 4000);
    expect(first.items).toEqual([]);
    // A small exchange is added and an old one stops being eligible: six pairs again, the small one now pair 5.
    await addPairs(db.pool, id, 1, () => ({ user: 'what is 2+2?', assistant: '4' }));
    await db.pool.query(`update sourcebound.runs set status = 'failed' where id = $1`, [written[0]!.runId]);
    const p = await project(id, 4000);
    const newestFirst = await project(id, 4000, { layout: 'newest-first' });
    expect(p.pairCount).toBe(6);
    expect(p.items.map((it) => (it.kind === 'pair' ? it.userText : null))).toEqual(['what is 2+2?']);
    expect(p.items).toEqual(newestFirst.items);
    expect(p.cache.rewrite).toBe('budget');
  });

  it('a rewrite stores its layout only over the layout it read: a concurrent rewrite is never undone', async () => {
    const id = await createConversation(db.pool);
    await addPairs(db.pool, id, 40, reply);
    const budget = 8192;
    // What a call that started before the current layout was stored would write.
    const stale = { startPair: 0, endPair: 1, summaries: [], gaps: [], prefixSha256: 'a'.repeat(64), prefixBytes: 10, savedCost: 0, savesBytes: 0, headSha256: null };
    const first = await project(id, budget);
    expect(first.cache.layoutSaved).toBe(true);
    const read = async () => (await db.pool.query('select start_pair, end_pair, prefix_sha256 from sourcebound.projection_layouts where conversation_id = $1 and budget_bytes = $2', [id, budget])).rows[0];
    const stored = await read();
    const args = { conversationId: id, scope: SCOPE, budgetBytes: budget, layout: stale };
    // It read no layout, or another one: nothing is written, and it says so.
    expect(await projectionLayoutWrite(db.pool, { ...args, replaces: null })).toBe(false);
    expect(await projectionLayoutWrite(db.pool, { ...args, replaces: { ...stale, prefixSha256: 'b'.repeat(64) } })).toBe(false);
    expect(await read()).toEqual(stored);
    // It read the stored one: written, even with fewer pairs.
    const current = { startPair: stored.start_pair, endPair: stored.end_pair, summaries: [], gaps: [], prefixSha256: stored.prefix_sha256, prefixBytes: 0, savedCost: 0, savesBytes: 0, headSha256: null };
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
    // With persistLayout off nothing is stored, so the whole history's size (the ledger's, a read of every pair) is not read either.
    const reads: ReadEvent[] = [];
    const unsaved = await project(id, 8192, { persistLayout: false, onRead: (e) => reads.push(e) });
    expect(unsaved.cache).toMatchObject({ rewrite: 'first', layoutSaved: false });
    expect(reads.map((e) => e.query)).not.toContain('projectionHistoryBytesRead');
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
    // Laid out anew only when the history reaches the budget (as at a fixed budget): not on every turn,
    // and one stored row, whether the budget is above or below the one it is stored under.
    expect(rewrites).toBeLessThanOrEqual(10);
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
    await expect(projectConversationHistory({ pool: db.pool, conversationId: id, scope: 'tenant-b', budgetBytes: 8192 })).rejects.toThrow(/not found/);
  });

  it('an unchanged layout is read at the cost of what it holds, not of the conversation', async () => {
    const id = await createConversation(db.pool);
    await addPairs(db.pool, id, 2000, reply);
    await project(id, 16 * 1024);
    await addPairs(db.pool, id, 1, reply, { startAt: 2000 });
    const reads: ReadEvent[] = [];
    const p = await project(id, 16 * 1024, { onRead: (e) => reads.push(e) });
    expect(p.cache.rewrite).toBeNull();
    const pairRows = reads.filter((r) => r.query === 'pairsPageRead').reduce((n, r) => n + r.rows, 0);
    expect(pairRows).toBe(p.items.length);
    expect(reads.length).toBe(4);
  });
});
