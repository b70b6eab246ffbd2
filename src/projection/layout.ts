import { createHash } from 'node:crypto';
import {
  completedSummariesBeforeRead, pairsPageRead, projectionEditsRead, projectionHistoryBytesRead, projectionLayoutNearRead, projectionLayoutRead,
  summariesForRangesRead,
  type ProjectionLayoutRow, type ProjectionPairRow, type ProjectionSummaryRow, type Queryable, type ReadObserver,
} from '../db/queries/projection.ts';
import { RANGE_SIZE } from '../plan.ts';
import {
  BREAKPOINT_BYTES, firstPairOf, gapNoteBytes, itemBytes as adapterItemBytes, messagesBytes, newestSummaryMark, noteBytes, toAnthropicMessages,
} from './anthropic.ts';
import { currentIds, recordHashCheck, recordIdCheck, sameIds } from './binding.ts';
import {
  CACHE_LOOKBACK_BLOCKS, ledgerAllows, lowWaterBytes, requestCost, rewritePays, savedBefore, wholeHistoryCost, type CacheLedger,
} from './cache.ts';
import type { OmittedSpan, ProjectionCacheInfo, ProjectionItem, SummaryItem, SummaryNotUsed } from './types.ts';
import {
  contiguous, hasTexts, judgeRange, pairItem, plannableFor, rawBytes, smallerThanOriginal, summaryItem, walk, type TextPair, type WalkResult,
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
 *   the exchanges to come, as a **head**, a **gap** and a **tail**: the tail
 *   is the newest items; the head is either the previous layout's head
 *   (kept: it is in the cache, so the rewrite writes only what follows it),
 *   extended at its end by the usable summaries of the ranges after it, or a
 *   block of the newest usable summaries, each beside its ten user messages
 *   verbatim (denser than raw pairs: more of the user's words for the bytes).
 *   Pairs between head and tail are left out and a note says so where they
 *   were; the adapter puts a cache breakpoint after the head. The kept head
 *   is used unless it carries fewer of the user's messages than today's
 *   newest-first projection and a fresh layout carries more and is paid for
 *   by what the projection has saved so far (the ledger, cache.ts).
 * - Summaries that become usable for ranges the layout shows raw wait for the
 *   next rewrite (`kept_raw_for_cache`) unless swapping them in now pays for
 *   itself (cache.ts rewritePays), like the seed's 4 KiB rule, and what the
 *   projection has saved so far covers its price (the ledger): a bet on the
 *   turns to come is placed only with savings already made.
 * - The stored layout is a hint, never a source of truth: a missing or stale
 *   one only means a rewrite.
 */

export interface StableArgs {
  conversationId: string;
  scope: string;
  count: number;
  budgetBytes: number;
  onRead: ReadObserver | undefined;
  /** Whether a rewrite's layout will be stored (else its ledger is never read, and the whole history's size is not read for it). */
  persist: boolean;
}

export interface StableResult {
  walk: WalkResult;
  rewrite: ProjectionCacheInfo['rewrite'];
  /** The low-water mark a rewrite used (null when the layout was kept). */
  lowWater?: number;
  /** The layout to store (a rewrite happened and the projection is sound), else null. */
  save: ProjectionLayoutRow | null;
  /** The stored layout this call read (null: none): `save` replaces it only if it is still the one stored. */
  replaces: ProjectionLayoutRow | null;
  /** The budget the layout read is stored under (a near budget's, projectionLayoutNearRead), and `save` with it; else this call's. */
  storedAt: number;
}

// Items are immutable once made: their bytes are computed once.
const sizes = new WeakMap<ProjectionItem, number>();
function itemBytes(item: ProjectionItem): number {
  let bytes = sizes.get(item);
  if (bytes === undefined) sizes.set(item, bytes = adapterItemBytes(item));
  return bytes;
}

// A lower bound on what a laid-out pair costs in any item (a summarized pair:
// its user message block, a tenth of a label): a stored layout holding more
// pairs than the budget could at this price cannot fit, so it is not read.
const MIN_BYTES_PER_PAIR = 30;
// What a pair adds to the JSON beyond its texts' UTF-8 bytes, at least (empty texts: escaping only adds).
const EMPTY_PAIR_BYTES = adapterItemBytes({ kind: 'pair', pairIndex: 0, runId: '', userMessageId: '', assistantMessageId: '', userText: '', assistantText: '' });
// Summary ranges a rewrite considers for the block, newest first.
const MAX_BLOCK_RANGES = 64;

export async function stableProjection(db: Queryable, args: StableArgs): Promise<StableResult> {
  let stored: ProjectionLayoutRow | null = await projectionLayoutRead(db, args, args.onRead);
  let storedAt = args.budgetBytes;
  if (stored === null) {
    // A budget that moves a little from call to call (the window less the new message) keeps the layout
    // of a near one (larger first): it is kept while it fits this budget, and rewritten in its place.
    const near = await projectionLayoutNearRead(db, args, args.onRead);
    if (near !== null) {
      const { budgetBytes, ...layout } = near;
      stored = layout;
      storedAt = budgetBytes;
    }
  }
  return { ...await kept(db, args, stored, storedAt), replaces: stored, storedAt };
}

async function kept(db: Queryable, args: StableArgs, stored: ProjectionLayoutRow | null, storedAt: number): Promise<Omit<StableResult, 'replaces' | 'storedAt'>> {
  const { count, budgetBytes } = args;
  if (stored === null) return rewrite(db, args, 'first', null, null);
  const ledger: CacheLedger = { savedCost: stored.savedCost, savesBytes: stored.savesBytes, endPair: stored.endPair };
  if (!wellFormed(stored, count)) return rewrite(db, args, 'changed', null, ledger);
  // A layout that laid nothing out (the newest exchange alone was over the budget) binds no pair: if
  // pairs became ineligible since, its count now covers exchanges it never saw. Nothing of it is in
  // a cache either: it is laid out anew.
  if (stored.startPair === stored.endPair) return rewrite(db, args, 'budget', null, ledger);
  const laidOut = count - stored.startPair - stored.gaps.reduce((n, g) => n + g.toPair - g.fromPair + 1, 0);
  if (laidOut * MIN_BYTES_PER_PAIR > budgetBytes) return rewrite(db, args, 'budget', null, ledger);
  const result = await keep(db, args, stored, ledger, storedAt);
  if (result.kind === 'kept') return result.result;
  return rewrite(db, args, result.kind, result.previous ?? null, ledger);
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

/**
 * The layout kept; or why not, with the verified items of its head (up to its first gap) when only the
 * budget is why, or when what changed lies after that head (it is still in the cache up to its end).
 */
type Kept = { kind: 'kept'; result: Omit<StableResult, 'replaces' | 'storedAt'> } | { kind: 'budget'; previous: PreviousLayout }
  | { kind: 'changed'; previous?: PreviousLayout };

/** What a budget rewrite knows of the layout it replaces. */
interface PreviousLayout {
  /** Its items up to its first gap, verified against the current rows. */
  head: ProjectionItem[];
  /**
   * Where earlier requests put a cache breakpoint in its history (as `endOf` of the item there): the
   * end of each request since it was made (one a turn: endPair..count-1), the end of its head
   * before its first gap and the end of its newest summary. A prompt cache holds entries only there:
   * a prefix ending elsewhere is written again.
   */
  cachedEnds: ReadonlySet<number>;
  /** Its bytes with the pairs added since appended (null: not known, a pair was too large to read). */
  extendedBytes: number | null;
}

/** The stored layout with the new pairs appended, if it still holds and fits; maybe with ready summaries swapped in. */
async function keep(db: Queryable, args: StableArgs, stored: ProjectionLayoutRow, ledger: CacheLedger, storedAt: number): Promise<Kept> {
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
  // Its items before `upTo`; null when one no longer holds (a summary no longer usable, a pair too large).
  const build = async (upTo: number): Promise<ProjectionItem[] | null> => {
    const built: ProjectionItem[] = [];
    for (let i = startPair; i < upTo;) {
      const gapEnd = gapAt.get(i);
      if (gapEnd !== undefined) {
        i = gapEnd + 1;
        continue;
      }
      const recordId = summaryAt.get(i);
      if (recordId !== undefined) {
        const record = records.find((r) => r.id === recordId && r.fromPair === i && r.status === 'completed');
        const item = record === undefined ? null : await usableSummary(record, i, count, texts);
        if (item === null) return null;
        built.push(item);
        i += RANGE_SIZE;
        continue;
      }
      const row = rows.get(i)!;
      if (!hasTexts(row)) return null;
      built.push(pairItem(row));
      i += 1;
    }
    return built;
  };
  const items = await build(endPair);
  const omitted = spansOf(startPair, gaps);
  if (items === null || layoutHash(items, omitted) !== stored.prefixSha256) return changedAfterHead();

  /**
   * Something in the prefix changed. When it lies after the head (the items before the first gap:
   * in the tail the layout laid out), the head is still what the requests put in the cache up to the
   * breakpoint at its end (and at its newest summary's, when the layout's newest summary is in it):
   * the rewrite reads it, as at a budget rewrite. Else nothing of the layout is known to be cached.
   */
  async function changedAfterHead(): Promise<Kept> {
    const gap = gaps[0];
    if (stored.headSha256 === null || gap === undefined) return { kind: 'changed' };
    const head = await build(gap.fromPair);
    if (head === null || head.length === 0 || layoutHash(head, spansOf(startPair, [])) !== stored.headSha256) return { kind: 'changed' };
    const summaryEnd = stored.summaries.length === 0 ? null : Math.max(...stored.summaries.map((x) => x.fromPair)) + RANGE_SIZE;
    return {
      kind: 'changed',
      previous: { head, cachedEnds: new Set([gap.fromPair, ...(summaryEnd !== null && summaryEnd < gap.fromPair ? [summaryEnd] : [])]), extendedBytes: null },
    };
  }

  // The pairs added since, raw at the end. Each request since put a cache entry at its end; but a
  // message among them edited since (0037) changed the requests from its pair on, up to those made
  // after the edit: the entries of requests that may hold the old text are not counted as cached
  // (projection_edits: from the edited pair to the first pair created after the last edit). Read
  // only where a price depends on it (a budget rewrite, a swap), not on every extension.
  let stale: { firstEdit: number; cleanFrom: number | null } | null = null;
  const readEdits = async (): Promise<void> => {
    if (count > endPair) stale = await projectionEditsRead(db, { conversationId, scope, budgetBytes: storedAt, fromPair: endPair }, onRead);
  };
  // A request's end is the pair after its last one: it holds the edited pair when past it. The request that
  // asked for pair cleanFrom (its end) came after the edits when, as usual, the app edits before it asks.
  const cachedEnd = (j: number): boolean => stale === null || j <= stale.firstEdit || (stale.cleanFrom !== null && j >= stale.cleanFrom);
  const previous = (extendedBytes: number | null = null): PreviousLayout => ({
    head: items.filter((it) => gaps.length === 0 || firstPairOf(it) < gaps[0]!.fromPair),
    cachedEnds: new Set([
      ...gaps.slice(0, 1).map((g) => g.fromPair),
      ...Array.from({ length: count - endPair }, (_, j) => endPair + j).filter(cachedEnd),
      ...[newestSummaryMark(items)].flatMap((at) => (at === null ? [] : [endOf(items[at]!)])),
    ]),
    extendedBytes,
  });
  for (let i = endPair; i < count; i++) {
    const row = rows.get(i)!;
    if (!hasTexts(row)) {
      await readEdits();
      return { kind: 'budget', previous: previous() };
    }
    items.push(pairItem(row));
  }
  const bytes = messagesBytes(toAnthropicMessages({ items, omitted }));
  if (bytes > budgetBytes) {
    await readEdits();
    return { kind: 'budget', previous: previous(bytes) };
  }

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
    const saving = smallerThanOriginal(itemBytes(item), v.pairs) ? rawBytes(v.pairs) - itemBytes(item) : 0;
    if (saving <= 0) {
      notUsed.push({ fromPair, toPair, reason: 'larger_than_original', recordId: v.record.id });
      continue;
    }
    swaps.set(fromPair, item);
    saves += saving;
    notUsed.push({ fromPair, toPair, reason: 'kept_raw_for_cache', recordId: v.record.id });
  }
  const rawPairs = items.filter((it) => it.kind === 'pair').length;
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
  // What the swapped history reads from the cache: its unchanged start only up to where an earlier
  // request put a breakpoint (the head's end before a gap, the end of a request since the rewrite).
  const headEnd = gaps.length > 0 ? gaps[0]!.fromPair : Number.POSITIVE_INFINITY;
  if (swaps.size > 0) await readEdits();
  const unchangedBytes = swaps.size === 0 ? 0 : cachedBytes(
    swapped.filter((it) => firstPairOf(it) < headEnd), swapped.filter((it) => firstPairOf(it) >= headEnd), previous());
  if (swaps.size > 0 && rewritePays({
    currentBytes: bytes,
    rewrittenBytes: bytes - saves,
    unchangedBytes,
    budgetBytes,
    bytesPerTurn: rawPairs === 0 ? bytes : items.reduce((n, it) => n + (it.kind === 'pair' ? itemBytes(it) : 0), 0) / rawPairs,
    turnsSoFar: count,
  })) {
    // Paid for by what the projection has saved: against the whole history, which is the kept layout
    // plus the bytes it leaves out, extended by the same newest exchange.
    const swappedBytes = messagesBytes(toAnthropicMessages({ items: swapped, omitted }));
    const wholeCost = wholeHistoryCost(bytes + ledger.savesBytes, count > endPair ? itemBytes(items.at(-1)!) : 0);
    const cost = requestCost({ read: unchangedBytes, written: swappedBytes - unchangedBytes, uncached: 0 });
    const saved = savedBefore(ledger, count);
    if (ledgerAllows({ saved, wholeCost, cost })) {
      // The ranges still shown raw keep their reasons; the swapped ones are summaries now.
      const stillRaw = notUsed.filter((n) => !swaps.has(n.fromPair));
      const result: WalkResult = { items: swapped, omitted, summaryNotUsed: stillRaw, problems: [] };
      const after = { savedCost: saved + wholeCost - cost, savesBytes: ledger.savesBytes + Math.max(0, bytes - swappedBytes) };
      return { kind: 'kept', result: { walk: result, rewrite: 'summaries', save: layoutOf(result, count, after) } };
    }
  }
  const result: WalkResult = { items, omitted, summaryNotUsed: notUsed, problems: [] };
  return { kind: 'kept', result: { walk: result, rewrite: null, save: null } };
}

/**
 * Lays the history out anew. All of it if it fits the budget (at a budget
 * rewrite: the low-water mark). Otherwise a head, maybe a gap, and a tail of
 * the newest items, down to the low-water mark, chosen among three shapes:
 * - kept: the head of the previous layout (its items up to its first gap, as
 *   many as still fit), extended at its end by the usable summaries of the
 *   ranges that follow it. Its bytes are in the cache already: the rewrite
 *   writes only what follows them.
 * - block: a new head of the newest usable summaries (consecutive ranges,
 *   each beside its ten user messages verbatim).
 * - newest: no head, the newest items alone.
 * The tail fills the rest of the low-water mark with the newest items.
 * Fidelity first: a shape must carry at least as many of the user's messages
 * verbatim as the newest-first fill of the whole budget (today's projection).
 * The kept shape is taken when it does; else the block or the newest shape,
 * whichever carries more, when that one does; when none can, the kept shape
 * (the cheapest: a rewrite that must lose some messages does not also pay
 * for writing everything again).
 * One newest-first walk serves every shape (its items are the tail, its
 * summaries the block); only summaries it did not reach are read apart.
 */
async function rewrite(
  db: Queryable, args: StableArgs, why: NonNullable<ProjectionCacheInfo['rewrite']>, previous: PreviousLayout | null, ledger: CacheLedger | null,
): Promise<Omit<StableResult, 'replaces' | 'storedAt'>> {
  const { conversationId, scope, count, budgetBytes, onRead } = args;
  const whole = await walk(db, { conversationId, scope, count, budgetBytes, fillTo: budgetBytes, onRead });
  // The ledger: what the whole history would cost this turn (at least), and what was saved before it.
  const { wholeBytes, wholeCost } = await wholeHistory(db, args, whole, previous, ledger);
  const saved = savedBefore(ledger, count);
  // The first layout starts the ledger; later ones carry it on with what their request saved or cost.
  const ledgerAfter = (bytes: number, cost: number) => ({
    savedCost: ledger === null ? 0 : saved + wholeCost - cost, savesBytes: Math.max(0, Math.floor(wholeBytes - bytes)),
  });
  const raw = whole.items.filter((it) => it.kind === 'pair');
  const low = lowWaterBytes(budgetBytes, raw.length === 0 ? Number.NaN : raw.reduce((n, it) => n + itemBytes(it), 0) / raw.length);
  // The whole conversation, when it fits: at a budget rewrite only when it fits the low-water mark
  // (or the next rewrite would be a turn or two away), and not at once when a layout is in the cache:
  // there it is one of the shapes (the newest items down to the low-water mark are all of them), and
  // writing it all again (summaries swapped in at its start) must pay like any other shape.
  // After an edit in the prefix ('changed', with a ledger) nothing of the old layout is known to be
  // in the cache but its head when the edit lies after it (previous): every shape is priced so, and
  // the whole conversation is one of them, taken as any other: only when the ledger can pay for it.
  const wholeIsShape = why === 'changed' && ledger !== null;
  const wholeFits = whole.omitted.length === 0 && !wholeIsShape
    && (why !== 'budget' || (previous === null && messagesBytes(toAnthropicMessages(whole)) <= low));
  if (wholeFits || whole.problems.length > 0 || whole.items.length === 0) {
    const bytes = messagesBytes(toAnthropicMessages(whole));
    const read = cachedBytes(whole.items, [], previous);
    const cost = requestCost({ read, written: bytes - read, uncached: 0 });
    return { walk: whole, rewrite: why, save: whole.problems.length === 0 ? layoutOf(whole, count, ledgerAfter(bytes, cost)) : null, lowWater: low };
  }

  const newest = whole.items.at(-1)!;
  const tailFloor = firstPairOf(newest);
  const summaries = summaryFinder(db, args, whole.items);
  const shapes: Shape[] = [];

  // kept: the previous head, as much of it as fits beside the newest item, then the summaries after it.
  const fitsLow = (h: ProjectionItem[]) => shapeBytes(h, [newest]) <= low;
  if (previous !== null) {
    const fitting: ProjectionItem[] = [];
    for (const item of previous.head) {
      if (endOf(item) > tailFloor || !fitsLow([...fitting, item])) break;
      fitting.push(item);
    }
    // A head that ends inside a range ends at the range's start instead: its raw pairs there are worth
    // what the tail's are, and from a range boundary on the head can grow by summaries. But the cache
    // holds the head only up to where an earlier request put a breakpoint (cachedEnds), so the head
    // cut there is a candidate too: the price decides.
    const aligned = fitting.findLastIndex((it) => endOf(it) % RANGE_SIZE === 0);
    const cachedAt = fitting.findLastIndex((it) => previous.cachedEnds.has(endOf(it)));
    const heads = [aligned >= 0 ? fitting.slice(0, aligned + 1) : fitting];
    if (cachedAt >= 0 && cachedAt + 1 !== heads[0]!.length) heads.push(fitting.slice(0, cachedAt + 1));
    for (const head of heads.filter((h) => h.length > 0)) {
      // denser: the same head cut at its first raw range that has a usable summary now, the summaries from there.
      const cut = await firstSummarizable(head, summaries);
      if (cut > 0) {
        const dense = head.slice(0, cut);
        await extendHead(dense, summaries, fitsLow, tailFloor);
        shapes.push(fillTail('denser', dense, whole.items, low, budgetBytes, previous));
      }
      await extendHead(head, summaries, fitsLow, tailFloor);
      shapes.push(fillTail('kept', head, whole.items, low, budgetBytes, previous));
    }
  }
  // block: the newest usable summaries, consecutive, newest first while they fit beside the newest item.
  const block: SummaryItem[] = [];
  for (const fromPair of await summaries.ranges(tailFloor)) {
    if (block.length > 0 && fromPair !== block[0]!.fromPair - RANGE_SIZE) break;
    const item = await summaries.at(fromPair);
    if (item === null) {
      if (block.length > 0) break;
      continue;
    }
    if (!fitsLow([item, ...block])) break;
    block.unshift(item);
  }
  if (block.length > 0) shapes.push(fillTail('block', block, whole.items, low, budgetBytes, previous));
  shapes.push(fillTail('newest', [], whole.items, low, budgetBytes, previous));
  if (wholeIsShape && whole.omitted.length === 0) {
    const bytes = messagesBytes(toAnthropicMessages(whole));
    const read = cachedBytes(whole.items, [], previous);
    shapes.push({ kind: 'newest', head: [], tail: whole.items, bytes, cost: requestCost({ read, written: bytes - read, uncached: 0 }), users: userMessages(whole.items) });
  }

  // The cheapest shape that carries as many of the user's messages as today's projection; if none
  // does, the one that carries the most; a shape that costs more than the cheapest only when what
  // the projection has saved so far pays for it (the ledger stays in credit).
  const fits = shapes.filter((s) => s.tail.length > 0).sort((x, y) => x.cost - y.cost || y.users - x.users);
  const today = userMessages(whole.items);
  // Every shape is affordable to a first layout (no ledger yet); to a rewrite with a layout in the
  // cache, or after an edit in its prefix, only within the ledger.
  const affordable = fits.filter((s) => (previous === null && !wholeIsShape) || ledgerAllows({ saved, wholeCost, cost: s.cost }));
  const chosen = affordable.length > 0
    ? affordable.find((s) => s.users >= today) ?? [...affordable].sort((x, y) => y.users - x.users || x.cost - y.cost)[0]!
    : [...fits, ...(previous === null ? [] : cachedHeads(previous, whole.items, low, budgetBytes))].sort((x, y) => x.cost - y.cost || y.users - x.users)[0]!;

  const items = [...chosen.head, ...chosen.tail];
  const omitted = shapeSpans(chosen.head, chosen.tail);
  const bytes = messagesBytes(toAnthropicMessages({ items, omitted }));
  if (bytes !== chosen.bytes || bytes > budgetBytes) {
    throw new Error(`sourcebound: stable layout accounted ${chosen.bytes} bytes but the adapter produced ${bytes} (budget ${budgetBytes})`);
  }
  const tailStart = firstPairOf(chosen.tail[0]!);
  // Whole ranges the kept head shows raw although a summary is usable: they wait for a rewrite that pays.
  const keptRaw: SummaryNotUsed[] = [];
  for (const it of chosen.head) {
    if (it.kind !== 'pair' || it.pairIndex % RANGE_SIZE !== 0 || endOf(chosen.head.at(-1)!) < it.pairIndex + RANGE_SIZE) continue;
    const summary = await summaries.at(it.pairIndex);
    if (summary !== null) keptRaw.push({ fromPair: it.pairIndex, toPair: summary.toPair, reason: 'kept_raw_for_cache', recordId: summary.recordId });
  }
  const notUsed = [...keptRaw, ...whole.summaryNotUsed.filter((n) => n.fromPair >= tailStart)];
  const result: WalkResult = { items, omitted, summaryNotUsed: notUsed, problems: [] };
  return { walk: result, rewrite: why, save: layoutOf(result, count, ledgerAfter(bytes, chosen.cost)), lowWater: low };
}

/**
 * The whole history's bytes now, at least, and what its request would cost
 * this turn. At a budget rewrite, the previous layout extended to now plus
 * what the ledger says it left out (both sides grew by the same pairs since);
 * otherwise (no layout, or one that no longer holds) from the texts' lengths
 * in the database, a read of every pair's row: once per conversation and
 * budget, and after an edit in the prefix.
 */
async function wholeHistory(
  db: Queryable, args: StableArgs, walked: WalkResult, previous: PreviousLayout | null, ledger: CacheLedger | null,
): Promise<{ wholeBytes: number; wholeCost: number }> {
  const newest = walked.items.at(-1);
  const newestBytes = newest?.kind === 'pair' && newest.pairIndex === args.count - 1 ? itemBytes(newest) : null;
  if (previous?.extendedBytes != null && ledger !== null && newestBytes !== null) {
    const wholeBytes = previous.extendedBytes + ledger.savesBytes;
    return { wholeBytes, wholeCost: wholeHistoryCost(wholeBytes, newestBytes) };
  }
  // Nothing to read: no pairs; or a layout that is not stored, where only the ledger needs the size (with
  // no layout to extend, every shape may be taken).
  if (args.count === 0 || (!args.persist && previous === null)) return { wholeBytes: 0, wholeCost: 0 };
  const history = await projectionHistoryBytesRead(db, { conversationId: args.conversationId, scope: args.scope, beforePair: args.count }, args.onRead);
  const wholeBytes = history.pairs === 0 ? 0 : 1 + history.pairs * EMPTY_PAIR_BYTES + history.textBytes + BREAKPOINT_BYTES;
  return { wholeBytes, wholeCost: wholeHistoryCost(wholeBytes, history.pairs === 0 ? 0 : EMPTY_PAIR_BYTES + history.newestTextBytes) };
}

/** A candidate layout of a rewrite: a head, a gap if the tail does not reach it, the tail. */
interface Shape {
  kind: 'kept' | 'denser' | 'block' | 'newest';
  head: ProjectionItem[];
  tail: ProjectionItem[];
  bytes: number;
  /** The price of the rewrite's request history: what of its start is in the cache read (cachedBytes), the rest written. */
  cost: number;
  /** Verbatim user messages (pairs covered). */
  users: number;
}

/**
 * When every shape down to the low-water mark costs more than the ledger can
 * pay (the newest exchanges grew so that the cached head no longer fits the
 * low-water mark beside them): the previous history up to each place the
 * cache holds it (a breakpoint, previous.cachedEnds), beside the newest items
 * within the budget. Such a head is read, not written; its layout leaves less
 * room, so the next rewrite comes sooner, but no request costs more than
 * needed now.
 */
function cachedHeads(previous: PreviousLayout, newestFirstItems: readonly ProjectionItem[], low: number, budget: number): Shape[] {
  const newest = newestFirstItems.at(-1)!;
  const shapes: Shape[] = [];
  previous.head.forEach((item, k) => {
    if (!previous.cachedEnds.has(endOf(item)) || endOf(item) > firstPairOf(newest)) return;
    const head = previous.head.slice(0, k + 1);
    if (shapeBytes(head, [newest]) <= budget) shapes.push(fillTail('kept', head, newestFirstItems, low, budget, previous));
  });
  return shapes.filter((s) => s.tail.length > 0);
}

/** The head, and the newest items after it that fit `low` (the first one up to the whole budget). */
function fillTail(
  kind: Shape['kind'], head: ProjectionItem[], newestFirstItems: readonly ProjectionItem[], low: number, budget: number,
  previous: PreviousLayout | null,
): Shape {
  const from = head.length === 0 ? 0 : endOf(head.at(-1)!);
  const tail: ProjectionItem[] = [];
  for (let i = newestFirstItems.length - 1; i >= 0; i--) {
    const item = newestFirstItems[i]!;
    if (firstPairOf(item) < from) break;
    const bytes = shapeBytes(head, [item, ...tail]);
    if (bytes > budget || (tail.length > 0 && bytes > low)) break;
    tail.unshift(item);
  }
  const bytes = tail.length === 0 ? Number.POSITIVE_INFINITY : shapeBytes(head, tail);
  const read = tail.length === 0 ? 0 : cachedBytes(head, tail, previous);
  const cost = requestCost({ read, written: bytes - read, uncached: 0 });
  return { kind, head, tail, bytes, cost, users: userMessages(head) + userMessages(tail) };
}

/** The index of the head's first raw pair that starts a range with a usable summary now, else -1. */
async function firstSummarizable(head: readonly ProjectionItem[], summaries: ReturnType<typeof summaryFinder>): Promise<number> {
  for (let i = 0; i + RANGE_SIZE <= head.length; i++) {
    const it = head[i]!;
    if (it.kind !== 'pair' || it.pairIndex % RANGE_SIZE !== 0 || head[i + RANGE_SIZE - 1]?.kind !== 'pair') continue;
    if (await summaries.at(it.pairIndex) !== null) return i;
  }
  return -1;
}

/** Appends to the head the usable summaries of the ranges right after it, while `fits` and older than `before`. */
async function extendHead(
  head: ProjectionItem[], summaries: ReturnType<typeof summaryFinder>, fits: (head: ProjectionItem[]) => boolean, before: number,
): Promise<void> {
  for (let at = endOf(head.at(-1)!); at % RANGE_SIZE === 0 && at + RANGE_SIZE <= before; at += RANGE_SIZE) {
    const item = await summaries.at(at);
    if (item === null || !fits([...head, item])) return;
    head.push(item);
  }
}

/**
 * Usable summaries for a rewrite: those the newest-first walk placed, else
 * read (completed records of ranges older than the newest pair, newest
 * first, then the range's texts for its binding).
 */
function summaryFinder(db: Queryable, args: StableArgs, walked: readonly ProjectionItem[]) {
  const { conversationId, scope, count, onRead } = args;
  const placed = new Map(walked.flatMap((it) => (it.kind === 'summary' ? [[it.fromPair, it] as const] : [])));
  const texts = textsLoader(db, args, new Map());
  let records: Promise<ProjectionSummaryRow[]> | null = null;
  const read = (): Promise<ProjectionSummaryRow[]> => {
    records ??= completedSummariesBeforeRead(db, { conversationId, scope, beforePair: count, limit: MAX_BLOCK_RANGES }, onRead);
    return records;
  };
  const found = new Map<number, SummaryItem | null>();
  return {
    /** Ranges with a completed record ending before `before`, newest first. */
    async ranges(before: number): Promise<number[]> {
      const all = new Set([...placed.keys(), ...(await read()).map((r) => r.fromPair)]);
      return [...all].filter((f) => f + RANGE_SIZE <= before).sort((x, y) => y - x);
    },
    /** The range's summary item if one of its records is usable now, else null. */
    async at(fromPair: number): Promise<SummaryItem | null> {
      const known = placed.get(fromPair) ?? found.get(fromPair);
      if (known !== undefined) return known;
      let item: SummaryItem | null = null;
      for (const record of (await read()).filter((r) => r.fromPair === fromPair)) {
        item = await usableSummary(record, fromPair, count, texts);
        if (item !== null) break;
      }
      found.set(fromPair, item);
      return item;
    },
  };
}

/**
 * Bytes at the start of a shape that its request reads from the prompt cache. A cache holds an entry
 * only where an earlier request put a breakpoint (previous.cachedEnds), and a request finds one only
 * looking back at most CACHE_LOOKBACK_BLOCKS content blocks from a breakpoint of its own: here the
 * end of the head before a gap, or the end of the history. So: the longest prefix of the shape that
 * is a prefix of the previous layout's head and ends at such a place within the lookback; else
 * nothing (the whole history is written again).
 */
function cachedBytes(head: readonly ProjectionItem[], tail: readonly ProjectionItem[], previous: PreviousLayout | null): number {
  if (previous === null) return 0;
  const gap = head.length > 0 && tail.length > 0 && firstPairOf(tail[0]!) > endOf(head.at(-1)!);
  const upTo = gap ? head : [...head, ...tail];
  let same = 0;
  while (same < Math.min(upTo.length, previous.head.length) && sameItem(upTo[same]!, previous.head[same]!)) same += 1;
  let blocks = 0;
  for (let k = upTo.length - 1; k >= 0 && blocks <= CACHE_LOOKBACK_BLOCKS; k--) {
    if (k < same && previous.cachedEnds.has(endOf(upTo[k]!))) return shapeBytes(upTo.slice(0, k + 1), []);
    blocks += blocksOf(upTo[k]!);
  }
  return 0;
}

/** The same item of one snapshot: the same pair, or the same record's summary of the same range. */
function sameItem(a: ProjectionItem, b: ProjectionItem): boolean {
  if (a.kind === 'pair') return b.kind === 'pair' && a.pairIndex === b.pairIndex;
  return b.kind === 'summary' && a.fromPair === b.fromPair && a.recordId === b.recordId;
}

/** Content blocks of an item's two turns. */
function blocksOf(item: ProjectionItem): number {
  return item.kind === 'pair' ? 2 : item.userMessages.length + 2;
}

/** The pair after an item's last. */
function endOf(item: ProjectionItem): number {
  return item.kind === 'pair' ? item.pairIndex + 1 : item.toPair + 1;
}

/** The omitted spans of a head and a tail: before the first item, and between them. */
function shapeSpans(head: readonly ProjectionItem[], tail: readonly ProjectionItem[]): OmittedSpan[] {
  const first = head[0] ?? tail[0];
  if (first === undefined) return [];
  const headEnd = head.length === 0 ? null : endOf(head.at(-1)!);
  const tailStart = tail.length === 0 ? null : firstPairOf(tail[0]!);
  const gaps = headEnd !== null && tailStart !== null && headEnd < tailStart ? [{ fromPair: headEnd, toPair: tailStart - 1 }] : [];
  return spansOf(firstPairOf(first), gaps);
}

/** Bytes the adapter produces for a head and a tail (notes and breakpoints included), without serializing them. */
function shapeBytes(head: readonly ProjectionItem[], tail: readonly ProjectionItem[]): number {
  const items = [...head, ...tail];
  if (items.length === 0) return 0;
  let bytes = 1 + items.reduce((n, it) => n + itemBytes(it), 0) + BREAKPOINT_BYTES;
  let gapMark = -1;
  for (const span of shapeSpans(head, tail)) {
    // The note before the first item; a gap's note, and the breakpoint on the item before it.
    if (span.fromPair === 0 && span.toPair + 1 === firstPairOf(items[0]!)) {
      bytes += noteBytes(span.toPair + 1);
    } else {
      bytes += gapNoteBytes(span.fromPair, span.toPair) + BREAKPOINT_BYTES;
      gapMark = head.length - 1;
    }
  }
  // The breakpoint after the newest summary (one a place: none more where the gap's is).
  const summaryMark = newestSummaryMark(items);
  if (summaryMark !== null && summaryMark !== gapMark) bytes += BREAKPOINT_BYTES;
  return bytes;
}

/** Verbatim user messages in some items. */
function userMessages(items: readonly ProjectionItem[]): number {
  return items.reduce((n, it) => n + (it.kind === 'pair' ? 1 : it.userMessages.length), 0);
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
  return smallerThanOriginal(itemBytes(item), full) ? item : null;
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

function layoutOf(result: WalkResult, count: number, ledger: Pick<ProjectionLayoutRow, 'savedCost' | 'savesBytes'>): ProjectionLayoutRow {
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
    // The head alone (before the first gap), with the note about what precedes it: what keep() checks
    // when something after it changed.
    headSha256: gaps.length === 0 || result.items.length === 0
      ? null : layoutHash(result.items.filter((it) => firstPairOf(it) < gaps[0]!.fromPair), spansOf(startPair, [])),
    ...ledger,
  };
}

/** SHA-256 of the messages a layout's items produce (notes included, breakpoints not: they move every turn). */
function layoutHash(items: ProjectionItem[], omitted: OmittedSpan[]): string {
  return createHash('sha256').update(JSON.stringify(toAnthropicMessages({ items, omitted }, { cacheBreakpoint: false }))).digest('hex');
}
