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

/**
 * Content blocks a request looks back from each of its breakpoints for an
 * entry an earlier request wrote (Anthropic: about 20). Entries are written
 * only at breakpoints, so a prefix is read only if an earlier request put a
 * breakpoint at its end and that end is this close before one of the
 * request's own breakpoints.
 */
export const CACHE_LOOKBACK_BLOCKS = 20;

/** Relative price of one input byte, by how the cache bills it. */
export const CACHE_PRICES = Object.freeze({ read: 0.1, write: 1.25, uncached: 1.0 });

/**
 * How much a rewrite leaves free (the cache-stable layout,
 * src/projection/layout.ts): ROOM for the exchanges that follow, appended
 * without touching the cached prefix: ROOM_TURNS exchanges of the
 * conversation's average size, but at least ROOM_MIN_RATIO and at most
 * ROOM_MAX_RATIO of the budget. A rewrite lays the history out down to the
 * low-water mark (the budget minus the room): with fewer than one rewrite in
 * ten turns, at least 85% of requests extend the previous one.
 */
export const ROOM_TURNS = 10;
export const ROOM_MIN_RATIO = 0.25;
export const ROOM_MAX_RATIO = 0.6;

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
 * Turns, of the next `horizon`, that a conversation which has lasted
 * `turnsSoFar` turns is expected to still have. With nothing else known, a
 * conversation that has lasted s turns goes on for n more with probability
 * s / (s + n) (it is as likely to be in its first half as in its second), so
 * the expectation is the sum of that over n = 1..horizon, about
 * s * ln(1 + horizon / s): a young conversation may end before a rewrite pays
 * back, an old one is expected to use most of the horizon.
 */
export function expectedTurns(horizon: number, turnsSoFar: number): number {
  if (!(horizon > 0) || !(turnsSoFar > 0)) return 0;
  return turnsSoFar * Math.log1p(horizon / turnsSoFar);
}

/**
 * Whether an optional rewrite of the history (summaries that became usable
 * replacing their ranges' raw pairs) pays for itself under the price model:
 * the reads it saves on the turns expected before the next forced rewrite
 * (until the current layout would reach the budget; expectedTurns) exceed
 * what it costs now: writing what follows the unchanged prefix to the cache
 * instead of reading the whole current history from it. A forced rewrite (the
 * budget reached, the prefix changed) needs no such test.
 */
export function rewritePays(args: {
  /** Bytes of the history as it would be sent without the rewrite (all of it cached). */
  currentBytes: number;
  /** Bytes of the same history after the rewrite. */
  rewrittenBytes: number;
  /** Bytes at the start the rewrite leaves as they are (still read from the cache). */
  unchangedBytes: number;
  budgetBytes: number;
  /** Bytes an exchange adds, on average. */
  bytesPerTurn: number;
  /** Turns the conversation has lasted. */
  turnsSoFar: number;
}): boolean {
  const { currentBytes, rewrittenBytes, budgetBytes } = args;
  const saved = currentBytes - rewrittenBytes;
  if (saved <= 0) return false;
  const horizon = Math.max(0, (budgetBytes - currentBytes) / Math.max(1, args.bytesPerTurn));
  const unchanged = Math.min(args.unchangedBytes, rewrittenBytes);
  const costNow = requestCost({ read: unchanged, written: rewrittenBytes - unchanged, uncached: 0 }) - requestCost({ read: currentBytes, written: 0, uncached: 0 });
  return saved * CACHE_PRICES.read * expectedTurns(horizon, args.turnsSoFar) > costNow;
}

/**
 * The projection's ledger, stored with each layout: what its requests at one
 * budget have saved against sending the whole history with a breakpoint at
 * its end (the baseline P8 prices), in uncached-byte prices.
 *
 * Between rewrites each request extends the previous one, as the whole
 * history's would, and both write the same new exchange: a request saves the
 * cache reads of the bytes the layout leaves out of the whole history
 * (`savesBytes`), so the ledger grows by `read * savesBytes` a turn without a
 * write. A rewrite adds what the whole history's request would cost less
 * what the rewrite's costs (negative when it writes more than it reads).
 *
 * A rewrite that is not forced (summaries swapped in, or a fresh layout in
 * place of the cached head) is a bet that the conversation goes on long
 * enough to pay it back; it is taken only when the ledger stays in credit
 * after paying for it, so no bet makes a conversation cost more than sending
 * its whole history would have, however soon it ends. A forced rewrite (the
 * budget reached) chooses among the layouts the ledger can pay for; when it
 * can pay for none, it takes the cheapest, counting heads read from the cache
 * (layout.ts). The whole history's size comes from the texts' UTF-8 lengths,
 * a lower bound (JSON only adds), so the ledger errs low.
 */
export interface CacheLedger {
  /** Saved up to and with the request that made the layout. */
  savedCost: number;
  /** Bytes of the whole history the layout leaves out (at least). */
  savesBytes: number;
  /** The pair count the layout was made at (its request held pairs 0..endPair-1). */
  endPair: number;
}

/** What the ledger holds before the request at pair count `count`: the layout's own, and one turn of reads saved for each request since. */
export function savedBefore(ledger: CacheLedger | null, count: number): number {
  if (ledger === null) return 0;
  return ledger.savedCost + CACHE_PRICES.read * ledger.savesBytes * Math.max(0, count - ledger.endPair - 1);
}

/** What sending the whole history costs on a turn that extends the previous one: its older bytes read, its newest exchange written. */
export function wholeHistoryCost(wholeBytes: number, newestBytes: number): number {
  const newest = Math.min(Math.max(0, newestBytes), wholeBytes);
  return requestCost({ read: wholeBytes - newest, written: newest, uncached: 0 });
}

/** Whether a rewrite that is not forced, costing `cost`, leaves the ledger in credit: what was saved, plus what the whole history would cost now, covers it. */
export function ledgerAllows(args: { saved: number; wholeCost: number; cost: number }): boolean {
  return args.saved + args.wholeCost - args.cost >= 0;
}
