import {
  pairsPageRead, summariesForRangesRead, type ProjectionPairRow, type ProjectionSummaryRow, type Queryable, type ReadObserver,
} from '../db/queries/projection.ts';
import { RANGE_SIZE, RAW_TAIL } from '../plan.ts';
import { BREAKPOINT_BYTES, itemBytes, messagesBytes, noteBytes, toAnthropicMessages } from './anthropic.ts';
import { byPreference, currentIds, mostTelling, recordHashCheck, recordIdCheck, sameIds } from './binding.ts';
import type { OmittedSpan, PairItem, ProjectionItem, ProjectionProblem, SummaryItem, SummaryNotUsed, SummaryNotUsedReason } from './types.ts';
import { summaryLabel } from './wording.ts';

/**
 * The newest-first walk (DESIGN.md "Projection", seed Cases B and C): the
 * history a budget holds, laid out anew. The stable mode (layout.ts) uses it
 * for every rewrite; the newest-first mode uses it on every call.
 *
 * The walk goes from the newest pair to the oldest, range by range (ranges of
 * ten aligned on multiples of ten; the newest may be shorter):
 * - a range with a usable summary (binding.ts; plannable for the current pair
 *   count; its candidate smaller than its ten original pairs) is offered as
 *   one item: its ten user messages verbatim + the labelled summary;
 * - if that item does not fit, or the range has no usable summary, the
 *   range's original pairs are offered one by one, newest first.
 * The walk stops at the first thing it cannot include, or once the history
 * has reached `fillTo` bytes; everything older is omitted. It never skips a
 * big pair to take an older small one, so the projection is always a
 * contiguous newest suffix of the conversation. Because a summary is used
 * only when it is smaller than its originals, more budget never carries
 * fewer pairs.
 *
 * Budget rule: the adapter's bytes (toAnthropicMessages with its default
 * breakpoint, the note about omitted history and every label included) never
 * exceed budgetBytes. Item costs come from the adapter's own serialization
 * (itemBytes). An item whose oldest pair is f is taken only if everything so
 * far, the item, the note for f omitted pairs (none when f is 0) and the
 * breakpoint fit: if it is the last item taken, that is exactly the final
 * request, so the accounting is exact (the breakpoint at the end of the newest
 * summary, when newer items follow it, is charged with that summary).
 * Reserving the note never costs an older pair: the note (111 bytes at most)
 * is smaller than the cheapest item.
 *
 * Cost follows the budget, not the conversation: pages of pairs are read by
 * pair_index newest first, sized from what the pairs so far cost, at most
 * MAX_PAGE_RANGES ranges; a pair's texts are only transferred when its size
 * could fit what is left; summary records are read only for the ranges of a
 * page; hashes only for ranges the walk reaches whose records pass the id checks.
 *
 * A stored inconsistency (a gap in the pair index, pairs that changed between
 * two reads of one call) never throws: the walk keeps what it has proven, takes
 * the pairs it can still prove in order, and stops there with a problem that
 * names the repair.
 */

/** The most ranges one page reads (100 pairs): a bound on what the walk reads beyond what it includes. */
export const MAX_PAGE_RANGES = 10;

export type TextPair = ProjectionPairRow & { userText: string; assistantText: string };

export interface WalkArgs {
  conversationId: string;
  scope: string;
  /** Eligible pairs now. */
  count: number;
  budgetBytes: number;
  /** Stop taking items once the history reaches this many bytes (<= budgetBytes). */
  fillTo: number;
  onRead: ReadObserver | undefined;
}

export interface WalkResult {
  /** Oldest first. */
  items: ProjectionItem[];
  /** Every pair not in items, as spans, oldest first (the walk's: at most one, before its oldest item). */
  omitted: OmittedSpan[];
  /** Oldest first. */
  summaryNotUsed: SummaryNotUsed[];
  problems: ProjectionProblem[];
}

interface LoadedRange {
  pairs: ProjectionPairRow[];
  records: ProjectionSummaryRow[];
}

// The cheapest item there can be: a pair of one-byte texts (eligible texts are never empty).
const MIN_ITEM_BYTES = itemBytes({
  kind: 'pair', pairIndex: 0, runId: '', userMessageId: '', assistantMessageId: '', userText: 'x', assistantText: 'x',
});

/** Bytes of a history with items of summed cost `used` whose oldest pair is `oldest` (0 for no items). */
export function historyBytes(used: number, itemCount: number, oldest: number): number {
  return itemCount === 0 ? 0 : 1 + used + (oldest > 0 ? noteBytes(oldest) : 0) + BREAKPOINT_BYTES;
}

/** Whether a range is plannable for a pair count (never inside the newest 20): only then may its summary be used. */
export function plannableFor(fromPair: number, count: number): boolean {
  return fromPair + RANGE_SIZE - 1 < count - RAW_TAIL;
}

export async function walk(db: Queryable, args: WalkArgs): Promise<WalkResult> {
  const { conversationId, scope, count, budgetBytes: budget, onRead } = args;
  const fillTo = Math.min(args.fillTo, budget);

  let used = 0; // summed itemBytes of the items taken
  let taken = 0;
  let summaries = 0; // summary items taken
  let oldest = count; // pairs oldest..count-1 are in the projection
  const newestFirst: ProjectionItem[] = [];
  const notUsed: SummaryNotUsed[] = [];
  const problems: ProjectionProblem[] = [];
  const loaded = new Map<number, LoadedRange>();

  // Taking an item whose oldest pair is fromPair leaves fromPair pairs omitted: the note says so.
  const fits = (cost: number, fromPair: number) => 1 + used + cost + (fromPair === 0 ? 0 : noteBytes(fromPair)) + BREAKPOINT_BYTES <= budget;
  const full = () => taken > 0 && historyBytes(used, taken, oldest) >= fillTo;
  const take = (item: ProjectionItem, cost: number, fromPair: number) => {
    newestFirst.push(item);
    used += cost;
    taken += 1;
    if (item.kind === 'summary') summaries += 1;
    oldest = fromPair;
  };
  const problem = (p: ProjectionProblem) => {
    problems.push(p);
  };

  /** Ranges for the next page: about what the rest of the fill holds at the cost per pair so far. */
  const pageRanges = (): number => {
    const covered = count - oldest;
    if (covered === 0) return 1;
    const pairsLeft = (fillTo - 1 - used - noteBytes(oldest)) / (used / covered);
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

  /** The range's pairs with all their texts (read again without the size limit if some were left out); null if they changed. */
  const withTexts = async (k: number, range: LoadedRange): Promise<TextPair[] | null> => {
    if (range.pairs.every(hasTexts)) return range.pairs as TextPair[];
    const fromPair = k * RANGE_SIZE;
    const toPair = fromPair + range.pairs.length - 1;
    const all = await pairsPageRead(db, { conversationId, scope, fromPair, toPair, maxTextBytes: null }, onRead);
    if (!contiguous(all, fromPair, toPair) || !sameIds(currentIds(all), currentIds(range.pairs))) return null;
    return all as TextPair[];
  };

  const verdict = (k: number, range: LoadedRange) =>
    judgeRange({ fromPair: k * RANGE_SIZE, pairs: range.pairs, records: range.records, count, texts: () => withTexts(k, range) });

  let omittedReason: OmittedSpan['reason'] = 'budget';
  walking: for (let k = Math.floor((count - 1) / RANGE_SIZE); k >= 0; k--) {
    if (!fits(MIN_ITEM_BYTES, 0) || full()) break;
    if (!loaded.has(k)) await loadPage(k);
    const range = loaded.get(k)!;
    const fromPair = k * RANGE_SIZE;
    const toPair = Math.min(fromPair + RANGE_SIZE - 1, count - 1);

    if (!contiguous(range.pairs, fromPair, toPair)) {
      // Take the newest pairs that are still in order, then stop: nothing older can be placed.
      const provable = newestInOrder(range.pairs, toPair);
      for (const row of provable) {
        if (!hasTexts(row) || !fits(itemBytes(pairItem(row)), row.pairIndex) || full()) break;
        take(pairItem(row), itemBytes(pairItem(row)), row.pairIndex);
      }
      problem({
        kind: 'pair_index_gap', atPair: oldest - 1,
        message: `the pair index of conversation ${conversationId} has a gap at or before pair ${oldest - 1} ` +
          `(pairs_drift() reports the rows); run \`sourcebound repair ${conversationId} --scope ${scope}\``,
      });
      omittedReason = 'inconsistent';
      break;
    }

    const v = await verdict(k, range);
    if (v === 'changed') {
      problem({
        kind: 'pairs_changed_during_read', atPair: toPair,
        message: 'the pairs changed while the projection read them; pass a pg.Pool (one REPEATABLE READ snapshot) or retry',
      });
      omittedReason = 'inconsistent';
      break;
    }
    if (v.usable) {
      const item = summaryItem(v.record, v.pairs);
      const cost = itemBytes(item);
      // The newest summary gets a breakpoint at its end when newer items follow it (the adapter's rule).
      const mark = taken > 0 && summaries === 0 ? BREAKPOINT_BYTES : 0;
      if (!smallerThanOriginal(cost, v.pairs)) {
        notUsed.push({ fromPair, toPair, reason: 'larger_than_original', recordId: v.record.id });
      } else if (fits(cost + mark, fromPair)) {
        take(item, cost + mark, fromPair);
        continue;
      } else {
        notUsed.push({ fromPair, toPair, reason: 'does_not_fit', recordId: v.record.id });
      }
    } else {
      notUsed.push({ fromPair, toPair, reason: v.reason, ...(v.recordId === undefined ? {} : { recordId: v.recordId }) });
    }

    const rows: readonly ProjectionPairRow[] = v.pairs ?? range.pairs;
    for (let i = rows.length - 1; i >= 0; i--) {
      const row = rows[i]!;
      // No text: the pair was bigger than the budget left when its page was read.
      if (!hasTexts(row) || full()) break walking;
      const item = pairItem(row);
      const cost = itemBytes(item);
      if (!fits(cost, row.pairIndex)) break walking;
      take(item, cost, row.pairIndex);
    }
  }

  const items = newestFirst.reverse();
  const omitted: OmittedSpan[] = oldest > 0 ? [{ fromPair: 0, toPair: oldest - 1, reason: omittedReason }] : [];
  // The accounting is exact: what the walk charged is what the adapter produces.
  const bytes = messagesBytes(toAnthropicMessages({ items, omitted }));
  if (bytes !== historyBytes(used, taken, oldest) || bytes > budget) {
    throw new Error(`sourcebound: projection accounted ${historyBytes(used, taken, oldest)} bytes but the adapter produced ${bytes} (budget ${budget})`);
  }
  return { items, omitted, summaryNotUsed: notUsed.reverse(), problems };
}

export type Verdict =
  | { usable: true; record: ProjectionSummaryRow & { summary: string }; pairs: TextPair[] }
  | { usable: false; reason: SummaryNotUsedReason; recordId?: string; pairs?: TextPair[] };

/**
 * Whether a range may be shown as a summary now, and with which record
 * (binding.ts: range, status, version, ids, hash; and plannable for the
 * current pair count), or the most telling reason why not. `texts` gives the
 * range's pairs with every text (null: they changed while being read, then
 * the answer is 'changed'). Whether the summary is smaller than its
 * originals is the caller's test: it needs the item's bytes.
 */
export async function judgeRange(args: {
  fromPair: number;
  pairs: readonly ProjectionPairRow[];
  records: readonly ProjectionSummaryRow[];
  count: number;
  texts: () => Promise<TextPair[] | null>;
}): Promise<Verdict | 'changed'> {
  const { fromPair, pairs, records, count } = args;
  const ids = currentIds(pairs);
  const failures: { reason: SummaryNotUsedReason; recordId: string }[] = [];
  let all: TextPair[] | undefined;
  const completed = byPreference(records.filter((r) => r.status === 'completed'));
  if (completed.length > 0 && pairs.length === RANGE_SIZE && !plannableFor(fromPair, count)) {
    return { usable: false, reason: 'not_plannable', recordId: completed[0]!.id };
  }
  for (const record of completed) {
    const cheap = recordIdCheck(record, fromPair, ids);
    if (cheap !== null) {
      failures.push({ reason: cheap, recordId: record.id });
      continue;
    }
    if (all === undefined) {
      const read = await args.texts();
      if (read === null) return 'changed';
      all = read;
    }
    const deep = recordHashCheck(record, all);
    if (deep !== null) {
      failures.push({ reason: deep, recordId: record.id });
      continue;
    }
    return { usable: true, record: record as ProjectionSummaryRow & { summary: string }, pairs: all };
  }
  const withFull = all === undefined ? {} : { pairs: all };
  const telling = mostTelling(failures);
  if (telling !== undefined) return { usable: false, ...telling, ...withFull };
  // A failed-for-good record of this very source: it will not be summarized.
  const failed = records.find((r) => r.status === 'failed' && sameIds(r.sourceMessageIds, ids));
  if (failed !== undefined) return { usable: false, reason: 'failed', recordId: failed.id, ...withFull };
  return { usable: false, reason: pairs.length === RANGE_SIZE ? 'not_yet_summarized' : 'incomplete_range', ...withFull };
}

/**
 * Whether a summary item of `cost` bytes is smaller than its range's original pairs, counting the
 * breakpoint it may carry (the newest summary's): so a summary never costs more than its originals,
 * and more budget never carries fewer pairs.
 */
export function smallerThanOriginal(cost: number, pairs: readonly TextPair[]): boolean {
  return cost + BREAKPOINT_BYTES < rawBytes(pairs);
}

/** Bytes of a range's pairs as raw items. */
export function rawBytes(pairs: readonly TextPair[]): number {
  return pairs.reduce((n, p) => n + itemBytes(pairItem(p)), 0);
}

export function pairItem(row: TextPair): PairItem {
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

export function summaryItem(record: ProjectionSummaryRow & { summary: string }, pairs: readonly TextPair[]): SummaryItem {
  return {
    kind: 'summary',
    fromPair: record.fromPair,
    toPair: record.toPair,
    recordId: record.id,
    promptVersion: record.promptVersion,
    model: record.model,
    userMessages: pairs.map((p) => ({ pairIndex: p.pairIndex, messageId: p.userMessageId, text: p.userText })),
    summary: record.summary,
    ungrounded: record.ungrounded ?? [],
    label: summaryLabel(record.fromPair, record.toPair, record.ungrounded ?? []),
  };
}

export function hasTexts(row: ProjectionPairRow): row is TextPair {
  return row.userText !== null && row.assistantText !== null;
}

/** Pair indexes are dense: fromPair..toPair, each once, in order. */
export function contiguous(pairs: readonly ProjectionPairRow[], fromPair: number, toPair: number): boolean {
  return pairs.length === toPair - fromPair + 1 && pairs.every((p, i) => p.pairIndex === fromPair + i);
}

/** The rows toPair, toPair-1, ... as long as they are present and in order, newest first. */
function newestInOrder(pairs: readonly ProjectionPairRow[], toPair: number): ProjectionPairRow[] {
  const byIndex = new Map<number, ProjectionPairRow[]>();
  for (const p of pairs) byIndex.set(p.pairIndex, [...(byIndex.get(p.pairIndex) ?? []), p]);
  const out: ProjectionPairRow[] = [];
  for (let i = toPair; byIndex.get(i)?.length === 1; i--) out.push(byIndex.get(i)![0]!);
  return out;
}
