/**
 * The prompt-cache price model, in one place (DESIGN.md "Cache stability").
 * The projection decides with it whether a rewrite of the history pays for
 * itself, and `npm run bench` (P8) prices replayed requests with it.
 *
 * Anthropic bills input tokens of a request in three kinds: tokens read from
 * the cache (0.1x the base input price), tokens written to the cache at a
 * breakpoint (1.25x, the 5-minute cache), and tokens after the last
 * breakpoint (1.0x). A request reads from the cache the longest prefix that
 * is identical to a prefix an earlier request wrote at one of its
 * breakpoints; everything from there up to its own last breakpoint is
 * written. Prices here are relative to uncached input, and sizes are UTF-8
 * bytes of the request JSON (a stand-in for tokens: every ratio the product
 * reports is between requests priced the same way).
 */

/** Relative price of one input byte, by how the cache bills it. */
export const CACHE_PRICES = Object.freeze({ read: 0.1, write: 1.25, uncached: 1.0 });

/**
 * Where a rewrite lays the history out, as a share of the budget: after a
 * rewrite the history takes about this much, so the next (budget - low-water)
 * bytes of new exchanges append without touching the cached prefix. Lower
 * means cheaper (a rewrite writes less, and comes less often) and less
 * history right after a rewrite; 0.3 meets the P8 cost goals on real replays.
 */
export const LOW_WATER_RATIO = 0.3;

/** The low-water mark of a budget, in bytes. */
export function lowWaterBytes(budgetBytes: number): number {
  return Math.floor(budgetBytes * LOW_WATER_RATIO);
}

/** What one request costs: its bytes read from the cache, written to it, and sent uncached. */
export function requestCost(bytes: { read: number; written: number; uncached: number }): number {
  return bytes.read * CACHE_PRICES.read + bytes.written * CACHE_PRICES.write + bytes.uncached * CACHE_PRICES.uncached;
}

/**
 * Whether an optional rewrite of the history (summaries that became usable
 * replacing their ranges' raw pairs) pays for itself under the price model:
 * the reads it saves over the expected turns to the next rewrite (when the
 * current layout would reach the budget) exceed what it costs now, writing
 * the new prefix to the cache instead of reading the current one. A forced
 * rewrite (the budget reached, the prefix changed) needs no such test.
 */
export function rewritePays(args: {
  /** Bytes of the history as it would be sent without the rewrite (its prefix is cached). */
  currentBytes: number;
  /** Bytes of the same history after the rewrite. */
  rewrittenBytes: number;
  budgetBytes: number;
  /** Bytes an exchange adds, on average. */
  bytesPerTurn: number;
}): boolean {
  const { currentBytes, rewrittenBytes, budgetBytes } = args;
  const saved = currentBytes - rewrittenBytes;
  if (saved <= 0) return false;
  const perTurn = Math.max(1, args.bytesPerTurn);
  const turnsLeft = Math.max(0, (budgetBytes - currentBytes) / perTurn);
  const costNow = rewrittenBytes * CACHE_PRICES.write - currentBytes * CACHE_PRICES.read;
  const readsSaved = saved * CACHE_PRICES.read * turnsLeft;
  return readsSaved > costNow;
}
