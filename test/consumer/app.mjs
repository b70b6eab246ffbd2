// A plain-Node application using the installed package (no TypeScript, no loader).
//   node app.mjs write          -> writes a 30-pair conversation with the turn helpers, projects it, prints its id
//   node app.mjs compacted <id> -> waits for the worker's summary; the whole history still fits raw, and a
//                                  budget one pair short of it shows the summary in place of pairs 0..9
import assert from 'node:assert/strict';
import pg from 'pg';
import {
  projectConversationHistory,
  toAnthropicMessages,
  plannableRanges,
  schema,
  beginTurn,
  completeTurn,
  startReply,
  appendReply,
  finishReply,
  TurnInputError,
  SourceboundError,
} from 'sourcebound';
import { conversations } from 'sourcebound/schema';

const SCOPE = 'consumer-app';
const PAIRS = 30; // the first range (pairs 0..9) is plannable at 30 pairs
const BUDGET = 64 * 1024; // room for the whole conversation
// newest-first fills the budget anew on each call (the default `stable` layout keeps the first call's prefix for the prompt cache).
const LAYOUT = 'newest-first';

assert.equal(schema.conversations, conversations, 'sourcebound/schema is the same module as the root export');
assert.deepEqual(plannableRanges(PAIRS), [{ fromPair: 0, toPair: 9 }]);

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
const [mode, id] = process.argv.slice(2);
try {
  if (mode === 'write') {
    // The turn helpers, half the replies written whole and half streamed; a mistake is named before anything is written.
    await assert.rejects(
      completeTurn({ pool, scope: SCOPE, runId: 'run-1', assistantText: 'a' }),
      (e) =>
        e instanceof TurnInputError && e instanceof SourceboundError && e.message === "completeTurn: runId must be a UUID; got 'run-1'",
    );
    let conversation;
    for (let i = 0; i < PAIRS; i++) {
      const turn = await beginTurn({
        pool,
        scope: SCOPE,
        conversationId: conversation?.id,
        userText: `Question ${i}: how do I rotate log file number ${i} without losing lines?`,
      });
      conversation = { id: turn.conversationId };
      const reply = `Answer ${i}: use copytruncate for file ${i}, or signal the writer to reopen it after the rename. Check with tail -F.`;
      if (i % 2 === 0) {
        await completeTurn({ pool, scope: SCOPE, runId: turn.runId, assistantText: reply });
      } else {
        await startReply({ pool, scope: SCOPE, runId: turn.runId });
        for (const text of reply.split(/(?<=,)/)) await appendReply({ pool, scope: SCOPE, runId: turn.runId, text });
        await finishReply({ pool, scope: SCOPE, runId: turn.runId });
      }
    }
    const history = await projectConversationHistory({
      pool,
      conversationId: conversation.id,
      scope: SCOPE,
      budgetBytes: BUDGET,
      layout: LAYOUT,
    });
    assert.equal(history.items.filter((i) => i.kind === 'pair').length, PAIRS, 'every pair projected raw before compaction');
    assert.equal(history.items.filter((i) => i.kind === 'summary').length, 0);
    assert.equal(history.omitted.length, 0);
    checkMessages(history);
    process.stdout.write(`${conversation.id}\n`);
  } else if (mode === 'compacted') {
    assert.ok(id, 'usage: node app.mjs compacted <conversationId>');
    const deadline = Date.now() + 120_000;
    for (;;) {
      const { rows } = await pool.query(`select status from sourcebound.conversation_summaries where conversation_id = $1`, [id]);
      if (rows.some((r) => r.status === 'completed')) break;
      assert.ok(!rows.some((r) => r.status === 'failed'), `the range failed: ${JSON.stringify(rows)}`);
      assert.ok(Date.now() < deadline, 'no completed summary within 120 s');
      await new Promise((r) => setTimeout(r, 250));
    }
    // A history that fits is sent whole and raw, summary or not.
    const whole = await projectConversationHistory({ pool, conversationId: id, scope: SCOPE, budgetBytes: BUDGET, layout: LAYOUT });
    assert.equal(whole.items.filter((i) => i.kind === 'pair').length, PAIRS, 'the whole history fits: every pair raw');
    // Smaller than the whole history: the summary stands where pairs 0..9 were, the newest pairs raw after it.
    const history = await projectConversationHistory({
      pool,
      conversationId: id,
      scope: SCOPE,
      budgetBytes: whole.bytes - 1,
      layout: LAYOUT,
    });
    const summaries = history.items.filter((i) => i.kind === 'summary');
    assert.equal(summaries.length, 1, 'the completed summary replaces pairs 0..9 in the projection');
    assert.equal(history.items[0].kind, 'summary', 'the summary stands where pairs 0..9 were');
    assert.equal(history.items.at(-1).pairIndex, PAIRS - 1, 'the newest pair is raw, last');
    checkMessages(history);
    process.stdout.write(`projection: ${history.items.length} items, 1 summary\n`);
  } else {
    throw new Error(`unknown mode: ${mode}`);
  }
} finally {
  await pool.end();
}

function checkMessages(history) {
  const messages = toAnthropicMessages(history);
  assert.equal(messages[0].role, 'user');
  assert.equal(messages.at(-1).role, 'assistant');
  messages.forEach((m, i) => i > 0 && assert.notEqual(m.role, messages[i - 1].role, 'roles alternate'));
  assert.ok(Buffer.byteLength(JSON.stringify(messages), 'utf8') <= BUDGET);
}
