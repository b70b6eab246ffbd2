import type { Usage } from '../support/summary-contract.ts';
import { providerText } from './text.ts';

/**
 * The values kept of what a provider sent, each bounded and storable: the
 * request id, the wait it asked for, the token usage it reported. A provider
 * (or a summarizer of the application's own) can send anything: these are
 * stored in receipts and outcomes and summed into budgets, so nothing is
 * taken as it came.
 */

/**
 * Longest wait a provider may ask for, in milliseconds (one hour). Rate
 * limits reset within minutes; a longer ask, or a broken one (`retry-after:
 * 1e13`), would park the range past any use and past what a PostgreSQL
 * timestamp holds (the commit failed with "timestamp out of range"). The job
 * comes back after an hour and asks again.
 */
export const MAX_RETRY_AFTER_MS = 60 * 60 * 1000;

/** Code points kept of a provider's request id. */
export const REQUEST_ID_MAX_CHARS = 128;

/** A request id as stored: storable and bounded, null when there is nothing left of it. */
export function storableRequestId(raw: string | null | undefined): string | null {
  if (typeof raw !== 'string') return null;
  const id = providerText(raw, REQUEST_ID_MAX_CHARS);
  return id.length > 0 ? id : null;
}

/**
 * Milliseconds the provider asked us to wait, from `retry-after-ms` or
 * `retry-after` (seconds or HTTP date), at most MAX_RETRY_AFTER_MS. A date in
 * the past (or a clock running ahead) is 0: the gateway's backoff decides then.
 */
export function retryAfterMs(headers: Headers | undefined, now: () => number): number | null {
  const ms = headers?.get('retry-after-ms');
  if (ms) {
    const value = Number.parseFloat(ms);
    if (Number.isFinite(value) && value >= 0) return capRetryAfter(value);
  }
  const after = headers?.get('retry-after');
  if (after) {
    const seconds = Number.parseFloat(after);
    if (Number.isFinite(seconds)) return seconds >= 0 ? capRetryAfter(seconds * 1000) : null;
    const date = Date.parse(after);
    if (Number.isFinite(date)) return capRetryAfter(Math.max(0, date - now()));
  }
  return null;
}

/** A non-negative wait, whole milliseconds, at most MAX_RETRY_AFTER_MS (Infinity included). */
export function capRetryAfter(ms: number): number {
  return Math.min(Math.ceil(ms), MAX_RETRY_AFTER_MS);
}

/**
 * Token counts as reported, or null unless both are non-negative safe
 * integers: they are stored (jsonb) and summed into a Run's charged tokens,
 * so `1e300` or `-5` is no usage figure at all.
 */
export function readUsage(usage: unknown, inputKey = 'input_tokens', outputKey = 'output_tokens'): Usage | null {
  if (typeof usage !== 'object' || usage === null) return null;
  const input = (usage as Record<string, unknown>)[inputKey];
  const output = (usage as Record<string, unknown>)[outputKey];
  return isTokenCount(input) && isTokenCount(output) ? { inputTokens: input, outputTokens: output } : null;
}

/** A token count worth storing: a non-negative safe integer. */
export function isTokenCount(value: unknown): value is number {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;
}
