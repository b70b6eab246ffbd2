import { APIConnectionError, APIConnectionTimeoutError, APIError, APIUserAbortError } from '@anthropic-ai/sdk';
import { describe, expect, it } from 'vitest';
import { classify, PROVIDER_MESSAGE_MAX_CHARS, type CallResult } from '../../src/gateway/classify.ts';
import { MAX_RETRY_AFTER_MS, retryAfterMs } from '../../src/gateway/provider-fields.ts';

const MODEL = 'anthropic/test-model';
const opts = { maxChars: 20, model: MODEL };

function message(content: unknown[], stopReason: unknown = 'end_turn', extra: Record<string, unknown> = {}): CallResult {
  return {
    kind: 'response',
    requestId: 'req_1',
    message: {
      id: 'msg_1',
      type: 'message',
      role: 'assistant',
      model: 'test-model',
      content,
      stop_reason: stopReason,
      stop_sequence: null,
      usage: { input_tokens: 3, output_tokens: 4 },
      ...extra,
    },
  };
}
const text = (t: string) => ({ type: 'text', text: t, citations: null });

function failure(error: unknown, over: Partial<Extract<CallResult, { kind: 'error' }>> = {}): CallResult {
  return { kind: 'error', error, requestSent: true, abortedBy: null, requestId: null, ...over };
}

/** A real SDK status error, built the way the SDK builds it from a response. */
function statusError(status: number, type: string, headers: Record<string, string> = {}, message = 'm'): APIError {
  return APIError.generate(
    status,
    { type: 'error', error: { type, message } },
    undefined,
    new Headers({ 'request-id': 'req_e', ...headers }),
  );
}

describe('classify: responses', () => {
  it('accepts end_turn with text blocks only, trimmed, with usage and request id', () => {
    expect(classify(message([text('  A summary. ')]), opts)).toEqual({
      kind: 'ok',
      text: 'A summary.',
      model: MODEL,
      usage: { inputTokens: 3, outputTokens: 4 },
      requestId: 'req_1',
    });
  });

  it('joins several text blocks without a separator', () => {
    const outcome = classify(message([text('Part one, '), text('part two.')]), opts);
    expect(outcome).toMatchObject({ kind: 'ok', text: 'Part one, part two.' });
  });

  it('counts code points, not UTF-16 units: 20 emoji fit a cap of 20', () => {
    const emoji = '😀'.repeat(20);
    expect(emoji.length).toBe(40);
    expect(classify(message([text(emoji)]), opts)).toMatchObject({ kind: 'ok', text: emoji });
  });

  it('rejects one code point over the cap with the measured length', () => {
    expect(classify(message([text('😀'.repeat(21))]), opts)).toMatchObject({ kind: 'invalid', reason: 'too_long:21>20' });
  });

  it('rejects tool use even when the prose is fine', () => {
    const outcome = classify(message([text('Good.'), { type: 'tool_use', id: 't', name: 'x', input: {} }], 'tool_use'), opts);
    expect(outcome).toEqual({
      kind: 'invalid',
      reason: 'block:tool_use',
      model: MODEL,
      usage: { inputTokens: 3, outputTokens: 4 },
      requestId: 'req_1',
    });
  });

  it.each([
    ['thinking', { type: 'thinking', thinking: 't', signature: 's' }],
    ['redacted_thinking', { type: 'redacted_thinking', data: 'x' }],
    ['server_tool_use', { type: 'server_tool_use', id: 's', name: 'web_search', input: {} }],
    ['web_search_tool_result', { type: 'web_search_tool_result', tool_use_id: 's', content: [] }],
    ['container_upload', { type: 'container_upload', file_id: 'f' }],
    ['some_future_block', { type: 'some_future_block' }],
  ])('rejects a %s block beside good text', (type, block) => {
    expect(classify(message([text('Good.'), block]), opts)).toMatchObject({ kind: 'invalid', reason: `block:${type}` });
  });

  it('rejects a block without a type and a text block whose text is not a string', () => {
    expect(classify(message([{ text: 'x' }]), opts)).toMatchObject({ kind: 'invalid', reason: 'block:unknown' });
    expect(classify(message([{ type: 'text', text: 42 }]), opts)).toMatchObject({ kind: 'invalid', reason: 'block:text' });
  });

  it.each(['max_tokens', 'refusal', 'pause_turn', 'stop_sequence', 'model_context_window_exceeded', 'tool_use'])(
    'rejects stop reason %s with plain text',
    (stop) => {
      expect(classify(message([text('Fine text.')], stop), opts)).toMatchObject({ kind: 'invalid', reason: `stop_reason:${stop}` });
    },
  );

  it('names unknown and missing stop reasons apart from known ones', () => {
    expect(classify(message([text('x')], 'brand_new'), opts)).toMatchObject({ kind: 'invalid', reason: 'stop_reason:unknown:brand_new' });
    expect(classify(message([text('x')], null), opts)).toMatchObject({ kind: 'invalid', reason: 'stop_reason:unknown:null' });
  });

  it.each([
    ['no blocks', []],
    ['an empty text', [text('')]],
    ['whitespace only', [text(' \n\t\u00a0\u3000 ')]],
    ['zero-width characters only (Default_Ignorable, Cf)', [text('\u200B\u200C\u200D\u2060\uFEFF')]],
    ['Hangul fillers and the braille blank', [text('\u3164\u115F\u1160\uFFA0\u2800')]],
    ['bidi marks, soft hyphen, variation selectors, tags and controls', [text('\u200E\u200F\u202E\u00AD\uFE0F\u{E0041}\u0001\u0085')]],
    ['invisible characters split across blocks, with white space', [text(' \u200B '), text('\u2800\n')]],
  ])('rejects %s as empty_text', (_name, content) => {
    expect(classify(message(content), opts)).toMatchObject({ kind: 'invalid', reason: 'empty_text' });
  });

  it('accepts a short visible text beside invisible characters', () => {
    expect(classify(message([text('\u200BOK\u200B')]), opts)).toMatchObject({ kind: 'ok', text: '\u200BOK\u200B' });
  });

  it('rejects a text with a NUL as unstorable (PostgreSQL text cannot hold it), with its usage', () => {
    expect(classify(message([text('Fund 3 had a NAV of 103.25.\u0000')]), opts)).toEqual({
      kind: 'invalid',
      reason: 'unstorable_text:U+0000',
      model: MODEL,
      usage: { inputTokens: 3, outputTokens: 4 },
      requestId: 'req_1',
    });
  });

  it.each([
    ['absurdly large', { input_tokens: 1e300, output_tokens: 4 }],
    ['negative', { input_tokens: -5, output_tokens: 4 }],
    ['fractional', { input_tokens: 3, output_tokens: 4.5 }],
    ['not numbers', { input_tokens: '3', output_tokens: 4 }],
  ])('reports %s usage as null: no such token count is stored', (_name, usage) => {
    expect(classify(message([text('ok')], 'end_turn', { usage }), opts)).toMatchObject({ kind: 'ok', usage: null });
  });

  it('replaces a lone surrogate in the answer so the summary can be stored as UTF-8', () => {
    expect(classify(message([text('a\uD800b')]), opts)).toMatchObject({ kind: 'ok', text: 'a\uFFFDb' });
  });

  it('reports usage as null when the body has none', () => {
    expect(classify(message([text('ok')], 'end_turn', { usage: undefined }), opts)).toMatchObject({ kind: 'ok', usage: null });
  });

  it('treats a 2xx body that is not a Message as unknown (it was processed; we cannot read it)', () => {
    for (const body of [null, 'text', { type: 'error' }, { type: 'message', content: 'not an array' }]) {
      expect(classify({ kind: 'response', message: body, requestId: 'r' }, opts)).toEqual({
        kind: 'unknown',
        reason: 'malformed_response:not_a_message',
        requestId: 'r',
      });
    }
  });
});

describe('classify: HTTP status errors', () => {
  it.each([
    [400, 'invalid_request_error'],
    [401, 'authentication_error'],
    [402, 'billing_error'],
    [403, 'permission_error'],
    [404, 'not_found_error'],
    [422, 'invalid_request_error'],
  ])("%i is a loud config outcome, with the provider's message", (status, type) => {
    expect(classify(failure(statusError(status, type)), opts)).toEqual({ kind: 'config', reason: `http_${status}:${type}: m`, status });
  });

  it('413 is invalid too_large: only our input makes a request that large', () => {
    expect(classify(failure(statusError(413, 'request_too_large')), opts)).toEqual({
      kind: 'invalid',
      reason: 'too_large:http_413:request_too_large: m',
      model: MODEL,
      usage: null,
      requestId: 'req_e',
    });
  });

  it.each([
    'prompt is too long: 212345 tokens > 200000 maximum',
    'input length and `max_tokens` exceed context limit: 197000 + 6256 > 200000, decrease input length or `max_tokens` and try again',
  ])('a 400 saying the material is over the context window is invalid too_large, like 413: %s', (said) => {
    expect(classify(failure(statusError(400, 'invalid_request_error', {}, said)), opts)).toEqual({
      kind: 'invalid',
      reason: `too_large:http_400:invalid_request_error: ${said}`,
      model: MODEL,
      usage: null,
      requestId: 'req_e',
    });
  });

  it('any other 400 stays config', () => {
    const said = 'max_tokens: 70000 > 64000, which is the maximum allowed number of output tokens for claude-test';
    expect(classify(failure(statusError(400, 'invalid_request_error', {}, said)), opts)).toEqual({
      kind: 'config',
      reason: `http_400:invalid_request_error: ${said}`,
      status: 400,
    });
  });

  it("keeps the provider's message storable and bounded: no NUL or line break, at most 300 characters", () => {
    const outcome = classify(failure(statusError(429, 'rate_limit_error\u0000', {}, `slow\u0000 down\n${'x'.repeat(5000)}`)), opts);
    expect(outcome).toMatchObject({ kind: 'deferred' });
    const reason = (outcome as { reason: string }).reason;
    expect(reason).not.toMatch(/[\u0000\n]/);
    expect(reason.startsWith('http_429:rate_limit_error: slow down xxx')).toBe(true);
    expect([...reason.slice('http_429:rate_limit_error: '.length)]).toHaveLength(PROVIDER_MESSAGE_MAX_CHARS);
    expect(reason.endsWith('x…')).toBe(true);
  });

  it('keeps only a plain identifier of an error type', () => {
    const outcome = classify(failure(statusError(500, 'api_error\u0000<script>', {}, 'boom')), opts);
    expect(outcome).toMatchObject({ kind: 'unknown', reason: 'http_500:api_errorscript: boom' });
  });

  it.each([
    [429, 'rate_limit_error'],
    [503, 'api_error'],
    [529, 'overloaded_error'],
    [408, 'timeout_error'],
    [409, 'conflict_error'],
  ])('%i is deferred: refused before any generation', (status, type) => {
    expect(classify(failure(statusError(status, type)), opts)).toEqual({
      kind: 'deferred',
      reason: `http_${status}:${type}: m`,
      retryAfterMs: null,
    });
  });

  it.each([500, 502, 504, 599])('%i is unknown: the request may have been processed', (status) => {
    expect(classify(failure(statusError(status, 'api_error')), opts)).toEqual({
      kind: 'unknown',
      reason: `http_${status}:api_error: m`,
      requestId: 'req_e',
    });
  });

  it('omits the error type when the body has none, and keeps a body that is not JSON as the message', () => {
    expect(classify(failure(APIError.generate(500, undefined, undefined, new Headers())), opts)).toMatchObject({
      kind: 'unknown',
      reason: 'http_500',
    });
    // The SDK passes the text of a body that is not JSON as its message.
    const error = APIError.generate(502, undefined, '<html>bad gateway</html>', new Headers());
    expect(classify(failure(error), opts)).toMatchObject({ kind: 'unknown', reason: 'http_502:untyped: <html>bad gateway</html>' });
  });

  it('carries retry-after (seconds) and retry-after-ms on a deferral', () => {
    expect(classify(failure(statusError(429, 'rate_limit_error', { 'retry-after': '7' })), opts)).toMatchObject({ retryAfterMs: 7000 });
    expect(classify(failure(statusError(529, 'overloaded_error', { 'retry-after-ms': '1500' })), opts)).toMatchObject({
      retryAfterMs: 1500,
    });
  });

  it('lets a received status outrank an abort that raced it', () => {
    expect(classify(failure(statusError(429, 'rate_limit_error'), { abortedBy: 'caller' }), opts)).toMatchObject({ kind: 'deferred' });
  });
});

describe('classify: transport errors and aborts', () => {
  it('an abort before the request was sent is a deferral (nothing reached the provider)', () => {
    expect(classify(failure(new APIUserAbortError(), { requestSent: false, abortedBy: 'caller' }), opts)).toEqual({
      kind: 'deferred',
      reason: 'aborted_before_send',
      retryAfterMs: null,
    });
    expect(classify(failure(new APIUserAbortError(), { requestSent: false, abortedBy: 'deadline' }), opts)).toMatchObject({
      kind: 'deferred',
      reason: 'deadline_before_send',
    });
  });

  it('an abort after send is unknown, named by which signal fired', () => {
    expect(classify(failure(new APIUserAbortError(), { abortedBy: 'caller', requestId: 'req_h' }), opts)).toEqual({
      kind: 'unknown',
      reason: 'aborted_after_send',
      requestId: 'req_h',
    });
    expect(classify(failure(new APIUserAbortError(), { abortedBy: 'deadline' }), opts)).toMatchObject({
      kind: 'unknown',
      reason: 'deadline_exceeded',
    });
  });

  it('an AbortError while reading the body is unknown', () => {
    expect(classify(failure(new DOMException('aborted', 'AbortError'), { abortedBy: 'deadline' }), opts)).toMatchObject({
      kind: 'unknown',
      reason: 'deadline_exceeded',
    });
    expect(classify(failure(new DOMException('aborted', 'AbortError')), opts)).toMatchObject({
      kind: 'unknown',
      reason: 'aborted_after_send',
    });
  });

  it('the SDK connection timeout is unknown timeout', () => {
    expect(classify(failure(new APIConnectionTimeoutError()), opts)).toEqual({ kind: 'unknown', reason: 'timeout', requestId: null });
  });

  it('a refused connection is deferred: the request never left', () => {
    const refused = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:9'), { code: 'ECONNREFUSED' });
    const error = new APIConnectionError({ cause: new TypeError('fetch failed', { cause: refused }) });
    expect(classify(failure(error), opts)).toEqual({ kind: 'deferred', reason: 'connect_failed:ECONNREFUSED', retryAfterMs: null });
  });

  it('a connection cut after send is unknown, with its code when known', () => {
    const cut = Object.assign(new Error('other side closed'), { code: 'UND_ERR_SOCKET' });
    expect(classify(failure(new APIConnectionError({ cause: new TypeError('fetch failed', { cause: cut }) })), opts)).toMatchObject({
      kind: 'unknown',
      reason: 'connection_error:UND_ERR_SOCKET',
    });
    expect(classify(failure(new APIConnectionError({})), opts)).toMatchObject({ kind: 'unknown', reason: 'connection_error' });
  });

  it('a 2xx body that is not JSON is unknown (the SDK throws a bare SyntaxError)', () => {
    expect(classify(failure(new SyntaxError('Unexpected end of JSON input'), { requestId: 'req_m' }), opts)).toEqual({
      kind: 'unknown',
      reason: 'malformed_response:json',
      requestId: 'req_m',
    });
  });

  it('the SDK finding no credentials is config', () => {
    const error = new Error('Could not resolve authentication method. Expected one of apiKey, ...');
    expect(classify(failure(error, { requestSent: false }), opts)).toEqual({ kind: 'config', reason: 'no_api_key', status: null });
  });

  it("a connection lost while the body is read is unknown body_interrupted (undici's TypeError, not an APIConnectionError)", () => {
    const cut = Object.assign(new Error('other side closed'), { code: 'UND_ERR_SOCKET' });
    expect(classify(failure(new TypeError('terminated', { cause: cut }), { requestId: 'req_b' }), opts)).toEqual({
      kind: 'unknown',
      reason: 'body_interrupted:UND_ERR_SOCKET',
      requestId: 'req_b',
    });
    expect(classify(failure(new TypeError('terminated')), opts)).toMatchObject({ kind: 'unknown', reason: 'body_interrupted' });
  });

  it('a body larger than a string can hold is unknown response_too_large', () => {
    // What Node throws reading a body over V8's string limit (measured with a 600 MB body).
    const tooLong = Object.assign(new Error('Cannot create a string longer than 0x1fffffe8 characters'), { code: 'ERR_STRING_TOO_LONG' });
    expect(classify(failure(tooLong), opts)).toMatchObject({ kind: 'unknown', reason: 'response_too_large:ERR_STRING_TOO_LONG' });
    expect(classify(failure(new RangeError('Invalid string length')), opts)).toMatchObject({
      kind: 'unknown',
      reason: 'response_too_large:invalid_string_length',
    });
  });

  it('anything unrecognised is unknown, never ok, with its message', () => {
    expect(classify(failure(new RangeError('bug')), opts)).toMatchObject({ kind: 'unknown', reason: 'unexpected_error:RangeError: bug' });
    expect(classify(failure('a string'), opts)).toMatchObject({ kind: 'unknown', reason: 'unexpected_error:string: a string' });
  });
});

describe('retryAfterMs', () => {
  const h = (init: Record<string, string>) => new Headers(init);
  const now = () => Date.parse('2026-01-01T00:00:00Z');

  it('prefers retry-after-ms, then retry-after seconds (fractions round up)', () => {
    expect(retryAfterMs(h({ 'retry-after-ms': '250', 'retry-after': '9' }), now)).toBe(250);
    expect(retryAfterMs(h({ 'retry-after': '1.5' }), now)).toBe(1500);
    expect(retryAfterMs(h({ 'retry-after': '0.0004' }), now)).toBe(1);
  });

  it('reads an HTTP date against the given clock', () => {
    expect(retryAfterMs(h({ 'retry-after': 'Thu, 01 Jan 2026 00:00:30 GMT' }), now)).toBe(30_000);
    expect(retryAfterMs(h({ 'retry-after': 'Wed, 31 Dec 2025 23:00:00 GMT' }), now)).toBe(0);
  });

  it('caps an absurd wait at MAX_RETRY_AFTER_MS (one hour), so a deferral stays a storable timestamp', () => {
    expect(MAX_RETRY_AFTER_MS).toBe(3_600_000);
    expect(retryAfterMs(h({ 'retry-after': '1e13' }), now)).toBe(MAX_RETRY_AFTER_MS);
    expect(retryAfterMs(h({ 'retry-after': '31536000' }), now)).toBe(MAX_RETRY_AFTER_MS);
    expect(retryAfterMs(h({ 'retry-after-ms': '1e300' }), now)).toBe(MAX_RETRY_AFTER_MS);
    expect(retryAfterMs(h({ 'retry-after': 'Fri, 01 Jan 2100 00:00:00 GMT' }), now)).toBe(MAX_RETRY_AFTER_MS);
    expect(retryAfterMs(h({ 'retry-after': '3600' }), now)).toBe(MAX_RETRY_AFTER_MS);
    expect(retryAfterMs(h({ 'retry-after': '3599' }), now)).toBe(3_599_000);
  });

  it('is null when absent or unreadable', () => {
    expect(retryAfterMs(h({}), now)).toBeNull();
    expect(retryAfterMs(undefined, now)).toBeNull();
    expect(retryAfterMs(h({ 'retry-after': 'soon' }), now)).toBeNull();
    expect(retryAfterMs(h({ 'retry-after': '-3' }), now)).toBeNull();
    expect(retryAfterMs(h({ 'retry-after-ms': 'x', 'retry-after': '2' }), now)).toBe(2000);
  });
});
