import type pg from 'pg';
import {
  conversationPairCountRead, pairsPageRead, snapshotBegin, snapshotEnd, summariesForRangesRead,
  type ProjectionPairRow, type ProjectionSummaryRow, type Queryable, type ReadObserver,
} from '../db/queries/projection.ts';
import { RANGE_SIZE } from '../plan.ts';
import { itemBytes, messagesBytes, noteBytes, toAnthropicMessages } from './anthropic.ts';
import { byPreference, currentIds, mostTelling, recordHashCheck, recordIdCheck, sameIds } from './binding.ts';
import { ConversationNotFoundError } from './errors.ts';
import type { ConversationProjection, PairItem, ProjectionItem, SummaryItem, SummaryNotUsed, SummaryNotUsedReason } from './types.ts';
import { summaryLabel } from './wording.ts';

/**
 * projectConversationHistory: the history for the next request, within a
 * byte budget (DESIGN.md "Projection (the read module)", seed Cases B and C).
 *
 * The walk goes from the newest pair to the oldest, range by range (ranges of
 * ten aligned on multiples of ten; the newest may be shorter):
 * - a range with a usable summary (src/projection/binding.ts) is offered as
 *   one item: its ten user messages verbatim + the labelled summary;
 * - if that item does not fit, or the range has no usable summary, the
 *   range's original pairs are offered one by one, newest first.
 * The walk stops at the first thing it cannot include; everything older is
 * omitted (reason `budget`). It never skips a big pair to take an older small
 * one, so the projection is always a contiguous newest suffix of the
 * conversation: whole summarized ranges and raw pairs, where the oldest range
 * may be partial (its newest pairs raw). A summarized range whose summary did
 * not fit but whose ten pairs all did is simply raw, and the walk goes on.
 *
 * Budget rule: `messagesBytes(toAnthropicMessages(result)) <= budgetBytes`,
 * i.e. the UTF-8 bytes of JSON.stringify of the adapter's messages, the note
 * about omitted history and every label included (0 for an empty history).
 * Item costs come from the adapter's own serialization (itemBytes). An item
 * whose oldest pair is f is taken only if everything so far, the item, and the
 * note for f omitted pairs (none when f is 0) fit: if it is the last item
 * taken, that is exactly the final request, so the accounting is exact, not
 * an estimate. Reserving the note never costs an older pair: the note (111
 * bytes at most, whatever N) is smaller than the cheapest item (115), so
 * whenever the older pairs would all fit without a note, the current item fits
 * with it. The result's bytes are recomputed from the adapter and checked
 * against the accounting on every call.
 *
 * Cost follows the budget, not the conversation: pages of pairs are read by
 * pair_index through the pairs index, newest first, sized from what the
 * pairs so far cost, at most MAX_PAGE_RANGES ranges; a pair's texts are only
 * transferred when its size could fit what is left; summary records are read
 * only for the ranges of a page; hashes only for ranges the walk reaches whose
 * records pass the id checks. The walk reads at most one page beyond what fits.
 */

/** The most ranges one page reads (100 pairs): a bound on what the walk reads beyond what it includes. */
export const MAX_PAGE_RANGES = 10;

export interface ProjectArgs {
  /**
   * A pg.Pool: the reads run on one connection in one REPEATABLE READ READ
   * ONLY transaction, so they all see one snapshot. Anything else with
   * `query` (a checked-out client): the reads run on it as they are, in the
   * caller's transaction (use REPEATABLE READ for a consistent snapshot).
   */
  pool: Queryable | pg.Pool;
  conversationId: string;
  /** The tenant namespace: a conversation of another scope is not found. */
  scope: string;
  /** UTF-8 bytes the history may take, as messagesBytes(toAnthropicMessages(result)) measures them. */
  budgetBytes: number;
  /** Told what each query read (cost accounting in tests and diagnostics). */
  onRead?: ReadObserver;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * Builds the history for the next request of a conversation.
 * @throws ConversationNotFoundError when no conversation has this id in this scope.
 * @throws RangeError when budgetBytes is not a non-negative safe integer.
 */
export async function projectConversationHistory(args: ProjectArgs): Promise<ConversationProjection> {
  const { budgetBytes, scope } = args;
  if (!Number.isSafeInteger(budgetBytes) || budgetBytes < 0) {
    throw new RangeError(`budgetBytes must be a non-negative integer, got ${budgetBytes}`);
  }
  if (!UUID.test(args.conversationId)) throw new ConversationNotFoundError(args.conversationId, scope);
  const conversationId = args.conversationId.toLowerCase();
  return withSnapshot(args.pool, (db) => walk(db, { conversationId, scope, budgetBytes, onRead: args.onRead }));
}

type TextPair = ProjectionPairRow & { userText: string; assistantText: string };

interface LoadedRange {
  pairs: ProjectionPairRow[];
  records: ProjectionSummaryRow[];
}

type Verdict =
  | { usable: true; record: ProjectionSummaryRow & { summary: string }; pairs: TextPair[] }
  | { usable: false; reason: SummaryNotUsedReason; recordId?: string; pairs?: TextPair[] };

// The cheapest item there can be: a pair of one-byte texts (eligible texts are never empty).
const MIN_ITEM_BYTES = itemBytes({
  kind: 'pair', pairIndex: 0, runId: '', userMessageId: '', assistantMessageId: '', userText: 'x', assistantText: 'x',
});

async function walk(
  db: Queryable,
  args: { conversationId: string; scope: string; budgetBytes: number; onRead: ReadObserver | undefined },
): Promise<ConversationProjection> {
  const { conversationId, scope, budgetBytes: budget, onRead } = args;
  const count = await conversationPairCountRead(db, conversationId, scope, onRead);
  if (count === null) throw new ConversationNotFoundError(conversationId, scope);

  let used = 0; // summed itemBytes of the items taken
  let oldest = count; // pairs oldest..count-1 are in the projection
  const newestFirst: ProjectionItem[] = [];
  const notUsed: SummaryNotUsed[] = [];
  const loaded = new Map<number, LoadedRange>();

  // Taking an item whose oldest pair is fromPair leaves fromPair pairs omitted: the note says so.
  const fits = (cost: number, fromPair: number) => 1 + used + cost + (fromPair === 0 ? 0 : noteBytes(fromPair)) <= budget;
  const take = (item: ProjectionItem, cost: number, fromPair: number) => {
    newestFirst.push(item);
    used += cost;
    oldest = fromPair;
  };

  /** Ranges for the next page: about what the rest of the budget holds at the cost per pair so far. */
  const pageRanges = (): number => {
    const covered = count - oldest;
    if (covered === 0) return 1;
    const pairsLeft = (budget - 1 - used - noteBytes(oldest)) / (used / covered);
    return Math.min(MAX_PAGE_RANGES, Math.max(1, Math.ceil(pairsLeft / RANGE_SIZE)));
  };

  const loadPage = async (kHi: number): Promise<void> => {
    const kLo = Math.max(0, kHi - pageRanges() + 1);
    const fromPair = kLo * RANGE_SIZE;
    const toPair = Math.min(kHi * RANGE_SIZE + RANGE_SIZE - 1, count - 1);
    // A pair whose texts alone exceed what is left cannot fit: its JSON is longer than its texts.
    const maxTextBytes = Math.max(0, budget - 1 - used);
    const pairs = await pairsPageRead(db, { conversationId, scope, fromPair, toPair, maxTextBytes }, onRead);
    const records = await summariesForRangesRead(db, { conversationId, scope, fromPair, toPair: kHi * RANGE_SIZE + RANGE_SIZE - 1 }, onRead);
    for (let k = kLo; k <= kHi; k++) {
      loaded.set(k, {
        pairs: pairs.filter((p) => Math.floor(p.pairIndex / RANGE_SIZE) === k),
        records: records.filter((r) => Math.floor(r.fromPair / RANGE_SIZE) === k),
      });
    }
  };

  /** The range's pairs with all their texts (read again without the size limit if some were left out). */
  const withTexts = async (k: number, range: LoadedRange): Promise<TextPair[]> => {
    if (range.pairs.every(hasTexts)) return range.pairs as TextPair[];
    const fromPair = k * RANGE_SIZE;
    const full = await pairsPageRead(db, { conversationId, scope, fromPair, toPair: fromPair + range.pairs.length - 1, maxTextBytes: null }, onRead);
    checkContiguous(full, fromPair, fromPair + range.pairs.length - 1);
    if (!sameIds(currentIds(full), currentIds(range.pairs))) throw inconsistent();
    return full as TextPair[];
  };

  const verdict = async (k: number, range: LoadedRange): Promise<Verdict> => {
    const fromPair = k * RANGE_SIZE;
    const ids = currentIds(range.pairs);
    const failures: { reason: SummaryNotUsedReason; recordId: string }[] = [];
    let full: TextPair[] | undefined;
    for (const record of byPreference(range.records.filter((r) => r.status === 'completed'))) {
      const cheap = recordIdCheck(record, fromPair, ids);
      if (cheap !== null) {
        failures.push({ reason: cheap, recordId: record.id });
        continue;
      }
      full ??= await withTexts(k, range);
      const deep = recordHashCheck(record, full);
      if (deep !== null) {
        failures.push({ reason: deep, recordId: record.id });
        continue;
      }
      return { usable: true, record: record as ProjectionSummaryRow & { summary: string }, pairs: full };
    }
    const withFull = full === undefined ? {} : { pairs: full };
    const telling = mostTelling(failures);
    if (telling !== undefined) return { usable: false, ...telling, ...withFull };
    // A failed-for-good record of this very source: it will not be summarized.
    const failed = range.records.find((r) => r.status === 'failed' && sameIds(r.sourceMessageIds, ids));
    if (failed !== undefined) return { usable: false, reason: 'failed', recordId: failed.id, ...withFull };
    return { usable: false, reason: range.pairs.length === RANGE_SIZE ? 'not_yet_summarized' : 'incomplete_range', ...withFull };
  };

  walking: for (let k = Math.floor((count - 1) / RANGE_SIZE); k >= 0; k--) {
    if (!fits(MIN_ITEM_BYTES, 0)) break;
    if (!loaded.has(k)) await loadPage(k);
    const range = loaded.get(k)!;
    const fromPair = k * RANGE_SIZE;
    const toPair = Math.min(fromPair + RANGE_SIZE - 1, count - 1);
    checkContiguous(range.pairs, fromPair, toPair);

    const v = await verdict(k, range);
    if (v.usable) {
      const item = summaryItem(v.record, v.pairs);
      const cost = itemBytes(item);
      if (fits(cost, fromPair)) {
        take(item, cost, fromPair);
        continue;
      }
      notUsed.push({ fromPair, toPair, reason: 'does_not_fit', recordId: v.record.id });
    } else {
      notUsed.push({ fromPair, toPair, reason: v.reason, ...(v.recordId === undefined ? {} : { recordId: v.recordId }) });
    }

    const rows: readonly ProjectionPairRow[] = v.pairs ?? range.pairs;
    for (let i = rows.length - 1; i >= 0; i--) {
      const row = rows[i]!;
      // No text: the pair was bigger than the budget left when its page was read.
      if (!hasTexts(row)) break walking;
      const item = pairItem(row);
      const cost = itemBytes(item);
      if (!fits(cost, row.pairIndex)) break walking;
      take(item, cost, row.pairIndex);
    }
  }

  const result: ConversationProjection = {
    conversationId,
    scope,
    items: newestFirst.reverse(),
    omitted: oldest > 0 ? [{ fromPair: 0, toPair: oldest - 1, reason: 'budget' }] : [],
    summaryNotUsed: notUsed.reverse(),
    bytes: 0,
    budgetBytes: budget,
    pairCount: count,
  };
  result.bytes = messagesBytes(toAnthropicMessages(result));
  const accounted = result.items.length === 0 ? 0 : 1 + used + (oldest > 0 ? noteBytes(oldest) : 0);
  if (result.bytes !== accounted || result.bytes > budget) {
    throw new Error(`sourcebound: projection accounted ${accounted} bytes but the adapter produced ${result.bytes} (budget ${budget})`);
  }
  return result;
}

function pairItem(row: TextPair): PairItem {
  return {
    kind: 'pair',
    pairIndex: row.pairIndex,
    runId: row.runId,
    userMessageId: row.userMessageId,
    assistantMessageId: row.assistantMessageId,
    userText: row.userText,
    assistantText: row.assistantText,
  };
}

function summaryItem(record: ProjectionSummaryRow & { summary: string }, pairs: readonly TextPair[]): SummaryItem {
  return {
    kind: 'summary',
    fromPair: record.fromPair,
    toPair: record.toPair,
    recordId: record.id,
    promptVersion: record.promptVersion,
    model: record.model,
    userMessages: pairs.map((p) => ({ pairIndex: p.pairIndex, messageId: p.userMessageId, text: p.userText })),
    summary: record.summary,
    label: summaryLabel(record.fromPair, record.toPair),
  };
}

function hasTexts(row: ProjectionPairRow): row is TextPair {
  return row.userText !== null && row.assistantText !== null;
}

/** Pair indexes are dense; a gap means the reads saw two numberings (a client outside a snapshot). */
function checkContiguous(pairs: readonly ProjectionPairRow[], fromPair: number, toPair: number): void {
  if (pairs.length !== toPair - fromPair + 1 || pairs.some((p, i) => p.pairIndex !== fromPair + i)) throw inconsistent();
}

function inconsistent(): Error {
  return new Error('sourcebound: the pairs changed while the projection read them; read in one REPEATABLE READ transaction (pass a pg.Pool) or retry');
}

function isPool(db: Queryable | pg.Pool): db is pg.Pool {
  const candidate = db as Partial<pg.Pool> & { release?: unknown };
  return typeof candidate.connect === 'function' && typeof candidate.release !== 'function' && 'totalCount' in db;
}

/** Runs `fn` on one pooled connection inside one read-only snapshot, or directly on a caller's client. */
async function withSnapshot<T>(db: Queryable | pg.Pool, fn: (db: Queryable) => Promise<T>): Promise<T> {
  if (!isPool(db)) return fn(db);
  const client = await db.connect();
  let broken: Error | undefined;
  try {
    await snapshotBegin(client);
    try {
      return await fn(client);
    } finally {
      await snapshotEnd(client).catch((error: unknown) => {
        broken = error instanceof Error ? error : new Error(String(error));
      });
    }
  } finally {
    client.release(broken);
  }
}
