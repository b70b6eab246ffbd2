import * as AnthropicSdk from '@anthropic-ai/sdk';
import type { Outcome, Usage } from '../support/summary-contract.ts';
import { describeError } from './error-text.ts';
import { readUsage, retryAfterMs, storableRequestId } from './provider-fields.ts';
import { codePointLength, isBlank, providerText, toWellFormed } from './text.ts';

/**
 * What one model call came to, as a built-in summarizer saw it: a parsed
 * response body (a Messages API `message` from Anthropic, a Chat Completions
 * `completion` from an OpenAI-compatible server), or what the SDK threw.
 */
export type CallResult =
  | {
      kind: 'response';
      /** The parsed body, unchecked: a server can send anything with a 200. */
      message: unknown;
      requestId: string | null;
    }
  | {
      kind: 'chat_response';
      /** The parsed Chat Completions body, unchecked. */
      completion: unknown;
      requestId: string | null;
    }
  | {
      kind: 'error';
      error: unknown;
      /**
       * Whether the request was handed to the transport. Until then nothing can
       * have reached the provider, so an abort is a deferral, not an attempt.
       */
      requestSent: boolean;
      /** Which of our own signals fired, if one did (the SDK reports both as a plain abort). */
      abortedBy: 'deadline' | 'caller' | null;
      /** The `request-id` header, when response headers arrived before the failure. */
      requestId: string | null;
    };

export interface ClassifyOptions {
  /** Maximum accepted summary length in code points. */
  maxChars: number;
  /** Model identity recorded on ok/invalid outcomes, e.g. `anthropic/claude-haiku-4-5`. */
  model: string;
  /** Clock for an HTTP-date `retry-after`. (Default: Date.now) */
  now?: () => number;
}

/** Stop reasons the Messages API documents. Anything else is reported as `stop_reason:unknown:<value>`. */
const KNOWN_STOP_REASONS = new Set([
  'end_turn',
  'max_tokens',
  'stop_sequence',
  'tool_use',
  'pause_turn',
  'refusal',
  'model_context_window_exceeded',
]);

/**
 * Statuses where the provider refused before any generation: 429 rate limit,
 * 503 unavailable, 529 overloaded (docs/design.md), plus 408 (the server
 * gave up reading our request) and 409 (conflict before processing). No
 * attempt is spent.
 */
const DEFERRED_STATUSES = new Set([408, 409, 429, 503, 529]);

/**
 * Connect-phase failures: the TCP connection was never established, so the
 * request cannot have been processed.
 */
const NOT_CONNECTED_CODES = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH']);

/**
 * The SDKs we call are generated from one template: the same error classes,
 * each its own. An HTTP error of any (or a custom summarizer's error that
 * carries a `status`) is read through this shape.
 */
interface HttpError {
  status: number;
  headers?: Headers | undefined;
  /** The parsed error body (Anthropic: the whole body; OpenAI: its `error` member). */
  error?: unknown;
  type?: unknown;
  code?: unknown;
  requestID?: string | null | undefined;
  message: string;
}

/** The error classes of an SDK whose errors classify() reads. */
export interface SdkErrorClasses {
  APIError: abstract new (...args: never[]) => unknown;
  APIConnectionError: abstract new (...args: never[]) => unknown;
  APIConnectionTimeoutError: abstract new (...args: never[]) => unknown;
  APIUserAbortError: abstract new (...args: never[]) => unknown;
}
const sdks: SdkErrorClasses[] = [AnthropicSdk];

/**
 * Makes classify() know another SDK's errors. The openai package is loaded
 * only when an OpenAI-compatible summarizer first calls (openai.ts): every
 * process importing the gateway would otherwise load it.
 */
export function registerSdkErrors(classes: SdkErrorClasses): void {
  if (!sdks.includes(classes)) sdks.push(classes);
}
const isSdkHttpError = (e: unknown): e is HttpError =>
  sdks.some((s) => e instanceof s.APIError) && typeof (e as HttpError).status === 'number';
const isSdkAbort = (e: unknown) => sdks.some((s) => e instanceof s.APIUserAbortError);
const isSdkTimeout = (e: unknown) => sdks.some((s) => e instanceof s.APIConnectionTimeoutError);
const isSdkConnection = (e: unknown) => sdks.some((s) => e instanceof s.APIConnectionError);

/**
 * The Messages API's answer, HTTP 400 `invalid_request_error`, when the
 * material is over the model's context window: "prompt is too long: 212345
 * tokens > 200000 maximum", or "input length and `max_tokens` exceed context
 * limit: ..." when the input fits but input plus max_tokens does not. The
 * input guard (DEFAULT_MAX_INPUT_CHARS) counts characters, assuming about
 * four to a token; CJK text has about one, so such material passes it and
 * only the API can tell. `max_tokens` follows from the cap, so only the
 * material makes it too long: like a 413, the same material fails again.
 * OpenAI-compatible servers say it their own way: OpenAI and vLLM "This
 * model's maximum context length is N tokens" (OpenAI's code
 * `context_length_exceeded`), llama.cpp "the request exceeds the available
 * context size".
 */
const CONTEXT_OVERFLOW =
  /prompt is too long|exceeds? context limit|maximum context length|context_length_exceeded|exceeds the available context size/i;

/** Code points kept of a provider's error message in a reason (the rest is cut, with an ellipsis). */
export const PROVIDER_MESSAGE_MAX_CHARS = 300;
/** Code points kept of a provider's error type; only `[A-Za-z0-9_.-]` is kept of it. */
const ERROR_TYPE_MAX_CHARS = 64;

/** The SDK's message when it has no credential to send (our own check normally catches this first). */
const NO_CREDENTIALS_MESSAGE = 'Could not resolve authentication method';

/**
 * Maps one model call (a Messages API call, or a Chat Completions call:
 * classifyChatCompletion, the same rules in that format's words) to an
 * Outcome. This is the only place that decides what a provider answer or
 * failure means; a summarizer's throw is read here too (classifyThrown):
 *
 * - ok: `end_turn`, text blocks only, trimmed text non-empty and at most
 *   `maxChars` code points.
 * - invalid (the model answered, the answer is not a summary): any non-text
 *   block (`block:<type>`, checked first, so tool use with fine prose is
 *   `block:tool_use`), any other stop reason (`stop_reason:<reason>`),
 *   `empty_text` (nothing visible: see isBlank), `unstorable_text:U+0000`
 *   (PostgreSQL text cannot hold a NUL), `too_long:<n>><max>`; and, as the
 *   material is what makes them, HTTP 413 and a 400 saying the prompt is over
 *   the context window (`too_large:<http reason>`).
 * - deferred (refused before generating; no attempt): HTTP 408/409/429/503/529,
 *   a connection that was never established, an abort before the request was
 *   sent. `retryAfterMs` from `retry-after-ms` or `retry-after`, at most
 *   MAX_RETRY_AFTER_MS (the gateway adds a backoff to short ones).
 * - unknown (may have been processed): deadline or abort after send,
 *   connection timeout or reset (before the body: `connection_error:<code>`;
 *   while reading it: `body_interrupted:<code>`), a 2xx body that is not a
 *   Message or not JSON (`malformed_response:*`) or too large to read
 *   (`response_too_large:*`), HTTP 500/502/504 and every other 5xx (the
 *   request reached the model host and may have generated), anything unrecognised.
 * - config (loud, no attempt): HTTP 400/401/402/403/404/422 and other 4xx, no credentials.
 *
 * An HTTP reason is `http_<status>:<error type>`, then `: <the provider's
 * message>` when it sent one (`http_<status>:untyped: ...` without a type), so
 * the first two `:` parts (the metrics label) stay a fixed vocabulary. Every
 * provider string kept is made storable (providerText: no NUL, bounded).
 */
export function classify(result: CallResult, options: ClassifyOptions): Outcome {
  if (result.kind === 'response') return classifyMessage(result.message, result.requestId, options);
  if (result.kind === 'chat_response') return classifyChatCompletion(result.completion, result.requestId, options);
  return classifyError(result, options);
}

function classifyMessage(message: unknown, rawRequestId: string | null, options: ClassifyOptions): Outcome {
  const requestId = storableRequestId(rawRequestId);
  if (!isRecord(message) || message['type'] !== 'message' || !Array.isArray(message['content'])) {
    return { kind: 'unknown', reason: 'malformed_response:not_a_message', requestId };
  }
  const usage = readUsage(message['usage']);
  const invalid = (reason: string): Outcome => ({ kind: 'invalid', reason, model: options.model, usage, requestId });

  const texts: string[] = [];
  for (const block of message['content'] as unknown[]) {
    const type = isRecord(block) && typeof block['type'] === 'string' ? block['type'] : 'unknown';
    if (type !== 'text' || !isRecord(block) || typeof block['text'] !== 'string') return invalid(`block:${type}`);
    texts.push(block['text']);
  }

  const stop = message['stop_reason'];
  if (stop !== 'end_turn') {
    const name = typeof stop === 'string' ? stop : String(stop);
    return invalid(KNOWN_STOP_REASONS.has(name) ? `stop_reason:${name}` : `stop_reason:unknown:${name}`);
  }

  // Text blocks are consecutive pieces of one answer (the API splits at citations): join without a separator.
  return answerText(texts.join(''), usage, requestId, options);
}

/**
 * The answer text of a normal finish, judged: `ok`, or `invalid` when blank,
 * unstorable or over the cap. Trimmed and well-formed first.
 */
export function answerText(raw: string, usage: Usage | null, requestId: string | null, options: ClassifyOptions): Outcome {
  const invalid = (reason: string): Outcome => ({ kind: 'invalid', reason, model: options.model, usage, requestId });
  const text = toWellFormed(raw.trim());
  if (isBlank(text)) return invalid('empty_text');
  // A NUL is valid JSON and valid UTF-8, but PostgreSQL text refuses it: the commit would throw and the claim run out its lease.
  if (text.includes('\u0000')) return invalid('unstorable_text:U+0000');
  const length = codePointLength(text);
  if (length > options.maxChars) return invalid(`too_long:${length}>${options.maxChars}`);
  return { kind: 'ok', text, model: options.model, usage, requestId };
}

function classifyError(result: Extract<CallResult, { kind: 'error' }>, options: ClassifyOptions): Outcome {
  const { error, requestSent, abortedBy } = result;
  const requestId = storableRequestId(result.requestId);

  // A status means a complete HTTP answer arrived: it outranks any abort that raced it.
  if (isSdkHttpError(error)) return classifyStatus(error, options);

  if (abortedBy !== null || isSdkAbort(error) || isAbortError(error)) {
    if (!requestSent)
      return { kind: 'deferred', reason: abortedBy === 'deadline' ? 'deadline_before_send' : 'aborted_before_send', retryAfterMs: null };
    return { kind: 'unknown', reason: abortedBy === 'deadline' ? 'deadline_exceeded' : 'aborted_after_send', requestId };
  }
  if (isSdkTimeout(error)) return { kind: 'unknown', reason: 'timeout', requestId };
  if (isSdkConnection(error)) {
    const code = causeCode(error);
    if (code !== null && NOT_CONNECTED_CODES.has(code)) return { kind: 'deferred', reason: `connect_failed:${code}`, retryAfterMs: null };
    return { kind: 'unknown', reason: code === null ? 'connection_error' : `connection_error:${code}`, requestId };
  }
  // The SDK parses a 2xx JSON body with response.json(): a broken body surfaces as a bare SyntaxError.
  if (error instanceof SyntaxError) return { kind: 'unknown', reason: 'malformed_response:json', requestId };
  // A connection lost while the body is read: undici's TypeError('terminated'), the socket error as its
  // cause. The SDK wraps only fetch's own failure (before the headers) as an APIConnectionError.
  if (error instanceof TypeError && (error.message === 'terminated' || causeCode(error) !== null)) {
    const code = causeCode(error);
    return { kind: 'unknown', reason: code === null ? 'body_interrupted' : `body_interrupted:${code}`, requestId };
  }
  // A body larger than a string can be (V8's limit, about 512 MiB): the answer was made, we cannot read it.
  if (isRecord(error) && error['code'] === 'ERR_STRING_TOO_LONG')
    return { kind: 'unknown', reason: 'response_too_large:ERR_STRING_TOO_LONG', requestId };
  if (error instanceof RangeError && error.message === 'Invalid string length')
    return { kind: 'unknown', reason: 'response_too_large:invalid_string_length', requestId };
  if (error instanceof Error && error.message.startsWith(NO_CREDENTIALS_MESSAGE)) {
    return { kind: 'config', reason: 'no_api_key', status: null };
  }
  return { kind: 'unknown', reason: `unexpected_error:${describeError(error)}`, requestId };
}

function classifyStatus(error: HttpError, options: ClassifyOptions): Outcome {
  const status = error.status;
  const reason = statusReason(error, status);
  const requestId = storableRequestId(error.requestID ?? null);
  if (DEFERRED_STATUSES.has(status)) {
    return { kind: 'deferred', reason, retryAfterMs: retryAfterMs(error.headers, options.now ?? Date.now) };
  }
  // 413, or a 400 saying the prompt is over the context window: only our input makes the request
  // that large, so the same material would fail again: an invalid result for this identity (the
  // second fails it for good), not a configuration fault that fails the job, is swept and
  // calls the model again forever.
  if (
    status === 413 ||
    (status === 400 && (CONTEXT_OVERFLOW.test(providerMessage(error) ?? '') || error.code === 'context_length_exceeded'))
  ) {
    return { kind: 'invalid', reason: `too_large:${reason}`, model: options.model, usage: null, requestId };
  }
  if (status >= 500) return { kind: 'unknown', reason, requestId };
  return { kind: 'config', reason, status };
}

/** Finish reasons the Chat Completions API documents. Anything else is reported as `finish_reason:unknown:<value>`. */
const KNOWN_FINISH_REASONS = new Set(['stop', 'length', 'tool_calls', 'content_filter', 'function_call']);

/**
 * A reasoning model served by Ollama or llama.cpp (DeepSeek-R1, Qwen3) may
 * put its reasoning at the head of the content, between `<think>` and
 * `</think>`: that is scratch work, not the answer, so it is dropped. A head
 * `<think>` never closed leaves no answer at all.
 */
const THINK_HEAD = /^\s*<think>[^]*?<\/think>/;

/**
 * A Chat Completions body, judged by the same contract as a Message: exactly
 * one choice; no tool or function calls (checked first, as a tool-use block
 * is); no refusal; finish reason `stop`; content a string, or text parts
 * only; then the answer text (answerText). `length` (truncation),
 * `content_filter` and any other finish are `finish_reason:<reason>`.
 */
function classifyChatCompletion(body: unknown, rawRequestId: string | null, options: ClassifyOptions): Outcome {
  const requestId = storableRequestId(rawRequestId);
  if (!isRecord(body) || !Array.isArray(body['choices']))
    return { kind: 'unknown', reason: 'malformed_response:not_a_chat_completion', requestId };
  const usage = readUsage(body['usage'], 'prompt_tokens', 'completion_tokens');
  const invalid = (reason: string): Outcome => ({ kind: 'invalid', reason, model: options.model, usage, requestId });
  const choices = body['choices'] as unknown[];
  if (choices.length !== 1) return invalid(`choices:${choices.length}`);
  const choice = choices[0];
  const message = isRecord(choice) ? choice['message'] : undefined;
  if (!isRecord(choice) || !isRecord(message)) return { kind: 'unknown', reason: 'malformed_response:no_message', requestId };
  if (Array.isArray(message['tool_calls']) && message['tool_calls'].length > 0) return invalid('tool_calls');
  if (message['function_call'] !== undefined && message['function_call'] !== null) return invalid('function_call');
  if (typeof message['refusal'] === 'string' && message['refusal'] !== '') return invalid('refusal');
  const finish = choice['finish_reason'];
  if (finish !== 'stop') {
    const name = typeof finish === 'string' ? finish : String(finish);
    return invalid(
      KNOWN_FINISH_REASONS.has(name) ? `finish_reason:${name}` : `finish_reason:unknown:${providerText(name, ERROR_TYPE_MAX_CHARS)}`,
    );
  }
  const content = message['content'];
  let text = '';
  if (typeof content === 'string') text = content;
  else if (Array.isArray(content)) {
    for (const part of content as unknown[]) {
      const type = isRecord(part) && typeof part['type'] === 'string' ? part['type'] : 'unknown';
      if (type !== 'text' || !isRecord(part) || typeof part['text'] !== 'string')
        return invalid(`content_part:${providerText(type, ERROR_TYPE_MAX_CHARS)}`);
      text += part['text'];
    }
  } else if (content !== null && content !== undefined) return { kind: 'unknown', reason: 'malformed_response:content', requestId };
  if (THINK_HEAD.test(text)) text = text.replace(THINK_HEAD, '');
  else if (/^\s*<think>/.test(text)) return invalid('think_unclosed');
  return answerText(text, usage, requestId, options);
}

/**
 * What an error thrown by a summarizer means, when no built-in summarizer
 * caught it (a custom one, or a bug): a connection that was never
 * established (ECONNREFUSED, ENOTFOUND... anywhere on the cause chain) is a
 * deferral, as for the built-in ones: nothing reached a model, so no
 * attempt is spent and a dead endpoint is tried again later, not failed for
 * good. An error of either SDK is classified as it is for the built-in
 * summarizers (the request counted as sent); any other error with an HTTP
 * `status` as an HTTP answer of that status. Anything else may have reached
 * the model: `unknown`, with the error's name, code and message
 * (describeError) so that `inspect` shows what happened.
 */
export function classifyThrown(error: unknown, options: Omit<ClassifyOptions, 'maxChars'> & { maxChars?: number }): Outcome {
  const code = causeCode(error);
  if (code !== null && NOT_CONNECTED_CODES.has(code)) return { kind: 'deferred', reason: `connect_failed:${code}`, retryAfterMs: null };
  const full = { maxChars: options.maxChars ?? Number.MAX_SAFE_INTEGER, ...options };
  if (isSdkHttpError(error) || isSdkConnection(error) || isSdkAbort(error)) {
    return classifyError({ kind: 'error', error, requestSent: true, abortedBy: null, requestId: null }, full);
  }
  if (isRecord(error) && Number.isInteger(error['status']) && (error['status'] as number) >= 400 && (error['status'] as number) <= 599) {
    const e = error as unknown as HttpError;
    return classifyStatus(
      {
        status: e.status,
        headers: e.headers instanceof Headers ? e.headers : undefined,
        message: typeof e.message === 'string' ? e.message : '',
        type: e.type,
        code: e.code,
      },
      full,
    );
  }
  return { kind: 'unknown', reason: `summarizer_threw:${describeError(error)}`, requestId: null };
}

/** `http_<status>:<type>`, then `: <message>` when the provider sent one (fixed first two parts: see classify). */
function statusReason(error: HttpError, status: number): string {
  const type = typeof error.type === 'string' ? providerText(error.type, ERROR_TYPE_MAX_CHARS).replace(/[^\w.-]/g, '') : '';
  const message = providerMessage(error);
  if (message === null) return type ? `http_${status}:${type}` : `http_${status}`;
  return `http_${status}:${type || 'untyped'}: ${message}`;
}

/**
 * The provider's own words about the error, storable and bounded, or null:
 * `error.message` of an Anthropic error body, `message` of another JSON body,
 * or the text of a body that is not JSON (the SDK puts it in its message).
 */
function providerMessage(error: HttpError): string | null {
  const body: unknown = error.error;
  let raw: unknown = null;
  if (isRecord(body)) raw = isRecord(body['error']) ? body['error']['message'] : body['message'];
  else if (body === undefined || body === null) {
    const prefix = `${error.status} `;
    const message = typeof error.message === 'string' ? error.message : '';
    // An SDK's own message is `<status> <body text>`; a custom summarizer's error has only its message.
    const text = !isSdkHttpError(error) ? message : message.startsWith(prefix) ? message.slice(prefix.length) : '';
    raw = text === 'status code (no body)' ? null : text;
  }
  if (typeof raw !== 'string') return null;
  const message = providerText(raw, PROVIDER_MESSAGE_MAX_CHARS);
  return message.length > 0 ? message : null;
}

/** The first `code` (e.g. ECONNREFUSED) found on the error's cause chain. */
function causeCode(error: unknown): string | null {
  const seen = new Set<unknown>();
  let current: unknown = error;
  while (isRecord(current) && !seen.has(current)) {
    seen.add(current);
    if (typeof current['code'] === 'string') return current['code'];
    current = current['cause'];
  }
  return null;
}

function isAbortError(error: unknown): boolean {
  return isRecord(error) && error['name'] === 'AbortError';
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null;
}
