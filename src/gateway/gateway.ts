import type { Admission, Slot } from './admission.ts';
import { silentGatewayLogger, type GatewayLogger } from './logger.ts';
import { codePointLength } from './text.ts';
import { SUMMARY_CHAR_CEILING, type Outcome, type Summarizer, type SummaryRequest } from './types.ts';

export interface GatewayOptions {
  summarizer: Summarizer;
  /** Per-process and fleet limits. (Default: none, every call goes straight through) */
  admission?: Admission | undefined;
  /** Applied when a request does not say. */
  defaults: { maxChars: number; deadlineMs: number };
  logger?: GatewayLogger | undefined;
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
 * summary comes out as `ok`. A throw from the summarizer is `unknown` (it may
 * have reached the provider), and an `ok` that breaks the contract (empty,
 * over the cap) is `invalid`, so a bug never becomes a summary.
 */
export function createGateway(options: GatewayOptions): Gateway {
  const { summarizer, admission, defaults } = options;
  const logger = options.logger ?? silentGatewayLogger;

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
      return { kind: 'deferred', reason: `admission_error:${err instanceof Error ? err.message : String(err)}`, retryAfterMs: null };
    }
    if (admission && slot === null) {
      const reason = request.signal?.aborted ? 'aborted_before_send' : 'admission_timeout';
      logger.warn({ promptVersion: request.promptVersion, reason }, 'summary deferred: no admission slot');
      return { kind: 'deferred', reason, retryAfterMs: null };
    }
    let outcome: Outcome;
    try {
      outcome = checked(await summarizer.summarize(request), maxChars);
    } catch (err) {
      logger.error({ err, model: summarizer.model }, 'summarizer threw; recorded as unknown');
      outcome = { kind: 'unknown', reason: `summarizer_threw:${err instanceof Error ? err.message : String(err)}`, requestId: null };
    } finally {
      slot?.release();
    }
    const log = outcome.kind === 'ok' ? logger.info : outcome.kind === 'config' ? logger.error : logger.warn;
    log.call(logger, { model: summarizer.model, promptVersion: request.promptVersion, outcome: describe(outcome) }, `summary ${outcome.kind}`);
    return outcome;
  }

  return { model: summarizer.model, summarize };
}

/** `outcome`, unless it is an `ok` whose text breaks the contract. */
function checked(outcome: Outcome, maxChars: number): Outcome {
  if (outcome.kind !== 'ok') return outcome;
  const fail = (reason: string): Outcome => ({ kind: 'invalid', reason: `contract:${reason}`, model: outcome.model, usage: outcome.usage, requestId: outcome.requestId });
  if (typeof outcome.text !== 'string' || outcome.text.trim().length === 0) return fail('empty_text');
  const length = codePointLength(outcome.text);
  if (length > maxChars) return fail(`too_long:${length}>${maxChars}`);
  return outcome;
}

/** The outcome without the summary text, for logs. */
function describe(outcome: Outcome): Record<string, unknown> {
  if (outcome.kind === 'ok') return { kind: 'ok', chars: codePointLength(outcome.text), usage: outcome.usage, requestId: outcome.requestId };
  return { ...outcome };
}
