import type { ReceiptSettlement } from '../db/queries/run-receipts.ts';
import { RUN_PROMPT_VERSION } from '../gateway/prompts.ts';
import type { MaterialItem, Outcome, Summarizer } from '../gateway/types.ts';

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
    return checked(await Promise.race([call, stopped]), maxChars);
  } catch (error) {
    return { kind: 'unknown', reason: `summarizer_threw:${error instanceof Error ? error.message : String(error)}`, requestId: null };
  } finally {
    clearTimeout(timer);
    signal?.removeEventListener('abort', onAbort);
  }
}

/** `outcome`, unless it is an `ok` that breaks the contract (empty, or over `maxChars` code points): then `invalid`. */
function checked(outcome: Outcome, maxChars: number): Outcome {
  if (outcome.kind !== 'ok') return outcome;
  const fail = (reason: string): Outcome => ({ kind: 'invalid', reason: `contract:${reason}`, model: outcome.model, usage: outcome.usage, requestId: outcome.requestId });
  if (typeof outcome.text !== 'string' || outcome.text.trim().length === 0) return fail('empty_text');
  // PostgreSQL text cannot hold NUL; a lone surrogate would be stored as U+FFFD and the
  // recovered request would differ from the one returned now.
  if (outcome.text.includes('\u0000')) return fail('nul_character');
  const text = outcome.text.replace(LONE_SURROGATE, '\uFFFD');
  let chars = 0;
  for (const _ of text) chars++;
  if (chars > maxChars) return fail(`too_long:${chars}>${maxChars}`);
  return text === outcome.text ? outcome : { ...outcome, text };
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

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
