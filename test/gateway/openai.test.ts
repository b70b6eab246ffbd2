import { createServer } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { maxTokensFor } from '../../src/gateway/anthropic-summarizer.ts';
import { createGateway } from '../../src/gateway/gateway.ts';
import { createOpenAISummarizer, openAIModelIdentity } from '../../src/gateway/openai-summarizer.ts';
import { CONVERSATION_PROMPT_VERSION, promptText } from '../../src/gateway/prompts.ts';
import type { MaterialItem, Outcome, SummaryRequest } from '../../src/support/summary-contract.ts';
import { chat, echo, startChatServer, type ChatBehaviour, type ChatServer } from '../support/chat-server.ts';

/** Deadline for calls that should answer: generous, so a loaded machine never turns them into timeouts. */
const DEADLINE_MS = 10_000;
/** Deadline for calls that hang on purpose. */
const HANG_DEADLINE_MS = 150;
const MODEL = 'llama-test:8b';

let server: ChatServer;
beforeAll(async () => {
  server = await startChatServer();
});
afterAll(async () => {
  await server.close();
});
afterEach(async () => {
  await server.waitFor(() => server.inFlight === 0);
  server.reset();
  server.setDefault(chat.echo());
});

function summarizer(over: Partial<Parameters<typeof createOpenAISummarizer>[0]> = {}) {
  return createOpenAISummarizer({
    apiKey: server.apiKey,
    baseURL: server.url,
    model: MODEL,
    maxChars: 6000,
    timeoutMs: DEADLINE_MS,
    ...over,
  });
}

const replies: MaterialItem[] = [
  { id: '10', text: 'The invoice INV-2024-001 totals 1,234.56 EUR as of 2024-03-05.' },
  { id: '11', text: 'Deployment v2.3.1 finished; latency p99 is 180 ms.' },
];
const request = (over: Partial<SummaryRequest> = {}): SummaryRequest => ({
  promptVersion: CONVERSATION_PROMPT_VERSION,
  items: replies,
  ...over,
});

async function closedPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve));
  const { port } = s.address() as { port: number };
  await new Promise<void>((resolve) => s.close(() => resolve()));
  return port;
}

describe('every scripted Chat Completions behaviour through the real openai SDK', () => {
  const choices = (n: number): ChatBehaviour => ({
    kind: 'body',
    body: {
      object: 'chat.completion',
      choices: Array.from({ length: n }, (_, index) => ({
        index,
        message: { role: 'assistant', content: 'A summary.' },
        finish_reason: 'stop',
      })),
    },
  });
  const parts = (content: unknown[]): ChatBehaviour => ({ kind: 'choice', finishReason: 'stop', message: { role: 'assistant', content } });
  const cases: [string, ChatBehaviour, Partial<Outcome>][] = [
    ['a normal answer', chat.echo(), { kind: 'ok' }],
    ['tool calls with fine prose', chat.toolCalls(), { kind: 'invalid', reason: 'tool_calls' }],
    [
      'tool calls announced by a stop finish',
      {
        kind: 'choice',
        finishReason: 'stop',
        message: {
          role: 'assistant',
          content: 'Fine.',
          tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{}' } }],
        },
      },
      { kind: 'invalid', reason: 'tool_calls' },
    ],
    [
      'truncation (finish_reason length)',
      chat.text('A summary that was cut', 'length'),
      { kind: 'invalid', reason: 'finish_reason:length' },
    ],
    ['the content filter', chat.text('Partial', 'content_filter'), { kind: 'invalid', reason: 'finish_reason:content_filter' }],
    ['an unknown finish reason', chat.text('Hm', 'eos_token'), { kind: 'invalid', reason: 'finish_reason:unknown:eos_token' }],
    ['a refusal', chat.refusal(), { kind: 'invalid', reason: 'refusal' }],
    ['an empty content', chat.text(''), { kind: 'invalid', reason: 'empty_text' }],
    ['a null content', chat.text(null), { kind: 'invalid', reason: 'empty_text' }],
    ['a whitespace content', chat.text(' \n\t\u00a0 '), { kind: 'invalid', reason: 'empty_text' }],
    ['6,001 characters', chat.text('x'.repeat(6001)), { kind: 'invalid', reason: 'too_long:6001>6000' }],
    ['exactly 6,000 characters', chat.text('x'.repeat(6000)), { kind: 'ok', text: 'x'.repeat(6000) }],
    ['a NUL in the answer', chat.text('Fund 3 had a NAV of 103.25.\u0000'), { kind: 'invalid', reason: 'unstorable_text:U+0000' }],
    ['two choices', choices(2), { kind: 'invalid', reason: 'choices:2' }],
    ['no choice', choices(0), { kind: 'invalid', reason: 'choices:0' }],
    [
      'text parts',
      parts([
        { type: 'text', text: 'A summary ' },
        { type: 'text', text: 'in two parts.' },
      ]),
      { kind: 'ok', text: 'A summary in two parts.' },
    ],
    [
      'an image part',
      parts([
        { type: 'text', text: 'A summary.' },
        { type: 'image_url', image_url: { url: 'x' } },
      ]),
      { kind: 'invalid', reason: 'content_part:image_url' },
    ],
    [
      'a reasoning head before the answer',
      chat.text('<think>\nThe replies mention an invoice.\n</think>\n\nThe invoice totals 1,234.56 EUR.'),
      { kind: 'ok', text: 'The invoice totals 1,234.56 EUR.' },
    ],
    [
      'a reasoning head never closed',
      chat.text('<think>\nStill thinking about the invoice'),
      { kind: 'invalid', reason: 'think_unclosed' },
    ],
    [
      'a 200 that is not a completion',
      { kind: 'body', body: { object: 'list', data: [] } },
      { kind: 'unknown', reason: 'malformed_response:not_a_chat_completion' },
    ],
    ['malformed JSON', { kind: 'malformed' }, { kind: 'unknown', reason: 'malformed_response:json' }],
    [
      'HTTP 400 over the context window',
      {
        kind: 'error',
        status: 400,
        type: 'invalid_request_error',
        code: 'context_length_exceeded',
        message: "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.",
      },
      {
        kind: 'invalid',
        reason:
          "too_large:http_400:invalid_request_error: This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.",
      },
    ],
    [
      'HTTP 400 otherwise',
      chat.error(400, 'invalid_request_error'),
      { kind: 'config', reason: 'http_400:invalid_request_error: scripted 400', status: 400 },
    ],
    [
      'HTTP 401',
      chat.error(401, 'invalid_request_error'),
      { kind: 'config', reason: 'http_401:invalid_request_error: scripted 401', status: 401 },
    ],
    ['HTTP 403', chat.error(403, 'permission_error'), { kind: 'config', reason: 'http_403:permission_error: scripted 403', status: 403 }],
    [
      'HTTP 404 (unknown model)',
      {
        kind: 'error',
        status: 404,
        type: 'invalid_request_error',
        code: 'model_not_found',
        message: 'The model `llama-test:8b` does not exist',
      },
      { kind: 'config', reason: 'http_404:invalid_request_error: The model `llama-test:8b` does not exist', status: 404 },
    ],
    [
      'HTTP 429 with retry-after',
      chat.error(429, 'requests', { 'retry-after': '7' }),
      { kind: 'deferred', reason: 'http_429:requests: scripted 429', retryAfterMs: 7000 },
    ],
    ['HTTP 429 with retry-after-ms', chat.error(429, 'tokens', { 'retry-after-ms': '1500' }), { kind: 'deferred', retryAfterMs: 1500 }],
    ['HTTP 500', chat.error(500, 'server_error'), { kind: 'unknown', reason: 'http_500:server_error: scripted 500' }],
    ['HTTP 502', chat.error(502), { kind: 'unknown', reason: 'http_502:api_error: scripted 502' }],
    ['HTTP 503', chat.error(503, 'server_error'), { kind: 'deferred', reason: 'http_503:server_error: scripted 503', retryAfterMs: null }],
    ['a hang: the deadline passes after the request was sent', { kind: 'hang' }, { kind: 'unknown', reason: 'deadline_exceeded' }],
    ['a connection reset after the body is read', { kind: 'reset' }, { kind: 'unknown', reason: 'connection_error:UND_ERR_SOCKET' }],
  ];

  it.each(cases)('%s', async (_name, behaviour, expected) => {
    server.enqueue(behaviour);
    const outcome = await summarizer().summarize(request({ deadlineMs: behaviour.kind === 'hang' ? HANG_DEADLINE_MS : DEADLINE_MS }));
    expect(outcome).toMatchObject(expected);
    // SDK retries are off: every behaviour (429, 5xx and resets included) costs exactly one request.
    expect(server.count).toBe(1);
  });

  it('passes the answer text, usage, request id and model identity through on ok', async () => {
    const outcome = await summarizer().summarize(request());
    expect(outcome).toEqual({
      kind: 'ok',
      text: echo(server.requests[0]!.body),
      model: `openai-compatible/${MODEL}`,
      usage: { inputTokens: 13, outputTokens: 5 },
      requestId: expect.stringMatching(/^req_chat_\d+$/),
    });
    expect((outcome as { text: string }).text).toMatch(/^Summary of 2 items\.\npair 10: The invoice INV-2024-001/);
  });

  it('a 5xx or a 429 produces exactly one request: the SDK does not retry behind our attempt accounting', async () => {
    server.setDefault(chat.error(503, 'server_error'));
    expect((await summarizer().summarize(request())).kind).toBe('deferred');
    server.setDefault(chat.error(429, 'requests'));
    expect((await summarizer().summarize(request())).kind).toBe('deferred');
    expect(server.count).toBe(2);
  });
});

describe('what is sent', () => {
  it('the released prompt as the system message, the fenced material as the user message, the token limit, nothing else', async () => {
    await summarizer({ maxChars: 1000 }).summarize(request({ maxChars: 1000 }));
    const { body, headers, path } = server.requests[0]!;
    expect(path).toBe('/v1/chat/completions');
    expect(headers['authorization']).toBe(`Bearer ${server.apiKey}`);
    expect(Object.keys(body!).sort()).toEqual(['max_tokens', 'messages', 'model']);
    expect(body!['model']).toBe(MODEL);
    expect(body!['max_tokens']).toBe(maxTokensFor(1000));
    const [system, user] = body!['messages'] as { role: string; content: string }[];
    expect(system).toEqual({
      role: 'system',
      content: `${promptText(CONVERSATION_PROMPT_VERSION).trimEnd()}\n\nCharacter limit: at most 1000 characters.`,
    });
    expect(user!.role).toBe('user');
    expect(user!.content).toMatch(/^The material to summarize is between <data nonce="[0-9a-f]{24}">/);
    expect(user!.content).toContain('<reply pair="10">\nThe invoice INV-2024-001 totals 1,234.56 EUR as of 2024-03-05.\n</reply>');
  });

  it("max_completion_tokens on OpenAI's endpoint (or when asked for), max_tokens elsewhere", async () => {
    await summarizer({ tokenLimitField: 'max_completion_tokens' }).summarize(request());
    expect(server.requests[0]!.body).toMatchObject({ max_completion_tokens: maxTokensFor(6000) });
    expect(server.requests[0]!.body).not.toHaveProperty('max_tokens');
    expect(openAIModelIdentity('gpt-4o-mini', undefined)).toBe('openai/gpt-4o-mini');
    expect(openAIModelIdentity('gpt-4o-mini', 'https://api.openai.com/v1/')).toBe('openai/gpt-4o-mini');
    expect(openAIModelIdentity('llama3.1:8b', 'http://localhost:11434/v1')).toBe('openai-compatible/llama3.1:8b');
  });

  it('a local server without a key gets no Authorization header at all', async () => {
    const open = await startChatServer({ apiKey: null });
    try {
      const outcome = await createOpenAISummarizer({
        apiKey: undefined,
        baseURL: open.url,
        model: MODEL,
        maxChars: 6000,
        timeoutMs: DEADLINE_MS,
      }).summarize(request());
      expect(outcome.kind).toBe('ok');
      expect(open.requests[0]!.headers).not.toHaveProperty('authorization');
    } finally {
      await open.close();
    }
  });
});

describe('failures before any answer', () => {
  it('a refused connection is a deferral: nothing reached a model, no attempt is spent', async () => {
    const port = await closedPort();
    const outcome = await summarizer({ baseURL: `http://127.0.0.1:${port}/v1` }).summarize(request());
    expect(outcome).toEqual({ kind: 'deferred', reason: 'connect_failed:ECONNREFUSED', retryAfterMs: null });
  });

  it("no key for OpenAI's endpoint is a config outcome and nothing is sent", async () => {
    expect(
      await createOpenAISummarizer({ apiKey: undefined, model: 'gpt-4o-mini', maxChars: 6000, timeoutMs: 1000 }).summarize(request()),
    ).toEqual({ kind: 'config', reason: 'no_api_key', status: null });
  });

  it('a wrong key (401) fails loudly as config, no attempt spent', async () => {
    const outcome = await summarizer({ apiKey: 'wrong-key' }).summarize(request());
    expect(outcome).toMatchObject({ kind: 'config', status: 401, reason: 'http_401:invalid_request_error: Incorrect API key provided' });
    expect(JSON.stringify(outcome)).not.toContain('wrong-key');
  });

  it('a caller abort before sending is a deferral, and nothing is sent', async () => {
    const outcome = await summarizer().summarize(request({ signal: AbortSignal.abort() }));
    expect(outcome).toEqual({ kind: 'deferred', reason: 'aborted_before_send', retryAfterMs: null });
    expect(server.count).toBe(0);
  });

  it('a retired prompt version is config, an unknown one too', async () => {
    expect(await summarizer().summarize(request({ promptVersion: 'conversation-compaction@4' }))).toMatchObject({
      kind: 'config',
      reason: 'prompt_not_current:conversation-compaction@4',
    });
    expect(await summarizer().summarize(request({ promptVersion: 'nope@1' }))).toMatchObject({
      kind: 'config',
      reason: 'unknown_prompt_version:nope@1',
    });
    expect(server.count).toBe(0);
  });
});

describe('behind the gateway', () => {
  it('a 429 with retry-after 0 is backed off, not looped', async () => {
    server.setDefault(chat.error(429, 'requests', { 'retry-after': '0' }));
    const gateway = createGateway({
      summarizer: summarizer(),
      defaults: { maxChars: 6000, deadlineMs: DEADLINE_MS },
      deferralBackoff: { firstMs: 1000, maxMs: 8000 },
    });
    const first = await gateway.summarize(request());
    const second = await gateway.summarize(request());
    expect(first).toMatchObject({ kind: 'deferred' });
    expect((first as { retryAfterMs: number }).retryAfterMs).toBeGreaterThanOrEqual(500);
    expect((second as { retryAfterMs: number }).retryAfterMs).toBeGreaterThanOrEqual(1000);
  });
});
