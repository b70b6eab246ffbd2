// Drives one example's chat service through a real conversation and checks what the stand-in saw
// (examples/run.sh runs it from the temporary app folder, where 'sourcebound' is the installed tarball).
//   node drive.mjs <label>   env: CHAT_URL, STAND_IN_URL, MODEL (the example's, to pick its requests),
//                                 DATABASE_URL, THREADS, THREAD_ID, TURNS, FAIL_AT
// Checks, exiting non-zero on the first that fails:
// - every turn's reply is the stand-in's answer, and every reply is stored: the conversation has TURNS pairs,
//   each one byte-identical to the real exchange (read back through the public projection API);
// - every request the stand-in received is at most the budget the example asked for (body bytes, with the
//   system prompt and the new message, which the example reserves);
// - once the worker has summarized pairs 0..9, a later request carries the summary;
// - a blank message and a conversation of another scope are refused (400, naming what is wrong) before a turn begins;
// - the overloaded turn (FAIL_AT) answers 502 and leaves a failed run, not a running one, and the
//   conversation goes on; no run of the conversation is left in a non-final status.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import pg from 'pg';
import { inspectConversation, projectConversationHistory } from 'sourcebound';

const label = process.argv[2];
const { CHAT_URL, STAND_IN_URL, MODEL, THREADS, THREAD_ID } = process.env;
const TURNS = Number(process.env.TURNS ?? 36);
const FAIL_AT = Number(process.env.FAIL_AT ?? 12);
const FAIL_MARKER = '[stand-in: overloaded]';
const SCOPE = `example-${label}`;
const SUMMARY_WAIT_MS = 60_000;

const thread = readFileSync(THREADS, 'utf8')
  .trim()
  .split('\n')
  .map((l) => JSON.parse(l))
  .find((t) => t.id === THREAD_ID);
assert.ok(thread && thread.pairs.length >= TURNS, `thread ${THREAD_ID} with at least ${TURNS} pairs`);
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
const started = Date.now();

async function post(body) {
  const res = await fetch(`${CHAT_URL}/chat`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: await res.json() };
}
async function standInRequests() {
  const all = await (await fetch(`${STAND_IN_URL}/requests`)).json();
  return all.filter((r) => r.model === MODEL);
}
const runStatus = async (runId) => (await pool.query('select status from sourcebound.runs where id = $1', [runId])).rows[0]?.status;

let conversationId;
let failedRunId;
let requestsAtSummary = null;
try {
  for (let i = 0; i < TURNS; i++) {
    const { user, assistant } = thread.pairs[i];
    if (i === FAIL_AT) {
      const failed = await post({ conversationId, scope: SCOPE, text: `${user} ${FAIL_MARKER}` });
      assert.equal(failed.status, 502, `the overloaded turn answers 502: ${JSON.stringify(failed.body)}`);
      failedRunId = failed.body.runId;
      assert.equal(await runStatus(failedRunId), 'failed', 'the overloaded turn is a failed run, not a running one');
    }
    const turn = await post({ conversationId, scope: SCOPE, text: user });
    assert.equal(turn.status, 200, `turn ${i}: ${JSON.stringify(turn.body)}`);
    assert.equal(turn.body.reply, assistant, `turn ${i}: the reply is the real one`);
    conversationId ??= turn.body.conversationId;
    assert.equal(turn.body.conversationId, conversationId);
    if (i === 0) {
      // Mistakes are refused before a turn begins: 400, naming the field; nothing is written, the model is not called.
      const blank = await post({ conversationId, scope: SCOPE, text: ' ' });
      assert.equal(blank.status, 400);
      assert.match(blank.body.error, /userText must be a string with non-whitespace text/);
      const otherScope = await post({ conversationId, scope: `${SCOPE}-other`, text: user });
      assert.equal(otherScope.status, 400);
      assert.match(otherScope.body.error, /not found/i, 'a conversation of another scope is not found');
    }
    if (i === 29) {
      // 30 pairs: pairs 0..9 are plannable (the newest 20 are never summarized); the worker summarizes them.
      const deadline = Date.now() + SUMMARY_WAIT_MS;
      for (;;) {
        const { records } = await inspectConversation(pool, conversationId, SCOPE);
        assert.ok(!records.some((r) => r.status === 'failed'), `a range failed: ${JSON.stringify(records)}`);
        if (records.some((r) => r.status === 'completed' && r.fromPair === 0)) break;
        assert.ok(Date.now() < deadline, `no summary of pairs 0..9 within ${SUMMARY_WAIT_MS / 1000} s (is the worker running?)`);
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
      requestsAtSummary = (await standInRequests()).length;
    }
  }

  // Every reply stored: TURNS pairs, each the real exchange, read back through the public API.
  const inspection = await inspectConversation(pool, conversationId, SCOPE);
  assert.equal(inspection.pairCount, TURNS, 'one pair per completed turn, none for the failed one');
  assert.deepEqual(inspection.problems, []);
  const whole = await projectConversationHistory({
    pool,
    conversationId,
    scope: SCOPE,
    budgetBytes: 10_000_000,
    layout: 'newest-first',
    persistLayout: false,
  });
  assert.deepEqual(
    whole.items.map((p) => [p.kind, p.userText, p.assistantText]),
    thread.pairs.slice(0, TURNS).map((p) => ['pair', p.user, p.assistant]),
  );
  const { rows: runs } = await pool.query(
    'select status, count(*)::int as n from sourcebound.runs where conversation_id = $1 group by status order by status',
    [conversationId],
  );
  assert.deepEqual(
    runs,
    [
      { status: 'completed', n: TURNS },
      { status: 'failed', n: 1 },
    ],
    'every run settled: completed, and the one failed',
  );

  // What the stand-in received.
  const requests = await standInRequests();
  const ok = requests.filter((r) => r.status === 200);
  const failures = requests.filter((r) => r.status !== 200);
  assert.equal(ok.length, TURNS, 'one model request per completed turn');
  assert.ok(
    failures.length >= 1 && failures.every((r) => r.userText.includes(FAIL_MARKER) && r.status >= 500),
    `only the overloaded turn failed at the stand-in (the client retried it ${failures.length - 1} times): ${JSON.stringify(failures.map((r) => [r.status, r.problem]))}`,
  );
  for (const r of requests) {
    assert.ok(
      r.bytes <= r.budgetBytes,
      `request ${r.n} (${r.userText?.slice(0, 40)}...) is ${r.bytes} bytes, over the budget of ${r.budgetBytes}`,
    );
    assert.ok(r.system, `request ${r.n} carries the whole system prompt`);
    if (r.wire === 'anthropic' && r.messages > 1)
      assert.ok(r.cacheBreakpoints >= 1 && r.cacheBreakpoints <= 4, `request ${r.n}: ${r.cacheBreakpoints} cache breakpoints`);
  }
  const over = requests.filter((r) => r.bytes > r.budgetBytes / 2);
  assert.ok(over.length > 0, 'the conversation outgrew half the budget (else the budget was never tested)');
  const later = requests.slice(requestsAtSummary).filter((r) => r.status === 200);
  const withSummary = later.filter((r) => r.summary);
  assert.ok(
    withSummary.length > 0,
    `a request after the worker summarized pairs 0..9 carries the summary (requests ${requestsAtSummary + 1}..${requests.length})`,
  );
  const max = Math.max(...requests.map((r) => r.bytes));
  const breakpoints = [...new Set(requests.map((r) => r.cacheBreakpoints))].sort().join('/');
  console.log(
    `${label}: ${TURNS} turns + 1 failed (${failures.length} attempts, ${failures[0].status}) in ${((Date.now() - started) / 1000).toFixed(1)} s; ` +
      `summary of pairs 0..9 ready after turn 30; ` +
      `largest request ${max} of ${requests[0].budgetBytes} bytes; ${withSummary.length} of the ${later.length} requests after it carry the summary; ` +
      `cache breakpoints per request ${breakpoints}; request fields ${Math.max(...requests.map((r) => r.envelopeBytes))} bytes at most`,
  );
} finally {
  await pool.end();
}
