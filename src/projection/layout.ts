import { createHash } from 'node:crypto';
import {
  pairsPageRead, projectionLayoutRead, summariesForRangesRead,
  type ProjectionLayoutRow, type ProjectionPairRow, type ProjectionSummaryRow, type Queryable, type ReadObserver,
} from '../db/queries/projection.ts';
import { RANGE_SIZE } from '../plan.ts';
import { itemBytes, toAnthropicMessages } from './anthropic.ts';
import { currentIds, recordHashCheck, recordIdCheck, sameIds } from './binding.ts';
import { lowWaterBytes, rewritePays } from './cache.ts';
import type { ProjectionCacheInfo, ProjectionItem, SummaryNotUsed } from './types.ts';
import {
  contiguous, hasTexts, historyBytes, judgeRange, pairItem, plannableFor, rawBytes, summaryItem, walk,
  type TextPair, type WalkResult,
} from './walk.ts';

/**
 * The cache-stable layout (DESIGN.md "Cache stability"; README "Prompt caching").
 *
 * Prompt caching bills a request's prefix that repeats an earlier request's
 * at a tenth of the price, and a changed prefix at 1.25x. So the history must
 * not move under the cache on every turn, as a newest-first fill does once
 * the budget is full. The rule:
 *
 * - A **layout** is where the history starts (pairs before it are omitted,
 *   and the note saying so is therefore fixed) and which ranges it shows as
 *   summaries. It is stored per conversation and budget
 *   (sourcebound.projection_layouts) with the SHA-256 of the history it
 *   produced.
 * - Between rewrites the history is the layout's items rebuilt from the
 *   current rows, with the pairs added since appended raw at the end: every
 *   request's history extends the previous one's. It is used only when each
 *   of its summaries still binds now (binding.ts, plannable, smaller than its
 *   originals), the rebuilt prefix hashes to the stored SHA-256 (nothing in it
 *   changed), and the whole still fits the budget.
 * - Otherwise the history is **rewritten** at once by the newest-first walk
 *   (walk.ts): the whole conversation when it fits the budget, else down to
 *   the low-water mark (cache.ts, half the budget), so the next rewrite is
 *   about half a budget of new exchanges away. Summaries that became usable
 *   since the last rewrite wait for the next one (reported as
 *   `kept_raw_for_cache`), unless swapping them in now pays for itself under
 *   the price model (cache.ts rewritePays), like the seed's 4 KiB rule.
 * - The stored layout is a hint, never a source of truth: a missing,
 *   unreadable or stale one only means a rewrite. Only rewrites write it.
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
  /** The layout to store (a rewrite happened and the projection is sound), else null. */
  save: ProjectionLayoutRow | null;
}

// A lower bound on what a pair costs in any item (a summarized pair: its user
// message block, a tenth of a label): a stored layout spanning more pairs than
// the budget could hold at this price cannot fit, so it is not even read.
const MIN_BYTES_PER_PAIR = 30;

export async function stableProjection(db: Queryable, args: StableArgs): Promise<StableResult> {
  const { conversationId, scope, count, budgetBytes, onRead } = args;
  const stored = await projectionLayoutRead(db, { conversationId, scope, budgetBytes }, onRead);
  if (stored === null) return rewrite(db, args, 'first');
  if (stored.startPair > stored.endPair || stored.endPair > count) return rewrite(db, args, 'changed');
  if ((count - stored.startPair) * MIN_BYTES_PER_PAIR > budgetBytes) return rewrite(db, args, 'budget');

  const kept = await keep(db, args, stored);
  if (kept.kind !== 'kept') return rewrite(db, args, kept.kind);
  return kept.result;
}

type Kept = { kind: 'kept'; result: StableResult } | { kind: 'budget' | 'changed' };

/** The stored layout with the new pairs appended, if it still holds and fits; maybe with ready summaries swapped in. */
async function keep(db: Queryable, args: StableArgs, stored: ProjectionLayoutRow): Promise<Kept> {
  const { conversationId, scope, count, budgetBytes, onRead } = args;
  const { startPair, endPair } = stored;
  const pairs = count === startPair ? [] : await pairsPageRead(db, {
    conversationId, scope, fromPair: startPair, toPair: count - 1, maxTextBytes: budgetBytes,
  }, onRead);
  if (!contiguous(pairs, startPair, count - 1)) return { kind: 'changed' };
  const records = count === startPair ? [] : await summariesForRangesRead(db, { conversationId, scope, fromPair: startPair, toPair: count - 1 }, onRead);
  const recordsOf = (fromPair: number) => records.filter((r) => r.fromPair === fromPair);
  const at = (i: number) => pairs[i - startPair]!;
  const rangeTexts = new Map<number, TextPair[] | null>();
  /** The ten pairs of a range with every text (re-read without the size limit when needed); null if they moved. */
  const texts = async (fromPair: number): Promise<TextPair[] | null> => {
    if (rangeTexts.has(fromPair)) return rangeTexts.get(fromPair)!;
    let rows: ProjectionPairRow[] = pairs.slice(fromPair - startPair, fromPair - startPair + RANGE_SIZE);
    if (!rows.every(hasTexts)) {
      const all = await pairsPageRead(db, { conversationId, scope, fromPair, toPair: fromPair + RANGE_SIZE - 1, maxTextBytes: null }, onRead);
      rows = contiguous(all, fromPair, fromPair + RANGE_SIZE - 1) && sameIds(currentIds(all), currentIds(rows)) ? all : [];
    }
    const result = rows.length === RANGE_SIZE && rows.every(hasTexts) ? rows : null;
    rangeTexts.set(fromPair, result);
    return result;
  };
  /** The summary item of a range if this record is usable for it now and smaller than its originals. */
  const usable = async (record: ProjectionSummaryRow, fromPair: number): Promise<{ item: ProjectionItem; saves: number } | null> => {
    if (!plannableFor(fromPair, count) || fromPair + RANGE_SIZE > count) return null;
    const range = pairs.slice(fromPair - startPair, fromPair - startPair + RANGE_SIZE);
    if (recordIdCheck(record, fromPair, currentIds(range)) !== null) return null;
    const full = await texts(fromPair);
    if (full === null || recordHashCheck(record, full) !== null) return null;
    const item = summaryItem(record as ProjectionSummaryRow & { summary: string }, full);
    const raw = full.reduce((n, p) => n + itemBytes(pairItem(p)), 0);
    const saves = raw - itemBytes(item);
    return saves > 0 ? { item, saves } : null;
  };

  // The prefix, rebuilt from the current rows exactly as the layout says.
  const summaryAt = new Map(stored.summaries.map((s) => [s.fromPair, s.recordId]));
  const items: ProjectionItem[] = [];
  for (let i = startPair; i < endPair;) {
    const recordId = summaryAt.get(i);
    if (recordId !== undefined) {
      const record = records.find((r) => r.id === recordId && r.fromPair === i && r.status === 'completed');
      const summary = record === undefined ? null : await usable(record, i);
      if (summary === null) return { kind: 'changed' };
      items.push(summary.item);
      i += RANGE_SIZE;
      continue;
    }
    const row = at(i);
    if (!hasTexts(row)) return { kind: 'changed' };
    items.push(pairItem(row));
    i += 1;
  }
  const omitted = startPair > 0 ? [{ fromPair: 0, toPair: startPair - 1, reason: 'budget' as const }] : [];
  if (layoutHash(items, omitted) !== stored.prefixSha256) return { kind: 'changed' };

  // The pairs added since, raw at the end.
  for (let i = endPair; i < count; i++) {
    const row = at(i);
    if (!hasTexts(row)) return { kind: 'budget' };
    items.push(pairItem(row));
  }
  const used = items.reduce((n, it) => n + itemBytes(it), 0);
  const bytes = historyBytes(used, items.length, startPair);
  if (bytes > budgetBytes) return { kind: 'budget' };

  // Ranges the layout shows raw: why, and the summaries that became usable since it was made.
  const notUsed: SummaryNotUsed[] = [];
  const swaps = new Map<number, ProjectionItem>();
  let saves = 0;
  const summarized = new Set(stored.summaries.map((x) => x.fromPair));
  for (let fromPair = Math.ceil(startPair / RANGE_SIZE) * RANGE_SIZE; fromPair < count; fromPair += RANGE_SIZE) {
    if (summarized.has(fromPair)) continue;
    const toPair = Math.min(fromPair + RANGE_SIZE - 1, count - 1);
    const range = pairs.slice(fromPair - startPair, toPair - startPair + 1);
    const records = recordsOf(fromPair);
    const v = await judgeRange({ fromPair, pairs: range, records, count, texts: () => texts(fromPair) });
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
  if (swaps.size > 0 && rewritePays({
    currentBytes: bytes, rewrittenBytes: bytes - saves, budgetBytes, bytesPerTurn: used / Math.max(1, count - startPair),
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
    const result: WalkResult = { items: swapped, oldest: startPair, omittedReason: 'budget', summaryNotUsed: [], problems: [] };
    return { kind: 'kept', result: { walk: result, rewrite: 'summaries', save: layoutOf(result, count) } };
  }
  const result: WalkResult = { items, oldest: startPair, omittedReason: 'budget', summaryNotUsed: notUsed, problems: [] };
  return { kind: 'kept', result: { walk: result, rewrite: null, save: null } };
}

/** Lays the history out anew: all of it if it fits the budget, else newest first down to the low-water mark. */
async function rewrite(db: Queryable, args: StableArgs, why: NonNullable<ProjectionCacheInfo['rewrite']>): Promise<StableResult> {
  const base = { conversationId: args.conversationId, scope: args.scope, count: args.count, budgetBytes: args.budgetBytes, onRead: args.onRead };
  let result = await walk(db, { ...base, fillTo: args.budgetBytes });
  if (result.oldest > 0 && result.problems.length === 0) {
    result = await walk(db, { ...base, fillTo: lowWaterBytes(args.budgetBytes) });
  }
  return { walk: result, rewrite: why, save: result.problems.length === 0 ? layoutOf(result, args.count) : null };
}

function layoutOf(result: WalkResult, count: number): ProjectionLayoutRow {
  const omitted = result.oldest > 0 ? [{ fromPair: 0, toPair: result.oldest - 1, reason: 'budget' as const }] : [];
  return {
    startPair: result.oldest,
    endPair: count,
    summaries: result.items.flatMap((it) => (it.kind === 'summary' ? [{ fromPair: it.fromPair, recordId: it.recordId }] : [])),
    prefixSha256: layoutHash(result.items, omitted),
    prefixBytes: Buffer.byteLength(JSON.stringify(toAnthropicMessages({ items: result.items, omitted }, { cacheBreakpoint: false })), 'utf8'),
  };
}

/** SHA-256 of the messages a layout's items produce (note included, breakpoint not: it moves every turn). */
function layoutHash(items: ProjectionItem[], omitted: { fromPair: number; toPair: number; reason: 'budget' }[]): string {
  return createHash('sha256').update(JSON.stringify(toAnthropicMessages({ items, omitted }, { cacheBreakpoint: false }))).digest('hex');
}
