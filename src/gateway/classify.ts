import { APIConnectionError, APIConnectionTimeoutError, APIError, APIUserAbortError } from '@anthropic-ai/sdk';
import type { Outcome, Usage } from './types.ts';
import { codePointLength, toWellFormed } from './text.ts';

/**
 * What one Messages API call came to, as the Anthropic summarizer saw it:
 * either a parsed response body, or what the SDK threw.
 */
export type CallResult =
  | {
    kind: 'response';
    /** The parsed body, unchecked: a server can send anything with a 200. */
    message: unknown;
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
  'end_turn', 'max_tokens', 'stop_sequence', 'tool_use', 'pause_turn', 'refusal', 'model_context_window_exceeded',
]);

/**
 * Statuses where the provider refused before any generation: 429 rate limit,
 * 503 unavailable, 529 overloaded (DESIGN "Attempts"), plus 408 (the server
 * gave up reading our request) and 409 (conflict before processing). No
 * attempt is spent.
 */
const DEFERRED_STATUSES = new Set([408, 409, 429, 503, 529]);

/**
 * Connect-phase failures: the TCP connection was never established, so the
 * request cannot have been processed.
 */
const NOT_CONNECTED_CODES = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH']);

/** The SDK's message when it has no credential to send (our own check normally catches this first). */
const NO_CREDENTIALS_MESSAGE = 'Could not resolve authentication method';

/**
 * Maps one Messages API call to an Outcome. This is the only place that
 * decides what a provider answer or failure means:
 *
 * - ok: `end_turn`, text blocks only, trimmed text non-empty and at most
 *   `maxChars` code points.
 * - invalid (the model answered, the answer is not a summary): any non-text
 *   block (`block:<type>`, checked first, so tool use with fine prose is
 *   `block:tool_use`), any other stop reason (`stop_reason:<reason>`),
 *   `empty_text`, `too_long:<n>><max>`; and HTTP 413 (`too_large`: our input).
 * - deferred (refused before generating; no attempt): HTTP 408/409/429/503/529,
 *   a connection that was never established, an abort before the request was
 *   sent. `retryAfterMs` from `retry-after-ms` or `retry-after`.
 * - unknown (may have been processed): deadline or abort after send,
 *   connection timeout or reset, a 2xx body that is not a Message or not JSON,
 *   HTTP 500/502/504 and every other 5xx (the request reached the model host
 *   and may have generated), anything unrecognised.
 * - config (loud, no attempt): HTTP 400/401/402/403/404/422 and other 4xx, no credentials.
 */
export function classify(result: CallResult, options: ClassifyOptions): Outcome {
  if (result.kind === 'response') return classifyMessage(result.message, result.requestId, options);
  return classifyError(result, options);
}

function classifyMessage(message: unknown, requestId: string | null, options: ClassifyOptions): Outcome {
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
  const text = toWellFormed(texts.join('').trim());
  if (text.length === 0) return invalid('empty_text');
  const length = codePointLength(text);
  if (length > options.maxChars) return invalid(`too_long:${length}>${options.maxChars}`);
  return { kind: 'ok', text, model: options.model, usage, requestId };
}

function classifyError(result: Extract<CallResult, { kind: 'error' }>, options: ClassifyOptions): Outcome {
  const { error, requestSent, abortedBy, requestId } = result;

  // A status means a complete HTTP answer arrived: it outranks any abort that raced it.
  if (error instanceof APIError && typeof error.status === 'number') return classifyStatus(error, error.status, options);

  if (abortedBy !== null || error instanceof APIUserAbortError || isAbortError(error)) {
    if (!requestSent) return { kind: 'deferred', reason: abortedBy === 'deadline' ? 'deadline_before_send' : 'aborted_before_send', retryAfterMs: null };
    return { kind: 'unknown', reason: abortedBy === 'deadline' ? 'deadline_exceeded' : 'aborted_after_send', requestId };
  }
  if (error instanceof APIConnectionTimeoutError) return { kind: 'unknown', reason: 'timeout', requestId };
  if (error instanceof APIConnectionError) {
    const code = causeCode(error);
    if (code !== null && NOT_CONNECTED_CODES.has(code)) return { kind: 'deferred', reason: `connect_failed:${code}`, retryAfterMs: null };
    return { kind: 'unknown', reason: code === null ? 'connection_error' : `connection_error:${code}`, requestId };
  }
  // The SDK parses a 2xx JSON body with response.json(): a broken body surfaces as a bare SyntaxError.
  if (error instanceof SyntaxError) return { kind: 'unknown', reason: 'malformed_response:json', requestId };
  if (error instanceof Error && error.message.startsWith(NO_CREDENTIALS_MESSAGE)) {
    return { kind: 'config', reason: 'no_api_key', status: null };
  }
  const name = error instanceof Error ? error.name : typeof error;
  return { kind: 'unknown', reason: `unexpected_error:${name}`, requestId };
}

function classifyStatus(error: APIError, status: number, options: ClassifyOptions): Outcome {
  const reason = error.type ? `http_${status}:${error.type}` : `http_${status}`;
  const requestId = error.requestID ?? null;
  if (DEFERRED_STATUSES.has(status)) {
    return { kind: 'deferred', reason, retryAfterMs: retryAfterMs(error.headers, options.now ?? Date.now) };
  }
  // 413: the request was too large to accept. Only our input makes it large, so the same
  // material would fail again: an invalid result for this identity, not a configuration fault.
  if (status === 413) return { kind: 'invalid', reason: 'too_large', model: options.model, usage: null, requestId };
  if (status >= 500) return { kind: 'unknown', reason, requestId };
  return { kind: 'config', reason, status };
}

/** Milliseconds the provider asked us to wait, from `retry-after-ms` or `retry-after` (seconds or HTTP date). */
export function retryAfterMs(headers: Headers | undefined, now: () => number): number | null {
  const ms = headers?.get('retry-after-ms');
  if (ms) {
    const value = Number.parseFloat(ms);
    if (Number.isFinite(value) && value >= 0) return Math.ceil(value);
  }
  const after = headers?.get('retry-after');
  if (after) {
    const seconds = Number.parseFloat(after);
    if (Number.isFinite(seconds)) return seconds >= 0 ? Math.ceil(seconds * 1000) : null;
    const date = Date.parse(after);
    if (Number.isFinite(date)) return Math.max(0, date - now());
  }
  return null;
}

function readUsage(usage: unknown): Usage | null {
  if (!isRecord(usage)) return null;
  const input = usage['input_tokens'];
  const output = usage['output_tokens'];
  return typeof input === 'number' && typeof output === 'number' ? { inputTokens: input, outputTokens: output } : null;
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
