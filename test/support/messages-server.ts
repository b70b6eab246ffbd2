import { EventEmitter, once } from 'node:events';
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { pathToFileURL } from 'node:url';

/**
 * A real HTTP server on 127.0.0.1 that speaks the Anthropic Messages API wire
 * format at `POST /v1/messages`, for tests that drive the real SDK.
 *
 * Each request takes the next behaviour from a queue, or the default one.
 * Behaviours are plain JSON, so another process can script the server through
 * `POST /_control/queue` and `POST /_control/default` and read its counters
 * at `GET /_control/stats`. Run it alone with
 * `node --import tsx test/support/messages-server.ts`: it prints
 * `{"url": ...}` on one line and serves until SIGTERM.
 */

/** A content block as the API sends it. */
export type WireBlock = Record<string, unknown> & { type: string };

export type Behaviour =
  /** A deterministic `end_turn` answer computed from the request: one line per fenced item. */
  | { kind: 'echo'; delayMs?: number }
  /** A message with exactly these blocks and stop reason. */
  | { kind: 'message'; content: WireBlock[]; stopReason: string | null; delayMs?: number }
  /** An HTTP error with an Anthropic error body. */
  | { kind: 'error'; status: number; errorType: string; message?: string; headers?: Record<string, string>; delayMs?: number }
  /** A 200 whose body is not JSON. */
  | { kind: 'malformed'; delayMs?: number }
  /** Never answers; the request ends when the client gives up (or the server closes). */
  | { kind: 'hang'; delayMs?: number }
  /** Sends 200 and headers, then never sends the body. */
  | { kind: 'hang_after_headers'; delayMs?: number }
  /** Reads the body, then destroys the socket without a response. */
  | { kind: 'reset'; delayMs?: number }
  /** Parks the request until `releaseHeld()` lets it go; then answers like `echo`. For exact concurrency tests. */
  | { kind: 'hold'; delayMs?: number };

const text = (t: string): WireBlock => ({ type: 'text', text: t, citations: null });

/**
 * The request rules of the Messages API this server enforces (400
 * invalid_request_error with the API's message), else null: a final assistant
 * turn is a prefill, which may not end with white space.
 */
export function invalidRequest(body: unknown): string | null {
  const messages = (body as { messages?: unknown } | null)?.messages;
  if (!Array.isArray(messages) || messages.length === 0) return null;
  const last = messages.at(-1) as { role?: unknown; content?: unknown };
  if (last?.role !== 'assistant') return null;
  const content = last.content;
  const final =
    typeof content === 'string'
      ? content
      : Array.isArray(content)
        ? (content.at(-1) as { type?: unknown; text?: unknown } | undefined)
        : undefined;
  const finalText = typeof final === 'string' ? final : final?.type === 'text' && typeof final.text === 'string' ? final.text : null;
  if (finalText !== null && finalText !== finalText.trimEnd())
    return 'messages: final assistant content cannot end with trailing whitespace';
  return null;
}

/** Ready-made behaviours, one per case the gateway must classify. */
export const behaviours = {
  echo: (delayMs?: number): Behaviour => ({ kind: 'echo', ...(delayMs === undefined ? {} : { delayMs }) }),
  text: (t: string, stopReason: string | null = 'end_turn'): Behaviour => ({ kind: 'message', content: [text(t)], stopReason }),
  blocks: (content: WireBlock[], stopReason: string | null = 'end_turn'): Behaviour => ({ kind: 'message', content, stopReason }),
  toolUse: (): Behaviour => ({
    kind: 'message',
    stopReason: 'tool_use',
    content: [
      text('A perfectly good summary of the replies.'),
      { type: 'tool_use', id: 'toolu_01', name: 'lookup', input: { q: 'x' }, caller: { type: 'direct' } },
    ],
  }),
  maxTokens: (): Behaviour => ({ kind: 'message', content: [text('A summary that was cut')], stopReason: 'max_tokens' }),
  refusal: (): Behaviour => ({ kind: 'message', content: [text('I cannot help with that.')], stopReason: 'refusal' }),
  pauseTurn: (): Behaviour => ({ kind: 'message', content: [text('Working on it')], stopReason: 'pause_turn' }),
  stopSequence: (): Behaviour => ({ kind: 'message', content: [text('Stopped at a sequence')], stopReason: 'stop_sequence' }),
  contextWindowExceeded: (): Behaviour => ({ kind: 'message', content: [text('Partial')], stopReason: 'model_context_window_exceeded' }),
  emptyText: (): Behaviour => ({ kind: 'message', content: [text('')], stopReason: 'end_turn' }),
  whitespaceText: (): Behaviour => ({ kind: 'message', content: [text(' \n\t\u00a0 ')], stopReason: 'end_turn' }),
  longText: (chars: number): Behaviour => ({ kind: 'message', content: [text('x'.repeat(chars))], stopReason: 'end_turn' }),
  thinking: (): Behaviour => ({
    kind: 'message',
    stopReason: 'end_turn',
    content: [{ type: 'thinking', thinking: 'Let me think.', signature: 'sig' }, text('A good summary.')],
  }),
  httpError: (status: number, errorType: string, headers?: Record<string, string>): Behaviour => ({
    kind: 'error',
    status,
    errorType,
    message: `scripted ${status}`,
    ...(headers ? { headers } : {}),
  }),
  rateLimited: (retryAfterSeconds: number): Behaviour => ({
    kind: 'error',
    status: 429,
    errorType: 'rate_limit_error',
    message: 'rate limited',
    headers: { 'retry-after': String(retryAfterSeconds) },
  }),
  overloaded: (): Behaviour => ({ kind: 'error', status: 529, errorType: 'overloaded_error', message: 'Overloaded' }),
  malformed: (): Behaviour => ({ kind: 'malformed' }),
  hang: (): Behaviour => ({ kind: 'hang' }),
  hangAfterHeaders: (): Behaviour => ({ kind: 'hang_after_headers' }),
  reset: (): Behaviour => ({ kind: 'reset' }),
  hold: (): Behaviour => ({ kind: 'hold' }),
  /** `b`, answered only after `delayMs` (or when the client goes away first). */
  delayed: (delayMs: number, b: Behaviour): Behaviour => ({ ...b, delayMs }),
} as const;

export interface RecordedRequest {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  /** The parsed JSON body (undefined when it was not JSON). */
  body: unknown;
  /** UTF-8 bytes of the body as received. */
  bytes: number;
  /** What the server did: a behaviour, or `rejected` for a missing/wrong key or version header. */
  behaviour: Behaviour['kind'] | 'rejected';
}

export interface MessagesServerOptions {
  /** The key clients must send as `Authorization: Bearer` or `x-api-key`. (Default: 'test-key') */
  apiKey?: string;
  /** Behaviour when the queue is empty. (Default: echo) */
  defaultBehaviour?: Behaviour;
}

export interface MessagesServer {
  /** Base URL for the SDK's `baseURL`, e.g. `http://127.0.0.1:40123`. */
  readonly url: string;
  readonly apiKey: string;
  /** Every Messages request received, in arrival order. */
  readonly requests: readonly RecordedRequest[];
  /** Messages requests received so far. */
  readonly count: number;
  /** Requests whose response has not finished (or whose connection is still open). */
  readonly inFlight: number;
  /** The most requests ever in flight at once. */
  readonly maxInFlight: number;
  /** Requests parked by a `hold` behaviour. */
  readonly held: number;
  /** Lets the `n` longest-parked `hold` requests answer (all when `n` is omitted). */
  releaseHeld(n?: number): void;
  /** Behaviours for the next requests, in order. */
  enqueue(...items: Behaviour[]): void;
  setDefault(b: Behaviour): void;
  /** Resolves once `predicate()` holds, checked after every request start and end; no polling. */
  waitFor(predicate: () => boolean, timeoutMs?: number): Promise<void>;
  /** Forgets requests, counters and queued behaviours (a test that failed midway leaves none behind); keeps the default. */
  reset(): void;
  close(): Promise<void>;
}

/** Fixed token figures: tests assert they are passed through, not their realism. */
const USAGE = { input_tokens: 11, output_tokens: 7 };

export async function startMessagesServer(options: MessagesServerOptions = {}): Promise<MessagesServer> {
  const apiKey = options.apiKey ?? 'test-key';
  let defaultBehaviour: Behaviour = options.defaultBehaviour ?? { kind: 'echo' };
  const queue: Behaviour[] = [];
  let requests: RecordedRequest[] = [];
  let inFlight = 0;
  let maxInFlight = 0;
  let sequence = 0;
  const parked: (() => void)[] = [];
  const events = new EventEmitter();
  events.setMaxListeners(0);

  const server = createServer((req, res) => {
    void handle(req, res).catch((err: unknown) => {
      if (!res.headersSent) sendJson(res, 500, { type: 'error', error: { type: 'api_error', message: String(err) } });
    });
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = new URL(req.url ?? '/', 'http://x').pathname;
    const raw = await readBody(req);
    if (path.startsWith('/_control/')) return control(req.method ?? 'GET', path, raw, res);
    if (req.method !== 'POST' || path !== '/v1/messages') {
      return sendError(res, 404, 'not_found_error', `no route ${req.method} ${path}`);
    }
    const body = parseJson(raw);
    const auth = req.headers['authorization'];
    const key = typeof auth === 'string' && auth.startsWith('Bearer ') ? auth.slice('Bearer '.length) : req.headers['x-api-key'];
    // Rejected requests are recorded too (a client that sends without a key is a finding), but take no behaviour.
    if (key !== apiKey || !req.headers['anthropic-version']) {
      requests.push({ method: req.method, path, headers: req.headers, body, bytes: Buffer.byteLength(raw, 'utf8'), behaviour: 'rejected' });
      events.emit('change');
      if (key !== apiKey) return sendError(res, 401, 'authentication_error', 'invalid x-api-key');
      return sendError(res, 400, 'invalid_request_error', 'anthropic-version header is required');
    }

    // What the API refuses whatever the behaviour (recorded, no behaviour taken).
    const refused = invalidRequest(body);
    if (refused !== null) {
      requests.push({ method: req.method, path, headers: req.headers, body, bytes: Buffer.byteLength(raw, 'utf8'), behaviour: 'rejected' });
      events.emit('change');
      return sendError(res, 400, 'invalid_request_error', refused);
    }

    const behaviour = queue.shift() ?? defaultBehaviour;
    requests.push({
      method: req.method,
      path,
      headers: req.headers,
      body,
      bytes: Buffer.byteLength(raw, 'utf8'),
      behaviour: behaviour.kind,
    });
    inFlight++;
    maxInFlight = Math.max(maxInFlight, inFlight);
    let ended = false;
    const end = () => {
      if (ended) return;
      ended = true;
      inFlight--;
      events.emit('change');
    };
    res.on('close', end);
    events.emit('change');

    if (behaviour.delayMs) await delay(behaviour.delayMs, res);
    if (res.destroyed) return;
    respond(behaviour, body, res);
  }

  function respond(behaviour: Behaviour, body: unknown, res: ServerResponse): void {
    const requestId = `req_test_${++sequence}`;
    switch (behaviour.kind) {
      case 'echo':
        return sendJson(res, 200, message(echoSummary(body), 'end_turn', body), requestId);
      case 'message':
        return sendJson(res, 200, { ...message('', behaviour.stopReason, body), content: behaviour.content }, requestId);
      case 'error':
        return sendJson(
          res,
          behaviour.status,
          {
            type: 'error',
            error: { type: behaviour.errorType, message: behaviour.message ?? behaviour.errorType },
            request_id: requestId,
          },
          requestId,
          behaviour.headers,
        );
      case 'malformed':
        res.writeHead(200, { 'content-type': 'application/json', 'request-id': requestId });
        res.end('{"id": "msg_broken", "type": "message", "content": [');
        return;
      case 'hang':
        return;
      case 'hang_after_headers':
        res.writeHead(200, { 'content-type': 'application/json', 'request-id': requestId });
        res.flushHeaders();
        return;
      case 'reset':
        res.socket?.destroy();
        return;
      case 'hold': {
        const answer = () => {
          if (!res.destroyed) respond({ kind: 'echo' }, body, res);
        };
        parked.push(answer);
        res.on('close', () => {
          const at = parked.indexOf(answer);
          if (at >= 0) parked.splice(at, 1);
        });
        events.emit('change');
        return;
      }
    }
  }

  function control(method: string, path: string, raw: string, res: ServerResponse): void {
    if (method === 'POST' && path === '/_control/queue') {
      const items = parseJson(raw);
      if (Array.isArray(items)) queue.push(...(items as Behaviour[]));
      return sendJson(res, 200, { queued: queue.length });
    }
    if (method === 'POST' && path === '/_control/default') {
      defaultBehaviour = parseJson(raw) as Behaviour;
      return sendJson(res, 200, { ok: true });
    }
    if (method === 'GET' && path === '/_control/stats') {
      return sendJson(res, 200, { count: requests.length, inFlight, maxInFlight, requests });
    }
    return sendError(res, 404, 'not_found_error', `no control route ${method} ${path}`);
  }

  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}`,
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
    get maxInFlight() {
      return maxInFlight;
    },
    get held() {
      return parked.length;
    },
    releaseHeld(n = Infinity) {
      for (const answer of parked.splice(0, n)) answer();
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
          if (!predicate()) return;
          cleanup();
          resolve();
        };
        const timer = setTimeout(() => {
          cleanup();
          reject(new Error(`messages server: condition not met within ${timeoutMs} ms (count ${requests.length}, in flight ${inFlight})`));
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
      maxInFlight = inFlight;
    },
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

let messageCount = 0;

function message(t: string, stopReason: string | null, body: unknown): Record<string, unknown> {
  const model = isRecord(body) && typeof body['model'] === 'string' ? body['model'] : 'unknown-model';
  return {
    // Unique, as the API's are: an application keys its request receipts by it.
    id: `msg_test_${++messageCount}`,
    type: 'message',
    role: 'assistant',
    model,
    content: [text(t)],
    stop_reason: stopReason,
    stop_sequence: null,
    usage: USAGE,
  };
}

/**
 * The echo answer: "Summary of N items." then, per `<reply id="...">`,
 * `<reply pair="...">` or `<item id="...">` in the user turn, the id (`pair 12`
 * for a pair number, as conversation-compaction@5 asks) and the first 60
 * characters of its text (followed by … when there is more).
 */
export function echoSummary(body: unknown): string {
  const messages = isRecord(body) && Array.isArray(body['messages']) ? body['messages'] : [];
  const first = messages[0];
  return echoOfMaterial(isRecord(first) && typeof first['content'] === 'string' ? first['content'] : '');
}

/** The echo answer for the fenced material in a user turn's text (the Chat Completions stand-in echoes the same way). */
export function echoOfMaterial(content: string): string {
  const items = [...content.matchAll(/<(reply|item) (id|pair)="([^"]*)">\n([^]*?)\n<\/\1>/g)];
  // A cut is marked with … (as an extractive summary marks it), so a figure cut short is not a new figure.
  const lines = items.map((m) => {
    const points = [...(m[4] ?? '')];
    return `${m[2] === 'pair' ? `pair ${m[3]}` : m[3]}: ${points.slice(0, 60).join('').replace(/\s+/g, ' ')}${points.length > 60 ? '…' : ''}`;
  });
  return [`Summary of ${items.length} items.`, ...lines].join('\n');
}

function sendJson(res: ServerResponse, status: number, value: unknown, requestId?: string, headers?: Record<string, string>): void {
  const payload = JSON.stringify(value);
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(payload),
    ...(requestId ? { 'request-id': requestId } : {}),
    ...headers,
  });
  res.end(payload);
}

function sendError(res: ServerResponse, status: number, type: string, msg: string): void {
  sendJson(res, status, { type: 'error', error: { type, message: msg } });
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

function parseJson(raw: string): unknown {
  try {
    return JSON.parse(raw);
  } catch {
    return undefined;
  }
}

/** Waits `ms`, or less if the client goes away first. */
function delay(ms: number, res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      res.off('close', done);
      resolve();
    }
    res.on('close', done);
  });
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null;
}

// Standalone: print the URL and serve until terminated.
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const server = await startMessagesServer();
  process.stdout.write(`${JSON.stringify({ url: server.url })}\n`);
  const stop = () => {
    void server.close().then(() => process.exit(0));
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}
