import { createHash } from 'node:crypto';
import {
  completedSummariesBeforeRead, pairsPageRead, projectionLayoutRead, summariesForRangesRead,
  type ProjectionLayoutRow, type ProjectionPairRow, type ProjectionSummaryRow, type Queryable, type ReadObserver,
} from '../db/queries/projection.ts';
import { RANGE_SIZE } from '../plan.ts';
import { firstPairOf, itemBytes, messagesBytes, toAnthropicMessages } from './anthropic.ts';
import { currentIds, recordHashCheck, recordIdCheck, sameIds } from './binding.ts';
import { BLOCK_KEEP_RATIO, TAIL_RATIO, lowWaterBytes, rewritePays } from './cache.ts';
import type { OmittedSpan, ProjectionCacheInfo, ProjectionItem, SummaryItem, SummaryNotUsed } from './types.ts';
import {
  contiguous, hasTexts, judgeRange, pairItem, plannableFor, rawBytes, summaryItem, walk, type TextPair, type WalkResult,
} from './walk.ts';

/**
 * The cache-stable layout (DESIGN.md "Cache stability"; README "Prompt caching").
 *
 * Prompt caching bills the part of a request that repeats an earlier
 * request's prefix at a tenth of the price and a changed part at 1.25x, so the
 * history must not move under the cache every turn, as a newest-first fill
 * does once the budget is full. The rule:
 *
 * - A **layout** says where the history starts, which ranges it shows as
 *   summaries, and which spans it leaves out. It is stored per conversation
 *   and budget (sourcebound.projection_layouts) with the SHA-256 of the
 *   history it produced. Only rewrites write it.
 * - **Between rewrites** the history is the layout rebuilt from the current
 *   rows with the pairs added since appended raw at its end: each request's
 *   history extends the previous one's. It is used only while every summary
 *   in it still binds now (binding.ts, plannable, smaller than its
 *   originals), the rebuilt prefix hashes to the stored SHA-256 (nothing in
 *   it changed) and the whole still fits the budget.
 * - A **rewrite** (no layout yet, the budget reached, something in the prefix
 *   changed) happens at once. If the whole conversation fits the budget it is
 *   all projected (newest-first walk, walk.ts). Otherwise the history is laid
 *   out down to the low-water mark (cache.ts), leaving ROOM of the budget for
 *   the exchanges to come: the newest pairs raw (TAIL), and before them the
 *   summary block: consecutive usable summaries of older ranges, each beside
 *   its ten user messages verbatim, the newest ones first. Pairs between the
 *   block and the tail are left out and a note says so where they were. The
 *   block keeps its start while it grows at its end; when it would outgrow
 *   its share it is rebuilt down to half of it. The adapter puts a cache
 *   breakpoint after the block, so a rewrite of the newer part still reads
 *   the block from the cache. With no usable summary the history is the
 *   newest pairs down to the low-water mark.
 * - Summaries that become usable for ranges the layout shows raw wait for the
 *   next rewrite (`kept_raw_for_cache`) unless swapping them in now pays for
 *   itself (cache.ts rewritePays), like the seed's 4 KiB rule.
 * - The stored layout is a hint, never a source of truth: a missing or stale
 *   one only means a rewrite.
 */

export interface StableArgs {
  conversationId: string;
  scope: string;
  count: number;
  budgetBytes: number;
  onRead: ReadObserver | undefined;
}

export interface StableResult {
  walk: WalkResult;
  rewrite: ProjectionCacheInfo['rewrite'];
  /** The low-water mark a rewrite used (null when the layout was kept). */
  lowWater?: number;
  /** The layout to store (a rewrite happened and the projection is sound), else null. */
  save: ProjectionLayoutRow | null;
}

// A lower bound on what a laid-out pair costs in any item (a summarized pair:
// its user message block, a tenth of a label): a stored layout holding more
// pairs than the budget could at this price cannot fit, so it is not read.
const MIN_BYTES_PER_PAIR = 30;
// Summary ranges a rewrite considers for the block, newest first.
const MAX_BLOCK_RANGES = 64;

export async function stableProjection(db: Queryable, args: StableArgs): Promise<StableResult> {
  const { conversationId, scope, count, budgetBytes, onRead } = args;
  const stored = await projectionLayoutRead(db, { conversationId, scope, budgetBytes }, onRead);
  if (stored === null) return rewrite(db, args, 'first', null);
  if (!wellFormed(stored, count)) return rewrite(db, args, 'changed', null);
  const laidOut = count - stored.startPair - stored.gaps.reduce((n, g) => n + g.toPair - g.fromPair + 1, 0);
  if (laidOut * MIN_BYTES_PER_PAIR > budgetBytes) return rewrite(db, args, 'budget', stored);
  const kept = await keep(db, args, stored);
  if (kept.kind !== 'kept') return rewrite(db, args, kept.kind, stored);
  return kept.result;
}

function wellFormed(l: ProjectionLayoutRow, count: number): boolean {
  if (!(0 <= l.startPair && l.startPair <= l.endPair && l.endPair <= count)) return false;
  let at = l.startPair;
  for (const g of l.gaps) {
    if (!(at <= g.fromPair && g.fromPair <= g.toPair && g.toPair < l.endPair)) return false;
    at = g.toPair + 1;
  }
  return true;
}

type Kept = { kind: 'kept'; result: StableResult } | { kind: 'budget' | 'changed' };

/** The stored layout with the new pairs appended, if it still holds and fits; maybe with ready summaries swapped in. */
async function keep(db: Queryable, args: StableArgs, stored: ProjectionLayoutRow): Promise<Kept> {
  const { conversationId, scope, count, budgetBytes, onRead } = args;
  const { startPair, endPair, gaps } = stored;
  // The laid-out spans (gaps skipped) and the pairs added since.
  const spans: [number, number][] = [];
  let at = startPair;
  for (const g of gaps) {
    if (g.fromPair > at) spans.push([at, g.fromPair - 1]);
    at = g.toPair + 1;
  }
  if (count > at) spans.push([at, count - 1]);
  const rows = new Map<number, ProjectionPairRow>();
  const records: ProjectionSummaryRow[] = [];
  for (const [from, to] of spans) {
    const page = await pairsPageRead(db, { conversationId, scope, fromPair: from, toPair: to, maxTextBytes: budgetBytes }, onRead);
    if (!contiguous(page, from, to)) return { kind: 'changed' };
    for (const row of page) rows.set(row.pairIndex, row);
    records.push(...await summariesForRangesRead(db, { conversationId, scope, fromPair: from, toPair: to }, onRead));
  }
  const texts = textsLoader(db, args, rows);

  // The prefix, rebuilt from the current rows exactly as the layout says.
  const summaryAt = new Map(stored.summaries.map((s) => [s.fromPair, s.recordId]));
  const gapAt = new Map(gaps.map((g) => [g.fromPair, g.toPair]));
  const items: ProjectionItem[] = [];
  for (let i = startPair; i < endPair;) {
    const gapEnd = gapAt.get(i);
    if (gapEnd !== undefined) {
      i = gapEnd + 1;
      continue;
    }
    const recordId = summaryAt.get(i);
    if (recordId !== undefined) {
      const record = records.find((r) => r.id === recordId && r.fromPair === i && r.status === 'completed');
      const item = record === undefined ? null : await usableSummary(record, i, count, texts);
      if (item === null) return { kind: 'changed' };
      items.push(item);
      i += RANGE_SIZE;
      continue;
    }
    const row = rows.get(i)!;
    if (!hasTexts(row)) return { kind: 'changed' };
    items.push(pairItem(row));
    i += 1;
  }
  const omitted = spansOf(startPair, gaps);
  if (layoutHash(items, omitted) !== stored.prefixSha256) return { kind: 'changed' };

  // The pairs added since, raw at the end.
  for (let i = endPair; i < count; i++) {
    const row = rows.get(i)!;
    if (!hasTexts(row)) return { kind: 'budget' };
    items.push(pairItem(row));
  }
  const bytes = messagesBytes(toAnthropicMessages({ items, omitted }));
  if (bytes > budgetBytes) return { kind: 'budget' };

  // Ranges shown raw after the last gap: why, and the summaries that became usable since the layout was made.
  const notUsed: SummaryNotUsed[] = [];
  const swaps = new Map<number, SummaryItem>();
  let saves = 0;
  const rawFrom = gaps.length > 0 ? gaps.at(-1)!.toPair + 1 : startPair;
  for (let fromPair = Math.ceil(rawFrom / RANGE_SIZE) * RANGE_SIZE; fromPair < count; fromPair += RANGE_SIZE) {
    if (summaryAt.has(fromPair)) continue;
    const toPair = Math.min(fromPair + RANGE_SIZE - 1, count - 1);
    const range = Array.from({ length: toPair - fromPair + 1 }, (_, j) => rows.get(fromPair + j)!);
    const v = await judgeRange({ fromPair, pairs: range, records: records.filter((r) => r.fromPair === fromPair), count, texts: () => texts(fromPair) });
    if (v === 'changed') return { kind: 'changed' };
    if (!v.usable) {
      notUsed.push({ fromPair, toPair, reason: v.reason, ...(v.recordId === undefined ? {} : { recordId: v.recordId }) });
      continue;
    }
    const item = summaryItem(v.record, v.pairs);
    const saving = rawBytes(v.pairs) - itemBytes(item);
    if (saving <= 0) {
      notUsed.push({ fromPair, toPair, reason: 'larger_than_original', recordId: v.record.id });
      continue;
    }
    swaps.set(fromPair, item);
    saves += saving;
    notUsed.push({ fromPair, toPair, reason: 'kept_raw_for_cache', recordId: v.record.id });
  }
  const rawPairs = items.filter((it) => it.kind === 'pair').length;
  if (swaps.size > 0 && rewritePays({
    currentBytes: bytes,
    rewrittenBytes: bytes - saves,
    budgetBytes,
    bytesPerTurn: rawPairs === 0 ? bytes : items.reduce((n, it) => n + (it.kind === 'pair' ? itemBytes(it) : 0), 0) / rawPairs,
    // A layout that has lasted few turns may belong to a conversation that ends soon.
    turnsSoFar: count - endPair + 1,
  })) {
    const swapped: ProjectionItem[] = [];
    for (let j = 0; j < items.length; j++) {
      const it = items[j]!;
      const swap = it.kind === 'pair' ? swaps.get(it.pairIndex) : undefined;
      if (swap === undefined) {
        swapped.push(it);
        continue;
      }
      swapped.push(swap);
      j += RANGE_SIZE - 1;
    }
    const result: WalkResult = { items: swapped, omitted, summaryNotUsed: [], problems: [] };
    return { kind: 'kept', result: { walk: result, rewrite: 'summaries', save: layoutOf(result, count) } };
  }
  const result: WalkResult = { items, omitted, summaryNotUsed: notUsed, problems: [] };
  return { kind: 'kept', result: { walk: result, rewrite: null, save: null } };
}

/**
 * Lays the history out anew: all of it if it fits the budget; else the summary
 * block and the newest pairs down to the low-water mark (or, with no usable
 * summary, the newest pairs alone).
 */
async function rewrite(
  db: Queryable, args: StableArgs, why: NonNullable<ProjectionCacheInfo['rewrite']>, previous: ProjectionLayoutRow | null,
): Promise<StableResult> {
  const { conversationId, scope, count, budgetBytes, onRead } = args;
  const base = { conversationId, scope, count, budgetBytes, onRead };
  const whole = await walk(db, { ...base, fillTo: budgetBytes });
  const raw = whole.items.filter((it) => it.kind === 'pair');
  const low = lowWaterBytes(budgetBytes, raw.length === 0 ? Number.NaN : raw.reduce((n, it) => n + itemBytes(it), 0) / raw.length);
  // The whole conversation, when it fits: at a budget rewrite only when it fits the low-water mark,
  // or the next rewrite would be a turn or two away.
  const wholeFits = whole.omitted.length === 0 && (why !== 'budget' || messagesBytes(toAnthropicMessages(whole)) <= low);
  if (wholeFits || whole.problems.length > 0) {
    return { walk: whole, rewrite: why, save: whole.problems.length === 0 ? layoutOf(whole, count) : null, lowWater: low };
  }

  const tail = await walk(db, { ...base, fillTo: Math.floor(budgetBytes * TAIL_RATIO) });
  const tailStart = tail.items.length === 0 ? count : firstPairOf(tail.items[0]!);
  const blockMax = low - messagesBytes(toAnthropicMessages(tail));
  const block = tail.problems.length > 0 ? [] : await summaryBlock(db, args, {
    beforePair: tailStart, blockMax, anchor: previous?.summaries.length ? previous.summaries[0]!.fromPair : null,
  });

  let result: WalkResult;
  if (block.length === 0) {
    result = await walk(db, { ...base, fillTo: low });
  } else {
    // The rest of the low-water mark goes to more of the newest pairs, back towards the block.
    const blockBytes = block.reduce((n, it) => n + itemBytes(it), 0);
    const blockEnd = block.at(-1)!.toPair + 1;
    const extended = await walk(db, { ...base, fillTo: Math.max(low - blockBytes, Math.floor(budgetBytes * TAIL_RATIO)) });
    // As many of them as it takes to carry as many of the user's messages verbatim as a newest-first
    // fill of the whole budget would (today's projection), never fewer than the minimal tail.
    const blockUsers = block.length * RANGE_SIZE;
    const target = Math.max(userMessages(whole.items) - blockUsers, userMessages(tail.items));
    const newer = trimToUsers((extended.problems.length === 0 ? extended : tail).items.filter((it) => firstPairOf(it) >= blockEnd), target);
    const newerStart = newer.length === 0 ? count : firstPairOf(newer[0]!);
    const items: ProjectionItem[] = [...block, ...newer];
    const gaps = blockEnd < newerStart ? [{ fromPair: blockEnd, toPair: newerStart - 1 }] : [];
    let startPair = block[0]!.fromPair;
    // Whatever the shares, never over the budget: the oldest summaries go first.
    while (items.length > newer.length && messagesBytes(toAnthropicMessages({ items, omitted: spansOf(startPair, gaps) })) > budgetBytes) {
      items.shift();
      startPair = firstPairOf(items[0]!);
    }
    if (items.length === newer.length) {
      result = await walk(db, { ...base, fillTo: low });
    } else {
      const notUsed = (extended.problems.length === 0 ? extended : tail).summaryNotUsed.filter((n) => n.fromPair >= blockEnd);
      result = { items, omitted: spansOf(startPair, gaps), summaryNotUsed: notUsed, problems: [] };
    }
  }
  return { walk: result, rewrite: why, save: result.problems.length === 0 ? layoutOf(result, count) : null, lowWater: low };
}

/**
 * The summary block for a rewrite: consecutive ranges older than `beforePair`
 * whose summaries are usable now and smaller than their originals, ending at
 * the newest such range. It keeps the previous block's start (`anchor`) when
 * the block from there still fits `blockMax`; otherwise it is rebuilt newest
 * first down to BLOCK_KEEP_RATIO of `blockMax`.
 */
async function summaryBlock(
  db: Queryable, args: StableArgs, opts: { beforePair: number; blockMax: number; anchor: number | null },
): Promise<SummaryItem[]> {
  const { conversationId, scope, count, onRead } = args;
  if (opts.blockMax <= 0 || opts.beforePair < RANGE_SIZE) return [];
  const records = await completedSummariesBeforeRead(db, { conversationId, scope, beforePair: opts.beforePair, limit: MAX_BLOCK_RANGES }, onRead);
  const ranges = [...new Set(records.map((r) => r.fromPair))].sort((a, b) => b - a);
  const texts = textsLoader(db, args, new Map());
  // Newest first: consecutive usable ranges.
  const newestFirst: SummaryItem[] = [];
  let bytes = 0;
  for (const fromPair of ranges) {
    // Past the block's share: neither the anchored block nor a rebuilt one can reach further.
    if (bytes > opts.blockMax) break;
    const last = newestFirst.at(-1);
    if (last !== undefined && fromPair !== last.fromPair - RANGE_SIZE) break;
    let item: SummaryItem | null = null;
    for (const record of records.filter((r) => r.fromPair === fromPair)) {
      item = await usableSummary(record, fromPair, count, texts);
      if (item !== null) break;
    }
    if (item === null) {
      if (newestFirst.length > 0) break;
      continue; // not usable: a block may still end at an older range
    }
    newestFirst.push(item);
    bytes += itemBytes(item);
    if (opts.anchor !== null && fromPair <= opts.anchor) break;
  }
  const size = (items: SummaryItem[]) => items.reduce((n, it) => n + itemBytes(it), 0);
  const anchored = opts.anchor === null ? -1 : newestFirst.findIndex((it) => it.fromPair === opts.anchor);
  if (anchored >= 0 && size(newestFirst.slice(0, anchored + 1)) <= opts.blockMax) return newestFirst.slice(0, anchored + 1).reverse();
  const block: SummaryItem[] = [];
  for (const item of newestFirst) {
    if (size([...block, item]) > opts.blockMax * BLOCK_KEEP_RATIO && block.length > 0) break;
    if (size([...block, item]) > opts.blockMax) break;
    block.push(item);
  }
  return block.reverse();
}

/** Verbatim user messages in some items. */
function userMessages(items: readonly ProjectionItem[]): number {
  return items.reduce((n, it) => n + (it.kind === 'pair' ? 1 : it.userMessages.length), 0);
}

/** The newest of some contiguous items (oldest first) that carry at least `users` user messages. */
function trimToUsers(items: ProjectionItem[], users: number): ProjectionItem[] {
  let n = 0;
  let from = items.length;
  while (from > 0 && n < users) n += userMessages([items[--from]!]);
  return items.slice(from);
}

/** The summary item of a range if this record is usable for it now (binding, plannable) and smaller than its originals. */
async function usableSummary(
  record: ProjectionSummaryRow, fromPair: number, count: number, texts: (fromPair: number) => Promise<TextPair[] | null>,
): Promise<SummaryItem | null> {
  if (record.status !== 'completed' || !plannableFor(fromPair, count) || fromPair + RANGE_SIZE > count) return null;
  const full = await texts(fromPair);
  if (full === null) return null;
  if (recordIdCheck(record, fromPair, currentIds(full)) !== null || recordHashCheck(record, full) !== null) return null;
  const item = summaryItem(record as ProjectionSummaryRow & { summary: string }, full);
  return itemBytes(item) < rawBytes(full) ? item : null;
}

/** Loads a range's ten pairs with every text: from rows already read when they have them, else read in full. */
function textsLoader(db: Queryable, args: StableArgs, rows: Map<number, ProjectionPairRow>) {
  const cache = new Map<number, TextPair[] | null>();
  return async (fromPair: number): Promise<TextPair[] | null> => {
    if (cache.has(fromPair)) return cache.get(fromPair)!;
    const known = Array.from({ length: RANGE_SIZE }, (_, j) => rows.get(fromPair + j));
    let result: TextPair[] | null = null;
    if (known.every((r) => r !== undefined && hasTexts(r))) {
      result = known as TextPair[];
    } else {
      const toPair = fromPair + RANGE_SIZE - 1;
      const all = await pairsPageRead(db, { conversationId: args.conversationId, scope: args.scope, fromPair, toPair, maxTextBytes: null }, args.onRead);
      const same = known.every((r) => r === undefined) || sameIds(currentIds(all), currentIds(known.filter((r) => r !== undefined)));
      result = contiguous(all, fromPair, toPair) && same && all.every(hasTexts) ? all as TextPair[] : null;
    }
    cache.set(fromPair, result);
    return result;
  };
}

/** The omitted spans of a layout: everything before its start, and its gaps. */
function spansOf(startPair: number, gaps: { fromPair: number; toPair: number }[]): OmittedSpan[] {
  return [
    ...(startPair > 0 ? [{ fromPair: 0, toPair: startPair - 1, reason: 'budget' as const }] : []),
    ...gaps.map((g) => ({ fromPair: g.fromPair, toPair: g.toPair, reason: 'budget' as const })),
  ];
}

function layoutOf(result: WalkResult, count: number): ProjectionLayoutRow {
  const spans = result.omitted;
  const startPair = spans[0]?.fromPair === 0 ? spans[0].toPair + 1 : 0;
  const gaps = spans.filter((s) => s.fromPair > 0).map((s) => ({ fromPair: s.fromPair, toPair: s.toPair }));
  const plain = JSON.stringify(toAnthropicMessages({ items: result.items, omitted: spans }, { cacheBreakpoint: false }));
  return {
    startPair: result.items.length === 0 ? count : startPair,
    endPair: count,
    summaries: result.items.flatMap((it) => (it.kind === 'summary' ? [{ fromPair: it.fromPair, recordId: it.recordId }] : [])),
    gaps: result.items.length === 0 ? [] : gaps,
    prefixSha256: createHash('sha256').update(plain).digest('hex'),
    prefixBytes: Buffer.byteLength(plain, 'utf8'),
  };
}

/** SHA-256 of the messages a layout's items produce (notes included, breakpoints not: they move every turn). */
function layoutHash(items: ProjectionItem[], omitted: OmittedSpan[]): string {
  return createHash('sha256').update(JSON.stringify(toAnthropicMessages({ items, omitted }, { cacheBreakpoint: false }))).digest('hex');
}
