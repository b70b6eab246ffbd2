import { createServer as createHttpServer } from 'node:http';
import { createServer, type AddressInfo } from 'node:net';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createGateway,
  describeError,
  maskSecrets,
  outcomeFromAnswer,
  outcomeFromError,
  prepareSummary,
  promptText,
  type Summarizer,
  type SummaryRequest,
} from '../../src/gateway/index.ts';
import { createOpenAISummarizer } from '../../src/gateway/openai-summarizer.ts';
import { CONVERSATION_PROMPT_VERSION } from '../../src/gateway/prompts.ts';
import { startChatServer, type ChatServer } from '../support/chat-server.ts';

/** A summarizer of one's own, as README "A summarizer of your own" shows it: the contract's helpers and plain fetch. */
function fetchSummarizer(baseURL: string): Summarizer {
  const model = 'custom/fetch-model';
  return {
    model,
    async summarize(request) {
      const call = prepareSummary(request, { model });
      if (!call.send) return call.outcome;
      const response = await fetch(`${baseURL}/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: 'Bearer test-openai-key' },
        body: JSON.stringify({
          model: 'm',
          messages: [
            { role: 'system', content: call.system },
            { role: 'user', content: call.user },
          ],
        }),
        signal: request.signal,
      });
      if (!response.ok) throw Object.assign(new Error(`HTTP ${response.status}`), { status: response.status, headers: response.headers });
      const body = (await response.json()) as { choices: { message: { content: string }; finish_reason: string }[] };
      const choice = body.choices[0]!;
      return outcomeFromAnswer({ model, maxChars: call.maxChars, text: choice.message.content, finishReason: choice.finish_reason });
    },
  };
}

const request: SummaryRequest = {
  promptVersion: CONVERSATION_PROMPT_VERSION,
  items: [{ id: '0', text: 'Deployment v2.3.1 finished at 14:05.' }],
};
const gatewayOf = (summarizer: Summarizer) => createGateway({ summarizer, defaults: { maxChars: 6000, deadlineMs: 5000 } });

async function closedPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve));
  const { port } = s.address() as AddressInfo;
  await new Promise<void>((resolve) => s.close(() => resolve()));
  return port;
}

let server: ChatServer;
beforeAll(async () => {
  server = await startChatServer();
});
afterAll(() => server.close());

describe('a custom summarizer behind the gateway', () => {
  it('a refused connection it throws is a deferral, not an unknown attempt', async () => {
    const port = await closedPort();
    const outcome = await gatewayOf(fetchSummarizer(`http://127.0.0.1:${port}/v1`)).summarize(request);
    expect(outcome).toEqual({ kind: 'deferred', reason: 'connect_failed:ECONNREFUSED', retryAfterMs: null });
  });

  it('a connection reset it throws is unknown, and says what it was: name, code and message, not `Error`', async () => {
    const cutting = createHttpServer((req) => {
      req.resume();
      req.on('end', () => req.socket.destroy());
    });
    await new Promise<void>((resolve) => cutting.listen(0, '127.0.0.1', resolve));
    try {
      const { port } = cutting.address() as AddressInfo;
      const outcome = await gatewayOf(fetchSummarizer(`http://127.0.0.1:${port}/v1`)).summarize(request);
      expect(outcome).toMatchObject({ kind: 'unknown' });
      expect((outcome as { reason: string }).reason).toMatch(
        /^summarizer_threw:TypeError: fetch failed; cause: SocketError UND_ERR_SOCKET: other side closed/,
      );
    } finally {
      await new Promise<void>((resolve) => cutting.close(() => resolve()));
    }
  });

  it('an HTTP status it throws is classified by its meaning: 429 deferred with its wait, 401 config, 500 unknown', async () => {
    server.enqueue(
      { kind: 'error', status: 429, headers: { 'retry-after': '3' } },
      { kind: 'error', status: 401 },
      { kind: 'error', status: 500 },
    );
    const gateway = gatewayOf(fetchSummarizer(server.url));
    expect(await gateway.summarize(request)).toMatchObject({ kind: 'deferred', reason: 'http_429:untyped: HTTP 429', retryAfterMs: 3000 });
    expect(await gateway.summarize(request)).toMatchObject({ kind: 'config', status: 401, reason: 'http_401:untyped: HTTP 401' });
    expect(await gateway.summarize(request)).toMatchObject({ kind: 'unknown', reason: 'http_500:untyped: HTTP 500' });
  });

  it('an answer goes through the same contract as a built-in one: what is sent is identical, finish and text are judged', async () => {
    server.reset();
    const ours = await gatewayOf(fetchSummarizer(server.url)).summarize(request);
    expect(ours).toMatchObject({ kind: 'ok', model: 'custom/fetch-model' });
    await createOpenAISummarizer({ apiKey: server.apiKey, baseURL: server.url, model: 'm', maxChars: 6000, timeoutMs: 5000 }).summarize(
      request,
    );
    const [custom, builtIn] = server.requests.map((r) =>
      (r.body!['messages'] as { content: string }[]).map((m) => m.content.replace(/nonce="[0-9a-f]+"/g, 'nonce="N"')),
    );
    expect(custom).toEqual(builtIn);
    expect(custom![0]).toBe(`${promptText(CONVERSATION_PROMPT_VERSION).trimEnd()}\n\nCharacter limit: at most 6000 characters.`);
  });

  it('an error of the openai SDK thrown from inside a custom summarizer is classified as the built-in one classifies it', async () => {
    const port = await closedPort();
    const client = new OpenAI({ apiKey: 'k', baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0 });
    const summarizer: Summarizer = {
      model: 'custom/sdk',
      summarize: async () => {
        await client.chat.completions.create({ model: 'm', messages: [] });
        throw new Error('unreachable');
      },
    };
    expect(await gatewayOf(summarizer).summarize(request)).toEqual({
      kind: 'deferred',
      reason: 'connect_failed:ECONNREFUSED',
      retryAfterMs: null,
    });
  });
});

describe('the contract helpers', () => {
  it('prepareSummary settles what needs no call', () => {
    expect(prepareSummary({ ...request, promptVersion: 'nope@1' }, { model: 'x/y' })).toEqual({
      send: false,
      outcome: { kind: 'config', reason: 'unknown_prompt_version:nope@1', status: null },
    });
    expect(prepareSummary({ ...request, items: [{ id: 'a', text: ' \u200b ' }] }, { model: 'x/y' })).toMatchObject({
      send: false,
      outcome: { kind: 'invalid', reason: 'empty_input' },
    });
    expect(prepareSummary({ ...request, signal: AbortSignal.abort() }, { model: 'x/y' })).toMatchObject({
      send: false,
      outcome: { kind: 'deferred', reason: 'aborted_before_send' },
    });
    const sent = prepareSummary({ ...request, maxChars: 900 }, { model: 'x/y' });
    expect(sent).toMatchObject({ send: true, maxChars: 900 });
  });

  it('outcomeFromAnswer: only a normal finish with a fitting, visible text is ok', () => {
    const base = { model: 'x/y', maxChars: 10 };
    expect(outcomeFromAnswer({ ...base, text: ' Short. ', finishReason: 'stop' })).toEqual({
      kind: 'ok',
      text: 'Short.',
      model: 'x/y',
      usage: null,
      requestId: null,
    });
    expect(outcomeFromAnswer({ ...base, text: 'Short.', finishReason: 'end_turn' }).kind).toBe('ok');
    expect(outcomeFromAnswer({ ...base, text: 'Cut', finishReason: 'length' })).toMatchObject({
      kind: 'invalid',
      reason: 'finish_reason:length',
    });
    expect(outcomeFromAnswer({ ...base, text: 'x', finishReason: null })).toMatchObject({ kind: 'invalid', reason: 'finish_reason:null' });
    expect(outcomeFromAnswer({ ...base, text: '\u200b', finishReason: 'stop' })).toMatchObject({ kind: 'invalid', reason: 'empty_text' });
    expect(outcomeFromAnswer({ ...base, text: 'x'.repeat(11), finishReason: 'stop' })).toMatchObject({
      kind: 'invalid',
      reason: 'too_long:11>10',
    });
  });

  it('outcomeFromError: the same classification the gateway applies to a throw', () => {
    const refused = new TypeError('fetch failed', {
      cause: Object.assign(new Error('connect ECONNREFUSED 10.0.0.1:11434'), { code: 'ECONNREFUSED' }),
    });
    expect(outcomeFromError(refused, { model: 'x/y' })).toEqual({
      kind: 'deferred',
      reason: 'connect_failed:ECONNREFUSED',
      retryAfterMs: null,
    });
    expect(outcomeFromError(Object.assign(new Error('rate limited'), { status: 503 }), { model: 'x/y' })).toMatchObject({
      kind: 'deferred',
      reason: 'http_503:untyped: rate limited',
    });
    expect(outcomeFromError(Object.assign(new Error('no such model'), { status: 404 }), { model: 'x/y' })).toMatchObject({
      kind: 'config',
      status: 404,
    });
    expect(outcomeFromError(new RangeError('bug'), { model: 'x/y' })).toEqual({
      kind: 'unknown',
      reason: 'summarizer_threw:RangeError: bug',
      requestId: null,
    });
  });

  it('describeError names the class when the error kept the generic name, and never carries a credential', () => {
    class ProviderError extends Error {}
    expect(describeError(new ProviderError('bad gateway'))).toBe('ProviderError: bad gateway');
    const leaky = new Error(
      'POST https://user:hunter2@llm.internal/v1?api_key=abc123&x=1 failed; Authorization: Bearer sk-live-0123456789abcdef; token=zzz9',
    );
    const described = describeError(leaky);
    for (const secret of ['hunter2', 'abc123', 'sk-live-0123456789abcdef', '0123456789abcdef', 'zzz9'])
      expect(described).not.toContain(secret);
    expect(described).toContain('https://user:***@llm.internal/v1?api_key=***&x=1');
    expect(maskSecrets('OPENAI_API_KEY="sk-proj-AAAAAAAAAA"')).toBe('OPENAI_API_KEY="***"');
    expect(describeError('a string')).toBe('string: a string');
  });
});
