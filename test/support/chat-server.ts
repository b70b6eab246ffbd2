import { EventEmitter, once } from 'node:events';
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { echoOfMaterial } from './messages-server.ts';

/**
 * A real HTTP server on 127.0.0.1 that speaks the OpenAI Chat Completions
 * wire format at `POST /v1/chat/completions`, for tests that drive the real
 * `openai` SDK (as OpenAI, Ollama, vLLM or llama.cpp would answer it). Each
 * request takes the next behaviour from a queue, or the default one.
 */
export type ChatBehaviour =
  /** A `stop` answer computed from the request: one line per fenced item. */
  | { kind: 'echo'; delayMs?: number }
  /** One choice with this message and finish reason. */
  | { kind: 'choice'; message: Record<string, unknown>; finishReason: string | null; delayMs?: number }
  /** A 200 with exactly this body. */
  | { kind: 'body'; body: unknown; delayMs?: number }
  /** An HTTP error with an OpenAI error body. */
  | { kind: 'error'; status: number; type?: string; code?: string; message?: string; headers?: Record<string, string>; delayMs?: number }
  /** A 200 whose body is not JSON. */
  | { kind: 'malformed' }
  /** Never answers. */
  | { kind: 'hang' }
  /** Reads the body, then destroys the socket without a response. */
  | { kind: 'reset' };

export const chat = {
  echo: (): ChatBehaviour => ({ kind: 'echo' }),
  text: (content: string | null, finishReason: string | null = 'stop'): ChatBehaviour => ({
    kind: 'choice',
    message: { role: 'assistant', content, refusal: null },
    finishReason,
  }),
  toolCalls: (): ChatBehaviour => ({
    kind: 'choice',
    finishReason: 'tool_calls',
    message: {
      role: 'assistant',
      content: 'A perfectly good summary.',
      tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'lookup', arguments: '{}' } }],
    },
  }),
  refusal: (): ChatBehaviour => ({
    kind: 'choice',
    finishReason: 'stop',
    message: { role: 'assistant', content: null, refusal: 'I cannot help with that.' },
  }),
  error: (status: number, type = 'api_error', headers?: Record<string, string>, code?: string): ChatBehaviour => ({
    kind: 'error',
    status,
    type,
    message: `scripted ${status}`,
    ...(headers ? { headers } : {}),
    ...(code ? { code } : {}),
  }),
  delayed: (delayMs: number, b: ChatBehaviour): ChatBehaviour => ({ ...b, delayMs }) as ChatBehaviour,
} as const;

export interface ChatRequest {
  path: string;
  headers: IncomingHttpHeaders;
  body: Record<string, unknown> | undefined;
  behaviour: ChatBehaviour['kind'] | 'rejected';
}

export interface ChatServer {
  /** The SDK's `baseURL`: `http://127.0.0.1:<port>/v1`. */
  readonly url: string;
  /** The key clients must send, or null: any request is accepted (a local server). */
  readonly apiKey: string | null;
  readonly requests: readonly ChatRequest[];
  readonly count: number;
  readonly inFlight: number;
  enqueue(...items: ChatBehaviour[]): void;
  setDefault(b: ChatBehaviour): void;
  /** Resolves once `predicate()` holds, checked after every request start and end. */
  waitFor(predicate: () => boolean, timeoutMs?: number): Promise<void>;
  reset(): void;
  close(): Promise<void>;
}

const USAGE = { prompt_tokens: 13, completion_tokens: 5, total_tokens: 18 };

export async function startChatServer(options: { apiKey?: string | null; defaultBehaviour?: ChatBehaviour } = {}): Promise<ChatServer> {
  const apiKey = options.apiKey === undefined ? 'test-openai-key' : options.apiKey;
  let defaultBehaviour = options.defaultBehaviour ?? chat.echo();
  const queue: ChatBehaviour[] = [];
  let requests: ChatRequest[] = [];
  let inFlight = 0;
  let sequence = 0;
  const events = new EventEmitter();
  events.setMaxListeners(0);

  const server = createServer((req, res) => {
    void handle(req, res);
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = new URL(req.url ?? '/', 'http://x').pathname;
    const raw = await readBody(req);
    let body: Record<string, unknown> | undefined;
    try {
      body = JSON.parse(raw) as Record<string, unknown>;
    } catch {
      body = undefined;
    }
    if (req.method !== 'POST' || path !== '/v1/chat/completions')
      return sendJson(res, 404, { error: { message: `no route ${path}`, type: 'invalid_request_error' } });
    if (apiKey !== null && req.headers['authorization'] !== `Bearer ${apiKey}`) {
      requests.push({ path, headers: req.headers, body, behaviour: 'rejected' });
      events.emit('change');
      return sendJson(res, 401, {
        error: { message: 'Incorrect API key provided', type: 'invalid_request_error', code: 'invalid_api_key' },
      });
    }
    const behaviour = queue.shift() ?? defaultBehaviour;
    requests.push({ path, headers: req.headers, body, behaviour: behaviour.kind });
    inFlight++;
    let ended = false;
    res.on('close', () => {
      if (ended) return;
      ended = true;
      inFlight--;
      events.emit('change');
    });
    events.emit('change');
    const delayMs = 'delayMs' in behaviour ? behaviour.delayMs : undefined;
    if (delayMs) await new Promise((resolve) => setTimeout(resolve, delayMs));
    if (res.destroyed) return;
    respond(behaviour, body, res);
  }

  function respond(behaviour: ChatBehaviour, body: Record<string, unknown> | undefined, res: ServerResponse): void {
    const requestId = `req_chat_${++sequence}`;
    const model = typeof body?.['model'] === 'string' ? body['model'] : 'unknown';
    const completion = (message: Record<string, unknown>, finishReason: string | null) => ({
      id: `chatcmpl-${sequence}`,
      object: 'chat.completion',
      created: 1_700_000_000,
      model,
      choices: [{ index: 0, message, logprobs: null, finish_reason: finishReason }],
      usage: USAGE,
    });
    switch (behaviour.kind) {
      case 'echo':
        return sendJson(res, 200, completion({ role: 'assistant', content: echo(body), refusal: null }, 'stop'), requestId);
      case 'choice':
        return sendJson(res, 200, completion(behaviour.message, behaviour.finishReason), requestId);
      case 'body':
        return sendJson(res, 200, behaviour.body, requestId);
      case 'error':
        return sendJson(
          res,
          behaviour.status,
          {
            error: { message: behaviour.message ?? 'error', type: behaviour.type ?? null, param: null, code: behaviour.code ?? null },
          },
          requestId,
          behaviour.headers,
        );
      case 'malformed':
        res.writeHead(200, { 'content-type': 'application/json', 'x-request-id': requestId });
        res.end('{"id": "chatcmpl-broken", "choices": [');
        return;
      case 'hang':
        return;
      case 'reset':
        res.socket?.destroy();
        return;
    }
  }

  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    apiKey,
    get requests() {
      return requests;
    },
    get count() {
      return requests.length;
    },
    get inFlight() {
      return inFlight;
    },
    enqueue: (...items) => {
      queue.push(...items);
    },
    setDefault: (b) => {
      defaultBehaviour = b;
    },
    waitFor(predicate, timeoutMs = 10_000) {
      if (predicate()) return Promise.resolve();
      return new Promise((resolve, reject) => {
        const check = () => {
          if (predicate()) {
            cleanup();
            resolve();
          }
        };
        const timer = setTimeout(() => {
          cleanup();
          reject(new Error(`chat server: condition not met within ${timeoutMs} ms`));
        }, timeoutMs);
        const cleanup = () => {
          clearTimeout(timer);
          events.off('change', check);
        };
        events.on('change', check);
      });
    },
    reset() {
      requests = [];
      queue.length = 0;
    },
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** "Summary of N items." then, per fenced item of the user message, its id (`pair 12` for a pair number) and first 60 characters. */
export function echo(body: Record<string, unknown> | undefined): string {
  const messages = Array.isArray(body?.['messages']) ? (body['messages'] as { role?: string; content?: unknown }[]) : [];
  const user = messages.find((m) => m.role === 'user');
  return echoOfMaterial(typeof user?.content === 'string' ? user.content : '');
}

function sendJson(res: ServerResponse, status: number, value: unknown, requestId?: string, headers?: Record<string, string>): void {
  const payload = JSON.stringify(value);
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(payload),
    ...(requestId ? { 'x-request-id': requestId } : {}),
    ...headers,
  });
  res.end(payload);
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}
