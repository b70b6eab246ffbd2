import type { Admission, Slot } from './admission.ts';
import { classifyThrown } from './classify.ts';
import { capRetryAfter, isTokenCount, storableRequestId } from './provider-fields.ts';
import { createDeferralBackoff, DEFAULT_DEFERRAL_BACKOFF, type DeferralBackoffOptions } from './deferral.ts';
import { silentGatewayLogger, type GatewayLogger } from './gateway-logger.ts';
import { codePointLength, isBlank, providerText } from './text.ts';
import { SUMMARY_CHAR_CEILING, type Outcome, type Summarizer, type SummaryRequest, type Usage } from '../support/summary-contract.ts';

/**
 * Code points kept of an outcome's reason (and model name): it is stored on
 * the attempt and the record and logged, and may carry a provider's message
 * or a thrown error's; the rest is cut, with an ellipsis.
 */
export const REASON_MAX_CHARS = 1000;

export interface GatewayOptions {
  summarizer: Summarizer;
  /** Per-process and fleet limits. (Default: none, every call goes straight through) */
  admission?: Admission | undefined;
  /** Applied when a request does not say. */
  defaults: { maxChars: number; deadlineMs: number };
  logger?: GatewayLogger | undefined;
  /** Backoff of provider deferrals with a short retry-after (deferral.ts). (Default: 1 s doubling to 5 min) */
  deferralBackoff?: Readonly<DeferralBackoffOptions> | undefined;
}

export interface Gateway {
  /** The summarizer's identity, recorded on every summary. */
  readonly model: string;
  /** Never throws: every result, including a bug in the summarizer, is an Outcome. */
  summarize(request: SummaryRequest): Promise<Outcome>;
}

/**
 * The one door to a summarizer: takes an admission slot, calls the
 * summarizer, gives the slot back, and makes sure nothing but a checked
 * summary comes out as `ok`. A throw from the summarizer is classified
 * (classifyThrown): a connection that was never made is `deferred`, an HTTP
 * status by its meaning, anything else `unknown` (it may have reached the
 * provider) with the error's name, code and message; an `ok` that breaks the contract (empty,
 * over the cap) is `invalid`, so a bug never becomes a summary. Whatever a
 * summarizer returns leaves storable (see conformOutcome()), and a provider's short
 * retry-after is backed off (deferral.ts).
 */
export function createGateway(options: GatewayOptions): Gateway {
  const { summarizer, admission, defaults } = options;
  const logger = options.logger ?? silentGatewayLogger;
  const backoff = createDeferralBackoff(options.deferralBackoff ?? DEFAULT_DEFERRAL_BACKOFF);

  async function summarize(input: SummaryRequest): Promise<Outcome> {
    const request: SummaryRequest = {
      ...input,
      // The contract's ceiling holds whatever a caller asks for.
      maxChars: Math.min(input.maxChars ?? defaults.maxChars, SUMMARY_CHAR_CEILING),
      deadlineMs: input.deadlineMs ?? defaults.deadlineMs,
    };
    const maxChars = request.maxChars!;
    let slot: Slot | null = null;
    try {
      slot = admission ? await admission.acquire(request.signal) : null;
    } catch (err) {
      // Admission promises not to throw; if it does anyway, nothing was sent: defer, loudly.
      logger.error({ err }, 'admission threw; call deferred');
      return conformOutcome(
        { kind: 'deferred', reason: `admission_error:${err instanceof Error ? err.message : String(err)}`, retryAfterMs: null },
        summarizer.model,
      );
    }
    if (admission && slot === null) {
      const reason = request.signal?.aborted ? 'aborted_before_send' : 'admission_timeout';
      logger.warn({ promptVersion: request.promptVersion, reason }, 'summary deferred: no admission slot');
      return { kind: 'deferred', reason, retryAfterMs: null };
    }
    let outcome: Outcome;
    try {
      outcome = backoff.apply(request, checkedAnswer(conformOutcome(await summarizer.summarize(request), summarizer.model), maxChars));
    } catch (err) {
      // Classified as a built-in summarizer's failure is: a connection never made is a deferral, not a spent attempt.
      outcome = backoff.apply(request, conformOutcome(classifyThrown(err, { model: summarizer.model, maxChars }), summarizer.model));
      logger.error({ err, model: summarizer.model, outcome: outcome.kind }, `summarizer threw; recorded as ${outcome.kind}`);
    } finally {
      slot?.release();
    }
    const log = outcome.kind === 'ok' ? logger.info : outcome.kind === 'config' ? logger.error : logger.warn;
    log.call(
      logger,
      { model: summarizer.model, promptVersion: request.promptVersion, outcome: describe(outcome) },
      `summary ${outcome.kind}`,
    );
    return outcome;
  }

  return { model: summarizer.model, summarize };
}

/**
 * `outcome`, unless it is an `ok` whose text breaks the contract (blank, a
 * NUL, which PostgreSQL text refuses, or over `maxChars` code points): then
 * `invalid`. The gateway and the Run's summary calls (src/run/summarize.ts)
 * both judge an answer with it.
 */
export function checkedAnswer(outcome: Outcome, maxChars: number): Outcome {
  if (outcome.kind !== 'ok') return outcome;
  const fail = (reason: string): Outcome => ({
    kind: 'invalid',
    reason: `contract:${reason}`,
    model: outcome.model,
    usage: outcome.usage,
    requestId: outcome.requestId,
  });
  if (typeof outcome.text !== 'string' || isBlank(outcome.text)) return fail('empty_text');
  if (outcome.text.includes('\u0000')) return fail('unstorable_text:U+0000');
  const length = codePointLength(outcome.text);
  if (length > maxChars) return fail(`too_long:${length}>${maxChars}`);
  return outcome;
}

/**
 * What a summarizer returned, as an Outcome whose every stored field is
 * storable, whatever the summarizer (a plain JS one included). A NUL in a
 * reason, request id or model name made the commit throw (PostgreSQL text
 * refuses it); an unbounded reason grew every attempt row; a retry-after of
 * 1e300 ms is out of a timestamp's range; a usage of 1e300 tokens is no
 * figure; an outcome of no known kind, or a field of the wrong type, made
 * the settlement fail and left its claim or receipt in flight for a lease.
 * So: no known kind is `unknown` (the request was sent and may have been
 * processed, `contract:malformed_outcome:<kind>`); a field of the wrong type
 * is the value that says nothing (null usage, no retry-after, `model` the
 * summarizer's); text fields are made storable (providerText). The answer
 * text is checked, not changed: checkedAnswer().
 */
export function conformOutcome(value: unknown, model: string): Outcome {
  const o = (value !== null && typeof value === 'object' ? value : {}) as Record<string, unknown>;
  const text = (v: unknown, fallback: string) => storableString(typeof v === 'string' && v !== '' ? v : fallback, REASON_MAX_CHARS);
  const answerModel = typeof o.model === 'string' && o.model !== '' ? storableString(o.model, REASON_MAX_CHARS) : model;
  const requestId = storableRequestId(o.requestId as string | null | undefined);
  switch (o.kind) {
    case 'ok':
      // Its grounding is checked after this call (groundOutcome), never taken from the summarizer.
      return { kind: 'ok', text: o.text as string, model: answerModel, usage: storableUsage(o.usage), requestId };
    case 'invalid':
      return {
        kind: 'invalid',
        reason: text(o.reason, 'contract:no_reason'),
        model: answerModel,
        usage: storableUsage(o.usage),
        requestId,
      };
    case 'deferred': {
      const wait = o.retryAfterMs;
      // A wait that is no number, or negative, is no wait asked for: the caller's own delay applies.
      return {
        kind: 'deferred',
        reason: text(o.reason, 'deferred'),
        retryAfterMs: typeof wait === 'number' && wait >= 0 ? capRetryAfter(wait) : null,
      };
    }
    case 'unknown':
      return { kind: 'unknown', reason: text(o.reason, 'unknown'), requestId };
    case 'config':
      return { kind: 'config', reason: text(o.reason, 'config'), status: Number.isSafeInteger(o.status) ? (o.status as number) : null };
    default:
      return {
        kind: 'unknown',
        reason: `contract:malformed_outcome:${providerText(String(o.kind ?? (value === null ? 'null' : typeof value)), 80)}`,
        requestId: null,
      };
  }
}

function storableString(value: unknown, max: number): string {
  return providerText(typeof value === 'string' ? value : String(value), max);
}

/** Usage only when both counts are real token counts (isTokenCount). */
function storableUsage(value: unknown): Usage | null {
  const usage = value as Partial<Usage> | null | undefined;
  if (usage === null || typeof usage !== 'object') return null;
  return isTokenCount(usage.inputTokens) && isTokenCount(usage.outputTokens)
    ? { inputTokens: usage.inputTokens, outputTokens: usage.outputTokens }
    : null;
}

/** The outcome without the summary text, for logs. */
function describe(outcome: Outcome): Record<string, unknown> {
  if (outcome.kind === 'ok')
    return { kind: 'ok', chars: codePointLength(outcome.text), usage: outcome.usage, requestId: outcome.requestId };
  return { ...outcome };
}
