// A chat service on the Anthropic SDK: POST /chat {conversationId?, scope, text} -> {conversationId, runId, reply}.
// Each request: begin a turn with the user message, project the history within the budget, call the model,
// complete the turn with its reply; a failed call fails the turn (502). Code lines marked `// sourcebound`
// are all the sourcebound-specific code (every line that exists because of it). Run it beside
// `npx sourcebound worker` (examples/README.md).
import { createServer } from 'node:http';
import pg from 'pg';
import Anthropic from '@anthropic-ai/sdk';
import { beginTurn, completeTurn, failTurn, projectConversationHistory, toAnthropicMessages } from 'sourcebound/app'; // sourcebound

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL }); // sourcebound
const client = new Anthropic(); // ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL
const model = process.env.MODEL ?? 'claude-sonnet-4-5';
const system = process.env.SYSTEM_PROMPT ?? 'You are a helpful assistant. Answer the last message; earlier turns are context.';
const budgetTokens = Number(process.env.BUDGET_TOKENS ?? 150_000); // sourcebound: the whole request (system, history, new message)

async function chat({ conversationId, scope, text }) {
  const turn = await beginTurn({ pool, scope, conversationId, userText: text }); // sourcebound
  try {
    // sourcebound: a turn that fails is marked failed, never left running
    const newMessage = { role: 'user', content: text }; // sourcebound: reserved, so a variable
    const history = await projectConversationHistory({
      pool,
      scope,
      conversationId: turn.conversationId,
      budgetTokens, // sourcebound
      reserve: { system, newMessage, bytes: 200 },
    }); // sourcebound: 200 bytes for model, max_tokens and the JSON around them
    // The default shape carries cache_control breakpoints (at most three; a fourth is yours).
    const response = await client.messages.create({
      model,
      max_tokens: 1024,
      system,
      messages: [...toAnthropicMessages(history), newMessage],
    }); // sourcebound
    const reply = response.content
      .filter((block) => block.type === 'text')
      .map((block) => block.text)
      .join('');
    await completeTurn({ pool, scope, runId: turn.runId, assistantText: reply }); // sourcebound
    return { conversationId: turn.conversationId, runId: turn.runId, reply };
  } catch (error) {
    // sourcebound
    await failTurn({ pool, scope, runId: turn.runId, status: 'failed' }); // sourcebound
    throw Object.assign(error, { runId: turn.runId }); // sourcebound
  } // sourcebound
}

const server = createServer(async (req, res) => {
  const answer = (status, body) => res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  if (req.method !== 'POST' || req.url !== '/chat') return answer(404, { error: 'POST /chat' });
  try {
    let raw = '';
    for await (const chunk of req) raw += chunk;
    answer(200, await chat(JSON.parse(raw)));
  } catch (error) {
    // A bad request (a TurnInputError names the field) is 400; a turn begun and failed is 502 with its runId.
    answer(error.runId ? 502 : 400, { error: error.message, runId: error.runId });
  }
});
server.listen(Number(process.env.PORT ?? 3000), '127.0.0.1', () => console.log(`chat service listening on ${server.address().port}`));
process.on('SIGTERM', () => server.close(() => pool.end())); // sourcebound: the pool is sourcebound's
