// A local stand-in for the model APIs the examples call, for examples/run.sh:
//   POST /v1/messages          Anthropic Messages (the Anthropic SDK; the AI SDK's Anthropic provider)
//   POST /v1/chat/completions  OpenAI Chat Completions (the openai SDK; the AI SDK's OpenAI provider, .chat())
//   GET  /requests             what it received, for the driver's checks
// It answers each request with the conversation's real reply to the request's last user message
// (REPLIES: a JSON file of { user, assistant } pairs), so the stored history is the real one. A last
// user message containing FAIL_MARKER is answered with an overload error (529 Anthropic, 500 OpenAI),
// every time, so the client's retries fail too and the turn must fail.
// Per request it records the body's UTF-8 bytes against BUDGET_BYTES (the whole request the example
// asked for: budgetTokens * 3), whether the system prompt is SYSTEM_PROMPT, the cache breakpoints, and
// whether a sourcebound summary is in it.
// Prints `stand-in listening on <port>` when ready.
import { createServer } from 'node:http';
import { readFileSync } from 'node:fs';

const FAIL_MARKER = '[stand-in: overloaded]';
const SUMMARY_LABEL = "[sourcebound: non-authoritative summary of the assistant's replies for pairs ";
const budgetBytes = Number(process.env.BUDGET_BYTES);
const expectedSystem = process.env.SYSTEM_PROMPT;
const replies = new Map(JSON.parse(readFileSync(process.env.REPLIES, 'utf8')).map((p) => [p.user, p.assistant]));
const requests = [];
let sequence = 0;

function lastUserText(messages) {
  const last = messages.at(-1);
  if (last?.role !== 'user') return undefined;
  if (typeof last.content === 'string') return last.content;
  return last.content
    .filter((b) => b.type === 'text')
    .map((b) => b.text)
    .join('');
}

// The system prompt as sent: Anthropic `system` (a string or text blocks), OpenAI a first system message.
function systemText(wire, body) {
  const system = wire === 'anthropic' ? body.system : body.messages[0]?.role === 'system' ? body.messages[0].content : undefined;
  return Array.isArray(system) ? system.map((b) => b.text).join('') : system;
}

function send(res, status, value) {
  const payload = JSON.stringify(value);
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(payload),
    'request-id': `req_${sequence}`,
  });
  res.end(payload);
}

const server = createServer(async (req, res) => {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  const raw = Buffer.concat(chunks);
  const path = new URL(req.url, 'http://x').pathname;
  if (req.method === 'GET' && path === '/requests') return send(res, 200, requests);
  const wire = path === '/v1/messages' ? 'anthropic' : path === '/v1/chat/completions' ? 'openai' : null;
  if (req.method !== 'POST' || wire === null)
    return send(res, 404, { error: { type: 'not_found_error', message: `no route ${req.method} ${path}` } });
  const body = JSON.parse(raw.toString('utf8'));
  const text = raw.toString('utf8');
  const user = lastUserText(body.messages ?? []);
  const record = {
    n: ++sequence,
    wire,
    bytes: raw.length,
    budgetBytes,
    model: body.model,
    userText: user,
    messages: body.messages.length,
    summary: text.includes(SUMMARY_LABEL),
    cacheBreakpoints: text.split('"cache_control":').length - 1,
    system: systemText(wire, body) === expectedSystem,
    // What the request's own fields take (model, max_tokens, the JSON around them): the reserve's `bytes` must cover it.
    envelopeBytes:
      raw.length -
      Buffer.byteLength(JSON.stringify(body.messages)) -
      (wire === 'anthropic' ? Buffer.byteLength(JSON.stringify(body.system ?? '')) : 0),
    status: 200,
    problem: null,
  };
  requests.push(record);
  const reply = user === undefined ? undefined : replies.get(user);
  if (user?.includes(FAIL_MARKER)) {
    record.status = wire === 'anthropic' ? 529 : 500;
    return wire === 'anthropic'
      ? send(res, 529, { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded (stand-in)' } })
      : send(res, 500, { error: { message: 'The server had an error (stand-in)', type: 'server_error', param: null, code: null } });
  }
  if (reply === undefined) {
    record.status = 400;
    record.problem = `no reply for the last user message: ${JSON.stringify(user)?.slice(0, 80)}`;
    return send(
      res,
      400,
      wire === 'anthropic'
        ? { type: 'error', error: { type: 'invalid_request_error', message: record.problem } }
        : { error: { message: record.problem, type: 'invalid_request_error', param: null, code: null } },
    );
  }
  const usage = { input: Math.ceil(raw.length / 4), output: Math.ceil(Buffer.byteLength(reply) / 4) };
  if (wire === 'anthropic') {
    return send(res, 200, {
      id: `msg_standin_${sequence}`,
      type: 'message',
      role: 'assistant',
      model: body.model,
      content: [{ type: 'text', text: reply }],
      stop_reason: 'end_turn',
      stop_sequence: null,
      usage: { input_tokens: usage.input, output_tokens: usage.output, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 },
    });
  }
  return send(res, 200, {
    id: `chatcmpl-standin-${sequence}`,
    object: 'chat.completion',
    created: Math.floor(Date.now() / 1000),
    model: body.model,
    choices: [{ index: 0, message: { role: 'assistant', content: reply, refusal: null }, logprobs: null, finish_reason: 'stop' }],
    usage: { prompt_tokens: usage.input, completion_tokens: usage.output, total_tokens: usage.input + usage.output },
  });
});

server.listen(Number(process.env.PORT ?? 0), '127.0.0.1', () => console.log(`stand-in listening on ${server.address().port}`));
process.on('SIGTERM', () => server.close(() => process.exit(0)));
