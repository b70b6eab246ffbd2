import { createHash } from 'node:crypto';
import {
  projectionLayoutNearRead,
  projectionLayoutRead,
  type ProjectionLayoutRow,
  type Queryable,
  type ReadObserver,
} from '../db/queries/projection.ts';
import { RANGE_SIZE } from '../conversation/plan.ts';
import { firstPairOf, toAnthropicMessages } from './to-anthropic.ts';
import { lowWaterBytes } from './cache.ts';
import { gapWithinBound, HEAD_MAX_RATIO, planLayout, type Plan } from './fidelity.ts';
import { itemSerial, type ConversationReader } from './reader.ts';
import type { OmittedSpan, ProjectionCacheInfo, ProjectionItem, SummaryItem } from './types.ts';

/**
 * The cache-stable layout (README "Prompt caching"): fidelity first
 * (fidelity.ts), then the prompt cache.
 *
 * Prompt caching bills the part of a request that repeats an earlier
 * request's prefix at a tenth of the price and a changed part at 1.25x, so
 * the history should not move under the cache every turn, as a newest-first
 * fill does once the budget is full. So:
 *
 * - A **layout** (where the history starts, which ranges it shows as
 *   summaries, what it leaves out) is stored per conversation and budget
 *   (sourcebound.projection_layouts) with the SHA-256 of the history it
 *   produced and when a request last sent it (`used_at`).
 * - **Between rewrites** the history is the layout rebuilt from the current
 *   rows with the pairs added since appended raw at its end: each request's
 *   history extends the previous one's and reads it from the cache. It is
 *   kept while every summary in it still binds now, the rebuilt prefix
 *   hashes to the stored SHA-256, the whole fits the budget, and the cache
 *   can still hold it (last sent within `cacheTtlSeconds`). The newest pairs
 *   stay raw and the request only grows, so the fidelity rules hold.
 * - A **rewrite** lays the history out anew under the fidelity rules, to the
 *   low-water mark (cache.ts), leaving room for the turns to come. When the
 *   budget was reached inside the cache's lifetime, the layout that keeps the
 *   stored head (its summaries, read from the cache) and grows it at its end
 *   is taken when it keeps the rules too (its gap within bound, the budget
 *   filled); else the fresh one. A layout whose cache has expired, or that
 *   changed before its head, is laid out fresh: it pays a write anyway.
 * - The stored layout is a hint, never a source of truth: a missing or stale
 *   one only means a rewrite.
 */

export interface StableArgs {
  conversationId: string;
  scope: string;
  count: number;
  budgetBytes: number;
  /** The app's clock, in milliseconds. */
  now: number;
  /** How long the provider's prompt cache holds a prefix after its last use. */
  cacheTtlSeconds: number;
  onRead: ReadObserver | undefined;
}

export interface StableResult {
  plan: Pick<Plan, 'items' | 'omitted' | 'summaryNotUsed'>;
  rewrite: ProjectionCacheInfo['rewrite'];
  lowWater: number;
  /** The layout to store (a rewrite happened), else null. */
  save: ProjectionLayoutRow | null;
  /** The stored layout this call read (null: none): `save` replaces it only if it is still the one stored. */
  replaces: ProjectionLayoutRow | null;
  /** The budget the layout read is stored under (a near budget's, projectionLayoutNearRead), and `save` with it; else this call's. */
  storedAt: number;
  /** A kept layout whose `used_at` should move to now (it was sent; the cache's lifetime starts again). */
  touch: boolean;
}

/** A kept layout's `used_at` is written again only when it is older than this share of the cache's lifetime (one write per few turns, not per call). */
const TOUCH_SHARE = 0.1;

/**
 * @param read the stored layout and the budget it is stored under, when the
 *   caller read it already (projectionRead); else it is read here.
 */
export async function stableProjection(
  db: Queryable,
  reader: ConversationReader,
  args: StableArgs,
  read?: { layout: ProjectionLayoutRow | null; budgetBytes: number | null },
): Promise<StableResult> {
  let stored: ProjectionLayoutRow | null = read === undefined ? await projectionLayoutRead(db, args, args.onRead) : read.layout;
  let storedAt = read?.layout != null && read.budgetBytes !== null ? read.budgetBytes : args.budgetBytes;
  if (stored === null && read === undefined) {
    // A budget that moves a little from call to call (the window less the new message) keeps the layout
    // of a near one (larger first): it is kept while it fits this budget, and rewritten in its place.
    const near = await projectionLayoutNearRead(db, args, args.onRead);
    if (near !== null) {
      const { budgetBytes, ...layout } = near;
      stored = layout;
      storedAt = budgetBytes;
    }
  }
  const result = await decide(reader, args, stored);
  return { ...result, replaces: stored, storedAt };
}

async function decide(
  reader: ConversationReader,
  args: StableArgs,
  stored: ProjectionLayoutRow | null,
): Promise<Omit<StableResult, 'replaces' | 'storedAt'>> {
  const { count, budgetBytes } = args;
  if (stored === null) return rewrite(reader, args, 'first', null);
  if (!wellFormed(stored, count)) return rewrite(reader, args, 'changed', null);
  // A layout that laid nothing out binds no pair: nothing of it is in a cache either.
  if (stored.startPair === stored.endPair) return rewrite(reader, args, 'budget', null);
  const idle = args.now - new Date(stored.usedAt).getTime();
  if (idle > args.cacheTtlSeconds * 1000) return rewrite(reader, args, 'expired', null);

  await reader.preload(stored.startPair);
  const rebuilt = await rebuild(reader, stored);
  if (rebuilt === null || layoutHash(rebuilt.items, rebuilt.omitted) !== stored.prefixSha256) {
    // Something changed. When it lies after the head, the head is still in the cache up to its breakpoint.
    return rewrite(reader, args, 'changed', await storedHead(reader, stored));
  }
  const { items, omitted } = rebuilt;
  const half = Math.floor(budgetBytes / 2);
  for (let i = stored.endPair; i < count; i++) {
    const slot = reader.pairIfRead(i) ?? (await reader.pair(i));
    if (slot.kind !== 'pair' || reader.format.sizeOf(slot.item) > half) return rewrite(reader, args, 'budget', leadingSummaries(items));
    items.push(slot.item);
  }
  if (reader.format.projectedBytes(items, omitted) > budgetBytes) return rewrite(reader, args, 'budget', leadingSummaries(items));
  return {
    plan: { items, omitted, summaryNotUsed: [] },
    rewrite: null,
    lowWater: lowWaterBytes(budgetBytes),
    save: null,
    touch: idle >= TOUCH_SHARE * args.cacheTtlSeconds * 1000,
  };
}

/**
 * Lays the history out anew (fidelity.ts). With a head the cache holds (a
 * budget rewrite, or a change after the head, inside the cache's lifetime),
 * the layout that keeps it is taken when it keeps the rules: its gap within
 * bound, the head within half the budget, and the budget filled as well as a
 * fresh layout would.
 */
async function rewrite(
  reader: ConversationReader,
  args: StableArgs,
  why: NonNullable<ProjectionCacheInfo['rewrite']>,
  head: SummaryItem[] | null,
): Promise<Omit<StableResult, 'replaces' | 'storedAt'>> {
  const { budgetBytes, count } = args;
  const fillBytes = lowWaterBytes(budgetBytes);
  let plan: Plan | null = null;
  if (head !== null && head.length > 0 && reader.format.projectedBytes(head, []) <= Math.floor(HEAD_MAX_RATIO * budgetBytes)) {
    const kept = await planLayout(reader, { budgetBytes, fillBytes, keptHead: head });
    if (gapWithinBound(kept) && kept.bytes <= budgetBytes) {
      const fresh = kept.bytes >= fillBytes ? null : await planLayout(reader, { budgetBytes, fillBytes });
      plan = fresh !== null && fresh.bytes > kept.bytes ? fresh : kept;
    }
  }
  plan ??= await planLayout(reader, { budgetBytes, fillBytes });
  const sound = reader.problems.length === 0;
  return {
    plan,
    rewrite: why,
    lowWater: fillBytes,
    touch: false,
    save: sound ? layoutOf(plan.items, plan.omitted, count, args.now) : null,
  };
}

function wellFormed(l: ProjectionLayoutRow, count: number): boolean {
  if (!(0 <= l.startPair && l.startPair <= l.endPair && l.endPair <= count)) return false;
  let at = l.startPair;
  for (const g of l.gaps) {
    if (!(at <= g.fromPair && g.fromPair <= g.toPair && g.toPair < l.endPair)) return false;
    at = g.toPair + 1;
  }
  return l.summaries.every((s) => s.fromPair % RANGE_SIZE === 0 && s.fromPair >= l.startPair && s.fromPair + RANGE_SIZE <= l.endPair);
}

/** The stored layout's items rebuilt from the current rows, with its omitted spans; null when one no longer holds. */
async function rebuild(
  reader: ConversationReader,
  stored: ProjectionLayoutRow,
): Promise<{ items: ProjectionItem[]; omitted: OmittedSpan[] } | null> {
  const summaryAt = new Map(stored.summaries.map((s) => [s.fromPair, s.recordId]));
  const gapAt = new Map(stored.gaps.map((g) => [g.fromPair, g.toPair]));
  const items: ProjectionItem[] = [];
  for (let i = stored.startPair; i < stored.endPair;) {
    const gapEnd = gapAt.get(i);
    if (gapEnd !== undefined) {
      i = gapEnd + 1;
      continue;
    }
    const recordId = summaryAt.get(i);
    if (recordId !== undefined) {
      const s = await reader.summary(i / RANGE_SIZE, recordId);
      if (s === 'changed' || s.kind !== 'usable') return null;
      items.push(s.item);
      i += RANGE_SIZE;
      continue;
    }
    const slot = reader.pairIfRead(i) ?? (await reader.pair(i));
    if (slot.kind !== 'pair') return null;
    items.push(slot.item);
    i += 1;
  }
  return { items, omitted: spansOf(stored.startPair, stored.gaps) };
}

/** The stored layout's head (its summaries at the start), when it still holds as it was sent; else null. */
async function storedHead(reader: ConversationReader, stored: ProjectionLayoutRow): Promise<SummaryItem[] | null> {
  if (stored.headSha256 === null) return null;
  const head: SummaryItem[] = [];
  const byFrom = new Map(stored.summaries.map((s) => [s.fromPair, s.recordId]));
  for (let at = stored.startPair; byFrom.has(at); at += RANGE_SIZE) {
    const s = await reader.summary(at / RANGE_SIZE, byFrom.get(at));
    if (s === 'changed' || s.kind !== 'usable') return null;
    head.push(s.item);
  }
  return head.length > 0 && layoutHash(head, spansOf(stored.startPair, [])) === stored.headSha256 ? head : null;
}

function leadingSummaries(items: readonly ProjectionItem[]): SummaryItem[] {
  const head: SummaryItem[] = [];
  for (const it of items) {
    if (it.kind !== 'summary') break;
    head.push(it);
  }
  return head;
}

/** The omitted spans of a layout: everything before its start, and its gaps. */
function spansOf(startPair: number, gaps: ProjectionLayoutRow['gaps']): OmittedSpan[] {
  return [
    ...(startPair > 0 ? [{ fromPair: 0, toPair: startPair - 1, reason: 'budget' as const }] : []),
    ...gaps.map((g) => ({ fromPair: g.fromPair, toPair: g.toPair, reason: g.reason ?? ('budget' as const) })),
  ];
}

function layoutOf(items: ProjectionItem[], omitted: OmittedSpan[], count: number, now: number): ProjectionLayoutRow {
  const startPair = items.length === 0 ? count : firstPairOf(items[0]!);
  const gaps =
    items.length === 0
      ? []
      : omitted
          .filter((s) => s.fromPair > 0)
          .map((s) => ({ fromPair: s.fromPair, toPair: s.toPair, ...(s.reason === 'too_large' ? { reason: 'too_large' as const } : {}) }));
  const plain = JSON.stringify(toAnthropicMessages({ items, omitted }, { cacheBreakpoint: false }));
  const head = leadingSummaries(items);
  const prefixSha256 = createHash('sha256').update(plain).digest('hex');
  remember(hashKey(items, omitted), prefixSha256);
  return {
    startPair,
    endPair: count,
    summaries: items.flatMap((it) => (it.kind === 'summary' ? [{ fromPair: it.fromPair, recordId: it.recordId }] : [])),
    gaps,
    prefixSha256,
    prefixBytes: Buffer.byteLength(plain, 'utf8'),
    headSha256: head.length === 0 ? null : layoutHash(head, spansOf(startPair, [])),
    savedCost: 0,
    savesBytes: 0,
    usedAt: new Date(now),
  };
}

/**
 * SHA-256 of the messages a layout's items produce (notes included, breakpoints not: they move every turn).
 * Computed once for the same items (reader.ts ItemMemo: an item read again with the same content is the same
 * frozen object) and spans: a kept layout is checked on every call, and its items rarely change.
 */
function layoutHash(items: ProjectionItem[], omitted: OmittedSpan[]): string {
  const key = hashKey(items, omitted);
  let hash = key === null ? undefined : hashes.get(key);
  if (hash === undefined) {
    hash = createHash('sha256')
      .update(JSON.stringify(toAnthropicMessages({ items, omitted }, { cacheBreakpoint: false })))
      .digest('hex');
    remember(key, hash);
  }
  return hash;
}

const hashes = new Map<string, string>();
const MAX_HASHES = 1024;
/** Layouts of more items than this are not memoized (bounds the memo's keys: at most MAX_HASHES x about 8 characters an item). */
const MAX_KEY_ITEMS = 2000;

function hashKey(items: readonly ProjectionItem[], omitted: readonly OmittedSpan[]): string | null {
  if (items.length > MAX_KEY_ITEMS) return null;
  return `${items.map(itemSerial).join(',')}|${omitted.map((s) => `${s.fromPair}-${s.toPair}-${s.reason}`).join(',')}`;
}

function remember(key: string | null, hash: string): void {
  if (key === null) return;
  hashes.delete(key);
  if (hashes.size >= MAX_HASHES) hashes.delete(hashes.keys().next().value!);
  hashes.set(key, hash);
}
