import { createHash } from 'node:crypto';
import { doubling, jitter } from '../support/backoff.ts';
import type { Outcome, SummaryRequest } from '../support/summary-contract.ts';

/**
 * Backoff of provider deferrals. A provider that refuses with `retry-after: 0`
 * (or a date already past, or behind a clock running ahead) would have the
 * range claimed and the model called again at once, in a loop: 400 requests
 * in 8 s to a provider that is rate-limiting us. So a deferral with a
 * provider wait waits at least `firstMs`, twice as long after each further
 * deferral of the same material in a row (jittered, so ranges refused
 * together do not come back together), up to `maxMs`; a longer wait the
 * provider asked for is kept as it is.
 *
 * "The same material" is the prompt version and the items: the identity but
 * for the model, which is this gateway's own, and the user texts, which are
 * never sent. The streaks live in this process (a bounded map), so a range
 * whose job moves to another worker starts over at `firstMs`: still a wait,
 * never a loop. A deferral without a provider wait (no `retry-after`, no
 * admission slot, a refused connection) is left to the caller's own delay.
 */
export interface DeferralBackoffOptions {
  /** Least wait after a provider deferral, in milliseconds. (Default: 1000) */
  firstMs: number;
  /** Most the doubling reaches, in milliseconds; a longer provider wait still counts. (Default: 300000) */
  maxMs: number;
}

export const DEFAULT_DEFERRAL_BACKOFF: Readonly<DeferralBackoffOptions> = Object.freeze({ firstMs: 1_000, maxMs: 300_000 });

/** Streaks kept at most; the one deferred longest ago is forgotten first. */
const MAX_STREAKS = 10_000;
/** A streak whose last deferral is this old starts over. */
const STREAK_FORGET_MS = 60 * 60 * 1000;

export interface DeferralBackoff {
  /** `outcome`, a provider deferral's wait raised to its streak's backoff; any other outcome ends the streak. */
  apply(request: SummaryRequest, outcome: Outcome): Outcome;
}

export function createDeferralBackoff(
  options: Readonly<DeferralBackoffOptions> = DEFAULT_DEFERRAL_BACKOFF,
  now: () => number = Date.now,
): DeferralBackoff {
  const streaks = new Map<string, { n: number; at: number }>();

  return {
    apply(request, outcome) {
      const providerWait = outcome.kind === 'deferred' && outcome.retryAfterMs !== null;
      // Nothing to end and nothing to start: no hashing on the common path.
      if (!providerWait && (outcome.kind === 'deferred' || streaks.size === 0)) return outcome;
      const key = materialKey(request);
      if (outcome.kind !== 'deferred') {
        streaks.delete(key);
        return outcome;
      }
      const at = now();
      const last = streaks.get(key);
      const n = last !== undefined && at - last.at < STREAK_FORGET_MS ? last.n + 1 : 1;
      // Re-inserted, so the map's order is the order of last deferral.
      streaks.delete(key);
      streaks.set(key, { n, at });
      if (streaks.size > MAX_STREAKS) streaks.delete(streaks.keys().next().value!);
      const backoff = Math.max(options.firstMs, jitter(doubling(n, options.firstMs, options.maxMs)));
      return { ...outcome, retryAfterMs: Math.max(outcome.retryAfterMs!, backoff) };
    },
  };
}

/** SHA-256 of the prompt version and the items, each length-prefixed (no two materials share a key by concatenation). */
function materialKey(request: SummaryRequest): string {
  const hash = createHash('sha256');
  for (const part of [request.promptVersion, ...request.items.flatMap((item) => [item.id, item.text])]) {
    hash.update(`${part.length}:`);
    hash.update(part);
  }
  return hash.digest('base64');
}
