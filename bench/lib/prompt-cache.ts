import { createHash } from 'node:crypto';
import { requestCost } from '../../src/projection/cache.ts';
import type { MessageParam } from '../../src/projection/index.ts';

/**
 * A prompt cache as Anthropic bills it, for replayed requests (P8), priced
 * with the product's one price model (src/projection/cache.ts):
 * - every request writes its prefix up to each of its breakpoints
 *   (`cache_control` on a message's last block) into the cache: each
 *   breakpoint is a cache entry of its own;
 * - a request reads from the cache the longest prefix, at a message
 *   boundary, that an earlier request wrote, looking back from each of its
 *   breakpoints at most LOOKBACK_BLOCKS content blocks, as Anthropic does
 *   (without a clock the 5-minute lifetime is taken as never running out:
 *   turns of an agent come faster);
 * - with a clock (`now`, milliseconds, injected: a replay's simulated time),
 *   an entry lives `ttlMs` (default 5 minutes) after it was last written or
 *   read, as Anthropic refreshes an entry each time it is used: a request
 *   after a longer pause reads nothing and writes its prefix again;
 * - bytes after what it read, up to its last breakpoint, are written
 *   (1.25x); bytes after its last breakpoint are uncached input (1.0x).
 * Sizes are UTF-8 bytes of each message's JSON without its cache_control
 * (the marker moves every turn and is not part of the cached content).
 */
export interface PricedRequest {
  bytes: number;
  read: number;
  written: number;
  uncached: number;
  cost: number;
  /** The whole history of the previous request was read from the cache (its prefix was extended). */
  extendsPrevious: boolean;
}

/** Content blocks Anthropic looks back from a breakpoint for an earlier cache entry. */
export const LOOKBACK_BLOCKS = 20;

/** Anthropic's default cache lifetime. */
export const CACHE_TTL_MS = 5 * 60_000;

export class PromptCache {
  /** Each entry's prefix hash, and when it was last written or read (0 without a clock). */
  private readonly cached = new Map<string, number>();
  private previousPrefix = 0;
  private readonly now: () => number;
  private readonly ttlMs: number;

  constructor(options: { now?: () => number; ttlMs?: number } = {}) {
    this.now = options.now ?? (() => 0);
    this.ttlMs = options.now === undefined ? Infinity : (options.ttlMs ?? CACHE_TTL_MS);
  }

  private alive(hash: string, now: number): boolean {
    const at = this.cached.get(hash);
    return at !== undefined && now - at <= this.ttlMs;
  }

  /** Prices one request and records what it writes. */
  price(messages: readonly MessageParam[]): PricedRequest {
    const now = this.now();
    const sizes: number[] = [];
    const hashes: string[] = [];
    // blocks[n]: content blocks in messages 0..n-1.
    const blocks = [0];
    const breakpoints: number[] = [];
    const hash = createHash('sha256');
    messages.forEach((m, i) => {
      let marked = false;
      const content = Array.isArray(m.content)
        ? m.content.map((b) => {
            if ('cache_control' in b && b.cache_control) marked = true;
            const { cache_control: _, ...rest } = b as typeof b & { cache_control?: unknown };
            return rest;
          })
        : m.content;
      if (marked) breakpoints.push(i);
      const json = JSON.stringify({ role: m.role, content });
      sizes.push(Buffer.byteLength(json, 'utf8'));
      blocks.push(blocks.at(-1)! + (Array.isArray(m.content) ? m.content.length : 1));
      hash.update(json).update('\u0000');
      hashes.push(hash.copy().digest('hex'));
    });
    const upTo = (n: number) => sizes.slice(0, n).reduce((a, b) => a + b, 0);
    const lastBreakpoint = breakpoints.at(-1) ?? -1;
    // The longest cached prefix within the lookback of one of the breakpoints.
    let readMessages = 0;
    for (const b of breakpoints) {
      for (let n = b + 1; n > readMessages && blocks[b + 1]! - blocks[n]! <= LOOKBACK_BLOCKS; n--) {
        if (this.alive(hashes[n - 1]!, now)) {
          readMessages = n;
          break;
        }
      }
    }
    const total = upTo(sizes.length);
    const read = upTo(readMessages);
    const cachedEnd = lastBreakpoint < 0 ? readMessages : Math.max(readMessages, lastBreakpoint + 1);
    const written = upTo(cachedEnd) - read;
    const uncached = total - read - written;
    // The entry read is refreshed; every breakpoint's is written (or refreshed) now.
    if (readMessages > 0) this.cached.set(hashes[readMessages - 1]!, now);
    for (const b of breakpoints) this.cached.set(hashes[b]!, now);
    const extendsPrevious = this.previousPrefix > 0 && read >= this.previousPrefix;
    this.previousPrefix = lastBreakpoint >= 0 ? upTo(lastBreakpoint + 1) : 0;
    return { bytes: total, read, written, uncached, cost: requestCost({ read, written, uncached }), extendsPrevious };
  }
}
