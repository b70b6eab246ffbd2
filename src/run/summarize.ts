import type { ReceiptSettlement } from '../db/queries/run-receipts.ts';
import { RUN_PROMPT_VERSION } from '../gateway/prompts.ts';
import type { MaterialItem, Outcome, Summarizer, Usage } from '../gateway/types.ts';
import { isBlank, providerText, toWellFormed } from '../gateway/text.ts';

/**
 * One summary request: the summarizer (the gateway, or anything with its
 * interface) called with a deadline and the caller's cancellation. Never
 * throws: a throw, a missed deadline or an abort after the call started is
 * `unknown` (the request may have been processed).
 */
export async function summaryCall(
  summarizer: Summarizer,
  items: readonly MaterialItem[],
  maxChars: number,
  deadlineMs: number,
  signal: AbortSignal | undefined,
): Promise<Outcome> {
  if (signal?.aborted) return { kind: 'deferred', reason: 'aborted_before_send', retryAfterMs: null };
  const controller = new AbortController();
  let why: 'deadline' | 'cancelled' | null = null;
  const onAbort = () => {
    why ??= 'cancelled';
    controller.abort(signal?.reason);
  };
  signal?.addEventListener('abort', onAbort, { once: true });
  const timer = setTimeout(() => {
    why ??= 'deadline';
    controller.abort(new Error('summary deadline exceeded'));
  }, deadlineMs);
  // A summarizer that ignores its signal must not hold the Run past the deadline.
  const stopped = new Promise<Outcome>((resolve) => {
    controller.signal.addEventListener('abort', () => resolve({
      kind: 'unknown',
      reason: why === 'deadline' ? `deadline_exceeded:${deadlineMs}ms` : 'cancelled_after_send',
      requestId: null,
    }), { once: true });
  });
  try {
    const call = Promise.resolve().then(() => summarizer.summarize({
      promptVersion: RUN_PROMPT_VERSION, items, maxChars, deadlineMs, signal: controller.signal,
    }));
    return checked(conformed(await Promise.race([call, stopped]), summarizer.model), maxChars);
  } catch (error) {
    return { kind: 'unknown', reason: providerText(`summarizer_threw:${error instanceof Error ? error.message : String(error)}`, 1000), requestId: null };
  } finally {
    clearTimeout(timer);
    signal?.removeEventListener('abort', onAbort);
  }
}

/** Longest reason or id kept from a summarizer's outcome (the gateway's own are far shorter). */
const OUTCOME_TEXT_CHARS = 1000;

/**
 * The outcome in the shape the receipt's settlement stores. A summarizer is
 * anything with the interface, a plain JS one included: an outcome of no known
 * kind, a `deferred` without `retryAfterMs`, usage that is not whole token
 * counts or a reason with a NUL made the settlement's statement fail, so
 * prepareRunRequest threw and left its receipt dispatched (every later call
 * saw `summary_in_flight` until the lease ran out, 150 s by default). Such
 * an outcome is read for what can be known: no known kind is `unknown` (the
 * request was sent and may have been processed), a field of the wrong type is
 * the value that says nothing (null usage, no retry-after, the summarizer's
 * own model), and text fields are made storable (providerText).
 */
function conformed(value: unknown, model: string): Outcome {
  const o = (value !== null && typeof value === 'object' ? value : {}) as Record<string, unknown>;
  const text = (v: unknown, fallback: string) => providerText(typeof v === 'string' && v !== '' ? v : fallback, OUTCOME_TEXT_CHARS);
  const id = (v: unknown) => (typeof v === 'string' && v !== '' ? providerText(v, OUTCOME_TEXT_CHARS) : null);
  const answerModel = typeof o.model === 'string' && o.model !== '' ? providerText(o.model, OUTCOME_TEXT_CHARS) : model;
  switch (o.kind) {
    case 'ok':
      // The text is judged by `checked`; its grounding is checked after this call (groundOutcome), never taken from the summarizer.
      return { kind: 'ok', text: o.text as string, model: answerModel, usage: usageOf(o.usage), requestId: id(o.requestId) };
    case 'invalid':
      return { kind: 'invalid', reason: text(o.reason, 'contract:no_reason'), model: answerModel, usage: usageOf(o.usage), requestId: id(o.requestId) };
    case 'deferred': {
      const after = o.retryAfterMs;
      // Past about 31,000 years the settlement's not_before would be an Invalid Date.
      return { kind: 'deferred', reason: text(o.reason, 'deferred'), retryAfterMs: typeof after === 'number' && after >= 0 && after < 1e15 ? after : null };
    }
    case 'unknown':
      return { kind: 'unknown', reason: text(o.reason, 'unknown'), requestId: id(o.requestId) };
    case 'config':
      return { kind: 'config', reason: text(o.reason, 'config'), status: Number.isSafeInteger(o.status) ? o.status as number : null };
    default:
      return { kind: 'unknown', reason: `contract:malformed_outcome:${providerText(String(o.kind ?? (value === null ? 'null' : typeof value)), 80)}`, requestId: null };
  }
}

/** Usage with two whole, non-negative token counts, else null (charged as unknown: the reservation). */
function usageOf(value: unknown): Usage | null {
  const u = value as { inputTokens?: unknown; outputTokens?: unknown } | null;
  const count = (v: unknown) => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
  return u !== null && typeof u === 'object' && count(u.inputTokens) && count(u.outputTokens) ? { inputTokens: u.inputTokens as number, outputTokens: u.outputTokens as number } : null;
}

/** `outcome`, unless it is an `ok` that breaks the contract (empty, or over `maxChars` code points): then `invalid`. */
function checked(outcome: Outcome, maxChars: number): Outcome {
  if (outcome.kind !== 'ok') return outcome;
  const fail = (reason: string): Outcome => ({ kind: 'invalid', reason: `contract:${reason}`, model: outcome.model, usage: outcome.usage, requestId: outcome.requestId });
  if (typeof outcome.text !== 'string' || isBlank(outcome.text)) return fail('empty_text');
  // PostgreSQL text cannot hold NUL; a lone surrogate would be stored as U+FFFD and the
  // recovered request would differ from the one returned now.
  if (outcome.text.includes('\u0000')) return fail('nul_character');
  const text = toWellFormed(outcome.text);
  let chars = 0;
  for (const _ of text) chars++;
  if (chars > maxChars) return fail(`too_long:${chars}>${maxChars}`);
  return text === outcome.text ? outcome : { ...outcome, text };
}

/**
 * The character limit to tell the summarizer for an allowance in bytes (the
 * seed's cap is 6,000 *bytes*; the summarizer contract counts characters). A
 * model writes in the script of its material, so the limit is the allowance
 * divided by the UTF-8 bytes per character of that script: the widest byte
 * length (1 to 4) held by at least 5% of the material's characters. A summary
 * of CJK material in CJK that keeps to the limit keeps to the bytes; one of
 * Latin material keeps nearly the whole allowance in characters.
 */
export function charLimitFor(allowanceBytes: number, items: readonly MaterialItem[]): number {
  const byLength = [0, 0, 0, 0, 0];
  let chars = 0;
  for (const item of items) {
    for (const ch of item.text) {
      const cp = ch.codePointAt(0)!;
      byLength[cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4]!++;
      chars++;
    }
  }
  let width = 1;
  for (let w = 4; w > 1; w--) {
    if (byLength[w]! >= chars * 0.05 && byLength[w]! > 0) {
      width = w;
      break;
    }
  }
  return Math.max(1, Math.floor(allowanceBytes / width));
}


/**
 * What an outcome costs (one place): ok, invalid and unknown spend an attempt
 * and the request; unknown is charged its whole reservation (it may have been
 * processed); deferred and config were refused before any generation and cost
 * nothing.
 */
export function settlementOf(outcome: Outcome, reservedTokens: number, now: number): ReceiptSettlement {
  switch (outcome.kind) {
    case 'ok':
    case 'invalid': {
      const used = outcome.usage ? outcome.usage.inputTokens + outcome.usage.outputTokens : reservedTokens;
      return {
        status: outcome.kind, spent: true, reason: outcome.kind === 'invalid' ? outcome.reason : null,
        summary: outcome.kind === 'ok' ? outcome.text : null, answerModel: outcome.model,
        providerRequestId: outcome.requestId, usage: outcome.usage, chargedRequests: 1, chargedTokens: used, notBefore: null,
        grounding: outcome.grounding ?? null,
      };
    }
    case 'unknown':
      return {
        status: 'unknown', spent: true, reason: outcome.reason, summary: null, answerModel: null,
        providerRequestId: outcome.requestId, usage: null, chargedRequests: 1, chargedTokens: reservedTokens, notBefore: null,
      };
    case 'deferred':
      return {
        status: 'deferred', spent: false, reason: outcome.reason, summary: null, answerModel: null, providerRequestId: null,
        usage: null, chargedRequests: 0, chargedTokens: 0,
        notBefore: outcome.retryAfterMs === null ? null : new Date(now + outcome.retryAfterMs),
      };
    case 'config':
      return {
        status: 'config', spent: false, reason: outcome.reason, summary: null, answerModel: null, providerRequestId: null,
        usage: null, chargedRequests: 0, chargedTokens: 0, notBefore: null,
      };
  }
}
