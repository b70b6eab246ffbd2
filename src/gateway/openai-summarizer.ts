import type OpenAI from 'openai';
import { maxTokensFor, SDK_TIMEOUT_SLACK_MS } from './anthropic-summarizer.ts';
import { classify, registerSdkErrors, type CallResult } from './classify.ts';
import { prepareSummary } from './contract.ts';
import { silentGatewayLogger, type GatewayLogger } from './gateway-logger.ts';
import type { Outcome, Summarizer, SummaryRequest } from '../support/summary-contract.ts';

export interface OpenAISummarizerOptions {
  /** API key, sent as `Authorization: Bearer`. Optional for a local server (with `baseURL`): then no Authorization header is sent. */
  apiKey: string | null | undefined;
  /** Base URL of an OpenAI-compatible server, e.g. `http://localhost:11434/v1` (Ollama). (Default: https://api.openai.com/v1) */
  baseURL?: string | undefined;
  /** Model name as the server knows it, e.g. `gpt-4o-mini` or `llama3.1:8b`. */
  model: string;
  /** Summary cap in code points when a request gives none. */
  maxChars: number;
  /** Deadline of one call in milliseconds when a request gives none. */
  timeoutMs: number;
  /** Largest material accepted, in code points of item texts and ids; larger is `invalid: input_too_large` before sending. (Default: 600,000) */
  maxInputChars?: number | undefined;
  /** The body field of the token limit. (Default: `max_completion_tokens` on OpenAI's endpoint, `max_tokens` elsewhere) */
  tokenLimitField?: 'max_tokens' | 'max_completion_tokens' | undefined;
  /** Receives the SDK's own warnings and errors. (Default: silent) */
  logger?: GatewayLogger | undefined;
}

/** OpenAI's own endpoint, the SDK's default base URL. */
export const OPENAI_BASE_URL = 'https://api.openai.com/v1';

/**
 * The identity recorded on summaries: `openai/<model>` on OpenAI's endpoint,
 * `openai-compatible/<model>` on any other server (Ollama, vLLM, llama.cpp):
 * a model another server serves under the same name is not OpenAI's.
 */
export function openAIModelIdentity(model: string, baseURL: string | undefined): string {
  return `${isOpenAIEndpoint(baseURL) ? 'openai' : 'openai-compatible'}/${model}`;
}

function isOpenAIEndpoint(baseURL: string | undefined): boolean {
  return baseURL === undefined || baseURL.replace(/\/+$/, '') === OPENAI_BASE_URL;
}

/** Carries a call's wire state through the SDK's fetch options to our fetch (the SDK spreads them into fetch's init). */
const WIRE = Symbol('sourcebound.wire');
interface Wire {
  sent: boolean;
  requestId: string | null;
}

/**
 * A summarizer backed by an OpenAI-compatible Chat Completions endpoint:
 * OpenAI, or a server of your own (Ollama, vLLM, llama.cpp) through
 * `baseURL`. The same contract as the Anthropic one (anthropic.ts): one
 * request per call with SDK retries off, the released prompt as the system
 * message and the fenced material as the user message, no tools; the
 * answer classified by classify.ts (exactly one choice, finish `stop`, no
 * tool call or refusal, plain non-empty text within the cap).
 *
 * The token limit goes in `max_completion_tokens` on OpenAI's endpoint (its
 * reasoning models refuse the deprecated `max_tokens`) and in `max_tokens`
 * elsewhere: the servers people run themselves know that one. Nothing else
 * optional is sent (no temperature, no `n`): a strict server may refuse a
 * field it does not know.
 */
export function createOpenAISummarizer(options: OpenAISummarizerOptions): Summarizer {
  const model = openAIModelIdentity(options.model, options.baseURL);
  const logger = options.logger ?? silentGatewayLogger;
  const apiKey = options.apiKey ? options.apiKey : null;
  const local = !isOpenAIEndpoint(options.baseURL);
  const tokenLimit = options.tokenLimitField ?? (local ? 'max_tokens' : 'max_completion_tokens');
  const clientOptions: ConstructorParameters<typeof OpenAI>[0] = {
    // A local server without a key: the SDK wants one, so a placeholder, and the header is dropped below.
    apiKey: apiKey ?? 'none',
    ...(apiKey === null ? { defaultHeaders: { Authorization: null } } : {}),
    // Every option the SDK would read from the environment is given: the configuration owns it.
    baseURL: options.baseURL ?? OPENAI_BASE_URL,
    organization: null,
    project: null,
    maxRetries: 0,
    timeout: options.timeoutMs + SDK_TIMEOUT_SLACK_MS,
    // Our fetch: the SDK calls it only when it hands the request to the transport.
    fetch: async (url, init) => {
      const wire = (init as Record<symbol, Wire | undefined> | undefined)?.[WIRE];
      if (wire) wire.sent = true;
      const response = await fetch(url, init);
      if (wire) wire.requestId = response.headers.get('x-request-id');
      return response;
    },
    logLevel: 'warn',
    logger: {
      error: (msg: string, ...rest: unknown[]) => logger.error({ sdk: rest }, msg),
      warn: (msg: string, ...rest: unknown[]) => logger.warn({ sdk: rest }, msg),
      info: () => {},
      debug: () => {},
    },
  };
  const noKey = apiKey === null && !local;
  // The SDK is loaded by the first call, not by every process that imports the gateway (see registerSdkErrors).
  let client: Promise<OpenAI> | null = null;
  const clientOnce = () =>
    (client ??= import('openai').then((sdk) => {
      registerSdkErrors(sdk);
      return new sdk.OpenAI(clientOptions);
    }));

  async function summarize(request: SummaryRequest): Promise<Outcome> {
    const deadlineMs = request.deadlineMs ?? options.timeoutMs;
    if (noKey) return { kind: 'config', reason: 'no_api_key', status: null };
    const prepared = prepareSummary(request, { model, maxChars: options.maxChars, maxInputChars: options.maxInputChars, logger });
    if (!prepared.send) return prepared.outcome;
    const { system, user, maxChars } = prepared;
    const sdk = await clientOnce();

    const deadline = AbortSignal.timeout(deadlineMs);
    const signal = request.signal ? AbortSignal.any([request.signal, deadline]) : deadline;
    const wire: Wire = { sent: false, requestId: null };

    let result: CallResult;
    try {
      const body: OpenAI.ChatCompletionCreateParamsNonStreaming = {
        model: options.model,
        messages: [
          { role: 'system', content: system },
          { role: 'user', content: user },
        ],
      };
      body[tokenLimit] = maxTokensFor(maxChars);
      const { data, request_id } = await sdk.chat.completions
        .create(body, { signal, maxRetries: 0, timeout: deadlineMs + SDK_TIMEOUT_SLACK_MS, fetchOptions: { [WIRE]: wire } as object })
        .withResponse();
      result = { kind: 'chat_response', completion: data, requestId: request_id ?? null };
    } catch (error) {
      // AbortSignal.any takes the reason of the signal that fired first: that tells deadline from caller.
      const abortedBy = !signal.aborted ? null : deadline.aborted && signal.reason === deadline.reason ? 'deadline' : 'caller';
      result = { kind: 'error', error, requestSent: wire.sent, abortedBy, requestId: wire.requestId };
    }
    return classify(result, { maxChars, model });
  }

  return { model, summarize };
}
