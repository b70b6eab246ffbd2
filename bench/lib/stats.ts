/**
 * Statistics of the benchmarks. Every figure is a set of repetitions reported
 * as median, min and max; every headline is a ratio to a baseline measured in
 * the same run, round by round, so drift of the machine cancels.
 */

export interface Spread {
  median: number;
  min: number;
  max: number;
  /** Repetitions. */
  n: number;
}

/** Median, min and max of some repetitions. */
export function spread(values: readonly number[]): Spread {
  if (values.length === 0) return { median: NaN, min: NaN, max: NaN, n: 0 };
  const sorted = [...values].sort((a, b) => a - b);
  return { median: percentile(sorted, 50), min: sorted[0]!, max: sorted[sorted.length - 1]!, n: sorted.length };
}

/** The p-th percentile (0..100) of sorted values, linearly interpolated. */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return NaN;
  const rank = (p / 100) * (sorted.length - 1);
  const lo = Math.floor(rank);
  const hi = Math.ceil(rank);
  return sorted[lo]! + (sorted[hi]! - sorted[lo]!) * (rank - lo);
}

/** p50 and p99 of one repetition's samples. */
export function p50p99(samples: readonly number[]): { p50: number; p99: number } {
  const sorted = [...samples].sort((a, b) => a - b);
  return { p50: percentile(sorted, 50), p99: percentile(sorted, 99) };
}

/** Per-round ratios a[i]/b[i]: the headline of an interleaved comparison. */
export function roundRatios(a: readonly number[], b: readonly number[]): number[] {
  return a.map((x, i) => x / b[i]!);
}

/**
 * The order of the two sides in round `i`: A B, B A, A B... (each side goes
 * first half the time, so neither always runs on a warmer machine).
 */
export function sidesInRound<T>(i: number, a: T, b: T): [T, T] {
  return i % 2 === 0 ? [a, b] : [b, a];
}

/** The order of several sides in round `i`: rotated by one each round, so each goes first as often as the others. */
export function rotated<T>(i: number, sides: readonly T[]): T[] {
  const k = i % sides.length;
  return [...sides.slice(k), ...sides.slice(0, k)];
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Resolves when `check()` is true; polls every `everyMs`; throws after `timeoutMs` (benchmarks never hang). */
export async function until(check: () => boolean | Promise<boolean>, timeoutMs: number, what: string, everyMs = 5): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(everyMs);
  }
}
