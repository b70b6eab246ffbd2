import type { ReceiptSettlement } from '../db/queries/run-receipts.ts';
import { RUN_PROMPT_VERSION } from '../gateway/prompts.ts';
import { checkedAnswer, conformOutcome } from '../gateway/gateway.ts';
import type { MaterialItem, Outcome, Summarizer } from '../support/summary-contract.ts';
import { toWellFormed } from '../gateway/text.ts';

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
    controller.signal.addEventListener(
      'abort',
      () =>
        resolve({
          kind: 'unknown',
          reason: why === 'deadline' ? `deadline_exceeded:${deadlineMs}ms` : 'cancelled_after_send',
          requestId: null,
        }),
      { once: true },
    );
  });
  try {
    const call = Promise.resolve().then(() =>
      summarizer.summarize({
        promptVersion: RUN_PROMPT_VERSION,
        items,
        maxChars,
        deadlineMs,
        signal: controller.signal,
      }),
    );
    return checked(conformOutcome(await Promise.race([call, stopped]), summarizer.model), maxChars);
  } catch (error) {
    return conformOutcome(
      { kind: 'unknown', reason: `summarizer_threw:${error instanceof Error ? error.message : String(error)}`, requestId: null },
      summarizer.model,
    );
  } finally {
    clearTimeout(timer);
    signal?.removeEventListener('abort', onAbort);
  }
}

/**
 * The gateway's judgement of an answer (checkedAnswer: blank, NUL, over
 * `maxChars`), its text then in the form a text column stores it (a lone
 * surrogate becomes U+FFFD), so the recovered request equals the one returned
 * now.
 */
function checked(outcome: Outcome, maxChars: number): Outcome {
  const judged = checkedAnswer(outcome, maxChars);
  if (judged.kind !== 'ok') return judged;
  const text = toWellFormed(judged.text);
  return text === judged.text ? judged : { ...judged, text };
}

/**
 * The character limit to tell the summarizer for an allowance in bytes (the
 * design's cap is 6,000 *bytes* (docs/runs.md); the summarizer contract counts characters). A
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
        status: outcome.kind,
        reason: outcome.kind === 'invalid' ? outcome.reason : null,
        summary: outcome.kind === 'ok' ? outcome.text : null,
        answerModel: outcome.model,
        providerRequestId: outcome.requestId,
        usage: outcome.usage,
        chargedRequests: 1,
        chargedTokens: used,
        notBefore: null,
        grounding: outcome.grounding ?? null,
      };
    }
    case 'unknown':
      return {
        status: 'unknown',
        reason: outcome.reason,
        summary: null,
        answerModel: null,
        providerRequestId: outcome.requestId,
        usage: null,
        chargedRequests: 1,
        chargedTokens: reservedTokens,
        notBefore: null,
      };
    case 'deferred':
      return {
        status: 'deferred',
        reason: outcome.reason,
        summary: null,
        answerModel: null,
        providerRequestId: null,
        usage: null,
        chargedRequests: 0,
        chargedTokens: 0,
        notBefore: outcome.retryAfterMs === null ? null : new Date(now + outcome.retryAfterMs),
      };
    case 'config':
      return {
        status: 'config',
        reason: outcome.reason,
        summary: null,
        answerModel: null,
        providerRequestId: null,
        usage: null,
        chargedRequests: 0,
        chargedTokens: 0,
        notBefore: null,
      };
  }
}
