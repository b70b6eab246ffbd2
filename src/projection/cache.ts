import { FILL_RATIO } from './fidelity.ts';

/**
 * The prompt-cache price model, in one place. `npm run bench` (bench/p8-cache.ts) prices
 * replayed requests with it; the layout (layout.ts) keeps its history stable
 * between rewrites so that each request reads the previous one from the cache.
 *
 * Anthropic bills input tokens of a request in three kinds: tokens read from
 * the cache (0.1x the base input price), tokens written to the cache at a
 * breakpoint (1.25x, the 5-minute cache), and tokens after the last
 * breakpoint (1.0x). A request reads from the cache the longest prefix that
 * is identical to a prefix an earlier request wrote at one of its
 * breakpoints, within the cache's lifetime (5 minutes after its last use by
 * default, 1 hour with the longer TTL); everything from there up to its own
 * last breakpoint is written. Prices here are relative to uncached input, and
 * sizes are UTF-8 bytes of the request JSON (a stand-in for tokens: every
 * ratio the product reports is between requests priced the same way).
 */

/**
 * Content blocks a request looks back from each of its breakpoints for an
 * entry an earlier request wrote (Anthropic: about 20).
 */
export const CACHE_LOOKBACK_BLOCKS = 20;

/** Relative price of one input byte, by how the cache bills it. */
export const CACHE_PRICES = Object.freeze({ read: 0.1, write: 1.25, uncached: 1.0 });

/** How long the provider's cache holds a prefix after its last use, by default (Anthropic's default cache: 5 minutes). */
export const DEFAULT_CACHE_TTL_SECONDS = 300;

/**
 * Bytes a rewrite leaves free for the exchanges to come: the budget less what
 * a rewrite fills (fidelity.ts FILL_RATIO). The more room, the rarer the
 * rewrites (each writes the history after its cached head again); the less,
 * the more of the budget each request uses. A quarter is the most the
 * fidelity rules allow.
 */
export function roomBytes(budgetBytes: number): number {
  return budgetBytes - lowWaterBytes(budgetBytes);
}

/** The low-water mark: what a rewrite fills, in bytes, when the history is larger. */
export function lowWaterBytes(budgetBytes: number): number {
  return Math.min(budgetBytes, Math.ceil(FILL_RATIO * budgetBytes));
}

/** What one request costs: its bytes read from the cache, written to it, and sent uncached. */
export function requestCost(bytes: { read: number; written: number; uncached: number }): number {
  return bytes.read * CACHE_PRICES.read + bytes.written * CACHE_PRICES.write + bytes.uncached * CACHE_PRICES.uncached;
}
