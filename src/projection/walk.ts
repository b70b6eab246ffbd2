import type { ProjectionPairRow, ProjectionSummaryRow } from '../db/queries/projection.ts';
import type { SourcePair } from '../conversation/source-hash.ts';
import { RANGE_SIZE, RAW_TAIL } from '../conversation/plan.ts';
import { BREAKPOINT_BYTES, itemBytes } from './to-anthropic.ts';
import { byPreference, currentIds, mostTelling, recordHashCheck, recordIdCheck, sameIds } from './binding.ts';
import type { PairItem, ProjectionItem, SummaryItem, SummaryNotUsedReason } from './types.ts';
import { summaryLabel } from './wording.ts';

/**
 * What the layouts need of one range and one pair (docs/design.md "Projection (the read module)";
 * its cases): whether a range may show a summary now (judgeRange), and the
 * items a pair or a summarized range becomes.
 */

export type TextPair = ProjectionPairRow & { userText: string; assistantText: string };

/** Whether a range is plannable for a pair count (never inside the newest 20): only then may its summary be used. */
export function plannableFor(fromPair: number, count: number): boolean {
  return fromPair + RANGE_SIZE - 1 < count - RAW_TAIL;
}

export type RangeVerdict =
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
  /** sourceHash, or a memo of it (Default: sourceHash). */
  hash?: (pairs: readonly SourcePair[], version: number) => string;
}): Promise<RangeVerdict | 'changed'> {
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
    const deep = recordHashCheck(record, all, args.hash);
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
export function smallerThanOriginal(
  cost: number,
  pairs: readonly TextPair[],
  format: SizeRule = { sizeOf: itemBytes, breakpointBytes: BREAKPOINT_BYTES },
): boolean {
  return cost + format.breakpointBytes < rawBytes(pairs, format);
}

/** How a format sizes an item and a breakpoint (format.ts), Anthropic's by default. */
interface SizeRule {
  sizeOf(item: ProjectionItem): number;
  breakpointBytes: number;
}

/** Bytes of a range's pairs as raw items. */
export function rawBytes(pairs: readonly TextPair[], format: Pick<SizeRule, 'sizeOf'> = { sizeOf: itemBytes }): number {
  return pairs.reduce((n, p) => n + format.sizeOf(pairItem(p)), 0);
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

export function summaryItem(
  record: ProjectionSummaryRow & { summary: string },
  pairs: readonly Pick<TextPair, 'pairIndex' | 'userMessageId' | 'userText'>[],
): SummaryItem {
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
