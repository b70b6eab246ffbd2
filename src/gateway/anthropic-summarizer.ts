import Anthropic from '@anthropic-ai/sdk';
import { classify, type CallResult } from './classify.ts';
import { prepareSummary } from './contract.ts';
import { silentGatewayLogger, type GatewayLogger } from './gateway-logger.ts';
import type { Outcome, Summarizer, SummaryRequest } from '../support/summary-contract.ts';

export { DEFAULT_MAX_INPUT_CHARS } from './contract.ts';

export interface AnthropicSummarizerOptions {
  /** Anthropic API key. Without one every call is a `config` outcome and nothing is sent. */
  apiKey: string | null | undefined;
  /** Messages API base URL. (Default: the SDK's, https://api.anthropic.com) */
  baseURL?: string | undefined;
  /** Model name as the API knows it, e.g. `claude-haiku-4-5`. */
  model: string;
  /** Summary cap in code points when a request gives none. */
  maxChars: number;
  /** Deadline of one call in milliseconds when a request gives none. */
  timeoutMs: number;
  /** Largest material accepted, in code points of item texts and ids; larger is `invalid: input_too_large` before sending. (Default: 600,000) */
  maxInputChars?: number | undefined;
  /** Receives the SDK's own warnings and errors. (Default: silent) */
  logger?: GatewayLogger | undefined;
}

/**
 * The SDK's own timeout only backstops our deadline (which covers the body
 * read too, and lets us tell a deadline from a caller abort): it is set this
 * much later so our deadline always fires first.
 */
export const SDK_TIMEOUT_SLACK_MS = 1_000;

/**
 * `max_tokens` for a cap of `maxChars` code points. A summary that fits the
 * cap must never be cut by the token limit (that would spend an attempt on a
 * good answer): English runs about 4 characters per token, CJK about one, so
 * one token per character covers every common script. The limit only bounds a
 * runaway answer, which is rejected as too long anyway; unused tokens cost
 * nothing. The 256 extra tokens leave room for whitespace we trim.
 */
export function maxTokensFor(maxChars: number): number {
  return maxChars + 256;
}

/**
 * A summarizer backed by the Anthropic Messages API.
 *
 * Each call is one HTTP request with SDK retries off (`maxRetries: 0`): the
 * compaction systems count attempts, so a hidden retry would be an uncounted
 * second generation. No tools are offered. The material is fenced as data
 * (see fence.ts); lone surrogates in it become U+FFFD before sending, because
 * they cannot be encoded as UTF-8.
 */
export function createAnthropicSummarizer(options: AnthropicSummarizerOptions): Summarizer {
  const model = `anthropic/${options.model}`;
  const logger = options.logger ?? silentGatewayLogger;
  const apiKey = options.apiKey ? options.apiKey : null;
  const client =
    apiKey === null
      ? null
      : new Anthropic({
          apiKey,
          // null, not undefined: the SDK would otherwise read ANTHROPIC_BASE_URL behind the configuration's back.
          baseURL: options.baseURL ?? null,
          maxRetries: 0,
          timeout: options.timeoutMs + SDK_TIMEOUT_SLACK_MS,
          logLevel: 'warn',
          logger: {
            error: (msg: string, ...rest: unknown[]) => logger.error({ sdk: rest }, msg),
            warn: (msg: string, ...rest: unknown[]) => logger.warn({ sdk: rest }, msg),
            info: () => {},
            debug: () => {},
          },
        });

  async function summarize(request: SummaryRequest): Promise<Outcome> {
    const deadlineMs = request.deadlineMs ?? options.timeoutMs;
    if (client === null) return { kind: 'config', reason: 'no_api_key', status: null };
    const prepared = prepareSummary(request, { model, maxChars: options.maxChars, maxInputChars: options.maxInputChars, logger });
    if (!prepared.send) return prepared.outcome;
    const { system, user: content, maxChars } = prepared;

    const deadline = AbortSignal.timeout(deadlineMs);
    const signal = request.signal ? AbortSignal.any([request.signal, deadline]) : deadline;
    // Set by a per-request middleware, which the SDK runs only when it hands the request to fetch.
    const wire = { sent: false, requestId: null as string | null };

    let result: CallResult;
    try {
      const { data, request_id } = await client.messages
        .create(
          { model: options.model, max_tokens: maxTokensFor(maxChars), system, messages: [{ role: 'user', content }] },
          {
            signal,
            maxRetries: 0,
            timeout: deadlineMs + SDK_TIMEOUT_SLACK_MS,
            middleware: [
              async (req, next) => {
                wire.sent = true;
                const response = await next(req);
                wire.requestId = response.headers.get('request-id');
                return response;
              },
            ],
          },
        )
        .withResponse();
      result = { kind: 'response', message: data, requestId: request_id ?? null };
    } catch (error) {
      // AbortSignal.any takes the reason of the signal that fired first: that tells deadline from caller.
      const abortedBy = !signal.aborted ? null : deadline.aborted && signal.reason === deadline.reason ? 'deadline' : 'caller';
      result = { kind: 'error', error, requestSent: wire.sent, abortedBy, requestId: wire.requestId };
    }
    return classify(result, { maxChars, model });
  }

  return { model, summarize };
}
