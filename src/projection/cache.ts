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
 * How a rewrite lays the history out (the cache-stable layout,
 * src/projection/layout.ts):
 * - room: left free for the exchanges that follow, appended without touching
 *   the cached prefix. ROOM_TURNS exchanges of the conversation's average
 *   size, but at least ROOM_MIN_RATIO and at most ROOM_MAX_RATIO of the
 *   budget: with fewer than one rewrite in ten turns, at least 85% of
 *   requests extend the previous one.
 * - tail: the newest pairs, raw (TAIL_RATIO of the budget, at least one pair).
 * - the rest (the low-water mark minus the tail) may hold the summary block:
 *   the newest usable summaries older than the tail, each beside its ten user
 *   messages verbatim (ten user messages for the price of two or three raw
 *   exchanges). The block keeps its start while it grows; when it would
 *   outgrow its share it is rebuilt newest first down to BLOCK_KEEP_RATIO of it.
 * When no summary is usable the newest pairs fill the low-water mark.
 */
export const ROOM_TURNS = 10;
export const ROOM_MIN_RATIO = 0.25;
export const ROOM_MAX_RATIO = 0.6;
export const TAIL_RATIO = 0.1;
export const BLOCK_KEEP_RATIO = 0.75;

/** Bytes a rewrite leaves free for the exchanges to come; `bytesPerPair` unknown: the most room. */
export function roomBytes(budgetBytes: number, bytesPerPair = Number.NaN): number {
  const wanted = Number.isFinite(bytesPerPair) ? ROOM_TURNS * bytesPerPair : Number.POSITIVE_INFINITY;
  return Math.floor(Math.min(ROOM_MAX_RATIO * budgetBytes, Math.max(ROOM_MIN_RATIO * budgetBytes, wanted)));
}

/** The low-water mark: what a rewrite lays out at most, in bytes. */
export function lowWaterBytes(budgetBytes: number, bytesPerPair = Number.NaN): number {
  return budgetBytes - roomBytes(budgetBytes, bytesPerPair);
}

/** What one request costs: its bytes read from the cache, written to it, and sent uncached. */
export function requestCost(bytes: { read: number; written: number; uncached: number }): number {
  return bytes.read * CACHE_PRICES.read + bytes.written * CACHE_PRICES.write + bytes.uncached * CACHE_PRICES.uncached;
}

/**
 * Whether an optional rewrite of the history (summaries that became usable
 * replacing their ranges' raw pairs) pays for itself under the price model:
 * the reads it saves over the expected turns to the next rewrite exceed what
 * it costs now, writing the new prefix to the cache instead of reading the
 * current one. The expected turns are those until the current layout would
 * reach the budget, but no more than the turns it has lasted so far (a
 * conversation is expected to go on about as long as it has; one that just
 * started may end before a rewrite pays back). A forced rewrite (the budget
 * reached, the prefix changed) needs no such test.
 */
export function rewritePays(args: {
  /** Bytes of the history as it would be sent without the rewrite (its prefix is cached). */
  currentBytes: number;
  /** Bytes of the same history after the rewrite. */
  rewrittenBytes: number;
  budgetBytes: number;
  /** Bytes an exchange adds, on average. */
  bytesPerTurn: number;
  /** Turns the current layout has lasted. */
  turnsSoFar: number;
}): boolean {
  const { currentBytes, rewrittenBytes, budgetBytes } = args;
  const saved = currentBytes - rewrittenBytes;
  if (saved <= 0) return false;
  const turnsLeft = Math.min(Math.max(0, (budgetBytes - currentBytes) / Math.max(1, args.bytesPerTurn)), Math.max(0, args.turnsSoFar));
  const costNow = rewrittenBytes * CACHE_PRICES.write - currentBytes * CACHE_PRICES.read;
  return saved * CACHE_PRICES.read * turnsLeft > costNow * 2;
}
