/**
 * Planning (docs/design.md). A target is exactly ten
 * pairs aligned on a multiple of ten; the newest 20 pairs are never part of a
 * target; nothing is planned below 30 pairs. Planning only names ranges: a
 * summary is usable only once a completed, source-valid record exists.
 * The SQL twin is sourcebound.plannable_range_count().
 */

/** Pairs per summary range. */
export const RANGE_SIZE = 10;
/** The newest pairs that always stay raw. */
export const RAW_TAIL = 20;
/** Eligible pairs needed before the first range is plannable. */
export const FIRST_TARGET_AT = RANGE_SIZE + RAW_TAIL;

export interface PairRange {
  fromPair: number;
  toPair: number;
}

/** How many ranges are plannable with `pairCount` eligible pairs. */
export function plannableRangeCount(pairCount: number): number {
  if (!Number.isInteger(pairCount) || pairCount < 0) throw new RangeError(`pair count must be a non-negative integer, got ${pairCount}`);
  // Range k is plannable when 10k + 9 < count - 20.
  return pairCount < FIRST_TARGET_AT ? 0 : Math.floor((pairCount - FIRST_TARGET_AT) / RANGE_SIZE) + 1;
}

/** The plannable ranges, oldest first. */
export function plannableRanges(pairCount: number): PairRange[] {
  return Array.from({ length: plannableRangeCount(pairCount) }, (_, k) => rangeAt(k));
}

/** Range number k: pairs 10k..10k+9. */
export function rangeAt(k: number): PairRange {
  return { fromPair: k * RANGE_SIZE, toPair: k * RANGE_SIZE + RANGE_SIZE - 1 };
}

/** True when a range has the only shape a summary may have: ten pairs aligned on a multiple of ten. */
export function isAlignedRange(fromPair: number, toPair: number): boolean {
  return Number.isInteger(fromPair) && fromPair >= 0 && fromPair % RANGE_SIZE === 0 && toPair === fromPair + RANGE_SIZE - 1;
}
