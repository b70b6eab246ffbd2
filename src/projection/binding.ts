import type { ProjectionSummaryRow } from '../db/queries/projection.ts';
import { CONVERSATION_PROMPT_VERSION, isProjectable } from '../gateway/prompts.ts';
import { codePointLength, isBlank } from '../gateway/text.ts';
import { SUMMARY_CHAR_CEILING } from '../support/summary-contract.ts';
import { sourceHash, sourceMessageIds, type SourcePair } from '../conversation/source-hash.ts';
import { isAlignedRange } from '../conversation/plan.ts';
import type { SummaryNotUsedReason } from './types.ts';

/**
 * Whether a stored summary record may be used for a range now (docs/design.md
 * "Projection (the read module)"). A record is usable only when all hold:
 * its range is ten pairs aligned on a multiple of ten, it is completed, its
 * prompt version is projectable (@2 to @5; never @1 or an unknown version),
 * its text has something visible (gateway isBlank) and is at most the
 * 6,000-character ceiling, its
 * 20 source message ids equal the current ids of the range's pairs in order
 * (user, assistant, user, assistant...), and the source hash recomputed over
 * the current texts with the record's hash version equals its source hash
 * (a hash version this build cannot compute: not usable).
 */

/**
 * When a range has several usable records: the current prompt version first,
 * then the newer prompt version (`@3` before `@2`, whenever each completed),
 * then the newer completion.
 */
export function byPreference(records: readonly ProjectionSummaryRow[]): ProjectionSummaryRow[] {
  const time = (d: Date | null) => (d === null ? -Infinity : d.getTime());
  return [...records].sort(
    (a, b) =>
      Number(b.promptVersion === CONVERSATION_PROMPT_VERSION) - Number(a.promptVersion === CONVERSATION_PROMPT_VERSION) ||
      versionNumber(b.promptVersion) - versionNumber(a.promptVersion) ||
      time(b.completedAt) - time(a.completedAt) ||
      time(b.createdAt) - time(a.createdAt) ||
      a.id.localeCompare(b.id),
  );
}

/** The n of `name@n` (-1 when there is none): versions of one prompt compare by it, never as text (`@10` after `@9`). */
function versionNumber(version: string): number {
  const n = /@(\d+)$/.exec(version);
  return n === null ? -1 : Number(n[1]);
}

/**
 * The checks that need no text: range, status, version and ids. Null when
 * they pass and only the hash is left to check.
 * @param currentIds the range's current ids (sourceMessageIds of its pairs), fewer than 20 when pairs are missing.
 */
export function recordIdCheck(record: ProjectionSummaryRow, fromPair: number, currentIds: readonly string[]): SummaryNotUsedReason | null {
  if (!isAlignedRange(record.fromPair, record.toPair) || record.fromPair !== fromPair) return 'misaligned';
  if (record.status !== 'completed' || record.summary === null || record.summary.length === 0) return 'not_yet_summarized';
  if (!isProjectable(record.promptVersion)) return 'version_not_allowed';
  // The contract's ceiling: a record over it is never projected, whatever made it.
  // (A string has at least as many UTF-16 units as code points: only a long one needs counting.)
  if (record.summary.length > SUMMARY_CHAR_CEILING && codePointLength(record.summary) > SUMMARY_CHAR_CEILING) return 'over_cap';
  // White space or invisible characters only (the database asks only for length > 0; records made
  // before the gateway's isBlank, or written by hand): it says nothing of the ten replies it would
  // replace, and a white-space text block is refused by the Messages API.
  if (isBlank(record.summary)) return 'blank';
  if (!sameIds(record.sourceMessageIds, currentIds)) return 'binding_changed';
  return null;
}

/**
 * The hash check over the range's current texts. Null when the binding holds.
 * @param hash sourceHash, or a memo of it (the reader's: the same pairs hash the same).
 */
export function recordHashCheck(
  record: ProjectionSummaryRow,
  pairs: readonly SourcePair[],
  hash: (pairs: readonly SourcePair[], version: number) => string = sourceHash,
): SummaryNotUsedReason | null {
  let computed: string;
  try {
    computed = hash(pairs, record.hashVersion);
  } catch (error) {
    if (error instanceof RangeError) return 'hash_version_unknown';
    throw error;
  }
  return computed === record.sourceHash.toLowerCase() ? null : 'binding_changed';
}

/** The current ids of a range in the order a record binds them. */
export function currentIds(pairs: readonly Pick<SourcePair, 'userMessageId' | 'assistantMessageId'>[]): string[] {
  return sourceMessageIds(pairs);
}

// When no record is usable, the range reports the most telling reason: a real
// summary whose source changed says more than one made with a banned version.
const RANK: readonly SummaryNotUsedReason[] = [
  'binding_changed',
  'hash_version_unknown',
  'over_cap',
  'blank',
  'version_not_allowed',
  'misaligned',
];

/** The most telling of several failed checks (with its record). */
export function mostTelling(
  failures: readonly { reason: SummaryNotUsedReason; recordId: string }[],
): { reason: SummaryNotUsedReason; recordId: string } | undefined {
  let best: { reason: SummaryNotUsedReason; recordId: string } | undefined;
  for (const f of failures) {
    const rank = RANK.indexOf(f.reason);
    if (rank < 0) continue;
    if (best === undefined || rank < RANK.indexOf(best.reason)) best = f;
  }
  return best;
}

/** Whether stored ids equal the current ids, in order (stored ids compared lowercase). */
export function sameIds(stored: readonly string[], current: readonly string[]): boolean {
  return stored.length === current.length && stored.every((id, i) => id === current[i] || id.toLowerCase() === current[i]);
}
