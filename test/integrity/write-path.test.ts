import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase } from '../support/db.ts';
import { addPairs, compactionJobs, createConversation, drift, pairCount } from '../support/fixtures.ts';
import { inTwoTransactions, type Statement } from '../support/transactions.ts';

/**
 * What the application's write path costs in function calls (migration 0024,
 * bench P1), counted, not timed: every statement of a live pair, one at a
 * time, with the function calls it made (pg_stat_xact_user_functions under
 * track_functions = 'all', so SQL functions count too). A trigger that starts
 * calling PL/pgSQL where the row cannot change a pair, or a completion that
 * goes back to the general path, fails here.
 *
 * And the lock protocol of the fast paths (0003): two transactions that each
 * write half of a pair, in either order, end with the pair.
 */
const db = await createTestDatabase();

type Calls = Record<string, number>;

let client: pg.Client;
beforeAll(async () => {
  client = new pg.Client({ connectionString: db.url });
  await client.connect();
  await client.query(`set track_functions = 'all'`);
});
afterAll(async () => {
  await client.end();
});

/** Function calls of this transaction so far, ours and graphile-worker's. */
async function callsSoFar(): Promise<Calls> {
  const { rows } = await client.query<{ name: string; calls: number }>(
    `select schemaname || '.' || funcname as name, calls::int as calls from pg_stat_xact_user_functions
     where schemaname in ('sourcebound', 'graphile_worker')`,
  );
  return Object.fromEntries(rows.map((r) => [r.name, r.calls]));
}

/** Runs one statement and returns the function calls it made (names without zeros). */
async function callsOf(sql: string, params: unknown[] = []): Promise<{ calls: Calls; rows: Record<string, unknown>[] }> {
  const before = await callsSoFar();
  const { rows } = await client.query(sql, params);
  const after = await callsSoFar();
  const calls: Calls = {};
  for (const [name, n] of Object.entries(after)) if (n - (before[name] ?? 0) > 0) calls[name] = n - (before[name] ?? 0);
  return { calls, rows };
}

/** One live pair, statement by statement, in one transaction; the calls of each statement. */
async function livePair(conversationId: string): Promise<Record<string, Calls>> {
  await client.query('begin');
  try {
    const run = await callsOf(`insert into sourcebound.runs (conversation_id, status) values ($1, 'running') returning id`, [
      conversationId,
    ]);
    const runId = run.rows[0]!.id as string;
    const user = await callsOf(
      `insert into sourcebound.messages (conversation_id, run_id, role, content) values ($1, $2, 'user', 'What moved the fund?')`,
      [conversationId, runId],
    );
    const assistant = await callsOf(
      `insert into sourcebound.messages (conversation_id, run_id, role, content, status) values ($1, $2, 'assistant', '', 'streaming') returning id`,
      [conversationId, runId],
    );
    const assistantId = assistant.rows[0]!.id as string;
    const tokens: Calls = {};
    for (const text of ['The', 'The fund', 'The fund moved']) {
      Object.assign(tokens, (await callsOf(`update sourcebound.messages set content = $2 where id = $1`, [assistantId, text])).calls);
    }
    const completed = await callsOf(
      `update sourcebound.messages set content = 'The fund moved 2.5%.', status = 'completed' where id = $1`,
      [assistantId],
    );
    const runCompleted = await callsOf(`update sourcebound.runs set status = 'completed' where id = $1`, [runId]);
    await client.query('commit');
    return {
      'insert run (running)': run.calls,
      'insert user message': user.calls,
      'insert assistant (streaming)': assistant.calls,
      'streaming updates': tokens,
      'assistant completed': completed.calls,
      'run completed': runCompleted.calls,
    };
  } catch (error) {
    await client.query('rollback');
    throw error;
  }
}

describe('the write path of a live pair, in function calls', () => {
  it('below the threshold: only the user message, the completion of the assistant and of the run enter PL/pgSQL, once each, and nothing nested', async () => {
    const c = await createConversation(db.pool);
    await addPairs(db.pool, c, 5);
    expect(await livePair(c)).toEqual({
      'insert run (running)': {},
      // Whether a user message can complete a pair depends on its run's
      // status, which a WHEN clause cannot read: one call, which returns.
      'insert user message': { 'sourcebound.messages_refresh_pair': 1 },
      'insert assistant (streaming)': {},
      'streaming updates': {},
      'assistant completed': { 'sourcebound.messages_refresh_pair': 1 },
      // The append, in the trigger itself: no refresh_pair(), no pairs_changed().
      'run completed': { 'sourcebound.runs_refresh_pair': 1 },
    });
    expect(await pairCount(db.pool, c)).toBe(6);
    expect(await drift(db.pool, c)).toEqual([]);
  });

  it('the crossing to 30 adds one job; the crossing to 40 while it waits writes no job and sends no second add_job', async () => {
    const c = await createConversation(db.pool);
    await addPairs(db.pool, c, 29);
    await db.pool.query(`delete from graphile_worker._private_jobs where payload->>'conversationId' = $1`, [c]);
    const at30 = await livePair(c);
    expect(at30['run completed']).toMatchObject({
      'sourcebound.runs_refresh_pair': 1,
      'sourcebound.pairs_changed': 1,
      'sourcebound.enqueue_compaction': 1,
      'graphile_worker.add_job': 1,
    });
    expect(at30['run completed']).not.toHaveProperty(['sourcebound.refresh_pair']);
    expect(await compactionJobs(db.pool, c)).toBe(1);
    const {
      rows: [job30],
    } = await db.pool.query(`select id, revision from graphile_worker._private_jobs where payload->>'conversationId' = $1`, [c]);

    // Pairs 31..39 report nothing: no pairs_changed() between crossings.
    for (let n = 31; n < 40; n++) {
      const calls = await livePair(c);
      expect(calls['run completed'], `pair ${n}`).toEqual({ 'sourcebound.runs_refresh_pair': 1 });
    }
    const at40 = await livePair(c);
    expect(at40['run completed']).toEqual({
      'sourcebound.runs_refresh_pair': 1,
      'sourcebound.pairs_changed': 1,
      'sourcebound.enqueue_compaction': 1,
    });
    // The same job, untouched, and now two ranges marked for it.
    const {
      rows: [job40],
    } = await db.pool.query(`select id, revision from graphile_worker._private_jobs where payload->>'conversationId' = $1`, [c]);
    expect(job40).toEqual(job30);
    const { rows: marks } = await db.pool.query(
      `select from_pair from sourcebound.compaction_marks where conversation_id = $1 order by 1`,
      [c],
    );
    expect(marks.map((m) => m.from_pair)).toEqual([0, 10]);
    expect(await pairCount(db.pool, c)).toBe(40);
    expect(await drift(db.pool, c)).toEqual([]);
  });

  it('a run that leaves eligibility, and a completed run with no reply, take the general path and stay exact', async () => {
    const c = await createConversation(db.pool);
    const [p] = await addPairs(db.pool, c, 3);
    await db.pool.query(`update sourcebound.runs set status = 'failed' where id = $1`, [p!.runId]);
    expect(await pairCount(db.pool, c)).toBe(2);
    await db.pool.query(`update sourcebound.runs set status = 'partial' where id = $1`, [p!.runId]);
    expect(await pairCount(db.pool, c)).toBe(3);
    const {
      rows: [r],
    } = await db.pool.query(`insert into sourcebound.runs (conversation_id, status) values ($1, 'running') returning id`, [c]);
    await db.pool.query(`insert into sourcebound.messages (conversation_id, run_id, role, content) values ($1, $2, 'user', 'q')`, [
      c,
      r.id,
    ]);
    await db.pool.query(`update sourcebound.runs set status = 'completed' where id = $1`, [r.id]);
    expect(await pairCount(db.pool, c)).toBe(3);
    await db.pool.query(`insert into sourcebound.messages (conversation_id, run_id, role, content) values ($1, $2, 'assistant', 'a')`, [
      c,
      r.id,
    ]);
    expect(await pairCount(db.pool, c)).toBe(4);
    expect(await drift(db.pool, c)).toEqual([]);
  });

  it('the message WHEN clauses let through exactly role = user or status = completed, before or after (0028 writes them as one array overlap)', async () => {
    // Messages without a run: the function returns at once, so only the
    // clause decides whether it is called. Every role and status the CHECK
    // constraints allow, every update from one combination to any other.
    const c = await createConversation(db.pool);
    const combos = ['user', 'assistant'].flatMap((role) => ['streaming', 'completed', 'failed'].map((status) => ({ role, status })));
    const passes = (m: { role: string; status: string }) => m.role === 'user' || m.status === 'completed';
    const called = (calls: Calls) => calls['sourcebound.messages_refresh_pair'] ?? 0;
    const set = `update sourcebound.messages set role = $2, status = $3 where id = $1`;
    // One transaction: pg_stat_xact_user_functions counts are exact only
    // within one (across transactions they depend on when the backend flushes).
    await client.query('begin');
    try {
      for (const from of combos) {
        const inserted = await callsOf(
          `insert into sourcebound.messages (conversation_id, role, content, status) values ($1, $2, 'x', $3) returning id`,
          [c, from.role, from.status],
        );
        expect(called(inserted.calls), `insert ${from.role}/${from.status}`).toBe(passes(from) ? 1 : 0);
        const id = inserted.rows[0]!.id as string;
        for (const to of combos) {
          const updated = await callsOf(set, [id, to.role, to.status]);
          expect(called(updated.calls), `update ${from.role}/${from.status} -> ${to.role}/${to.status}`).toBe(
            passes(from) || passes(to) ? 1 : 0,
          );
          await client.query(set, [id, from.role, from.status]);
        }
      }
    } finally {
      await client.query('rollback');
    }
  });

  it('a user message that is still streaming is part of a pair, and its text edits are seen', async () => {
    const c = await createConversation(db.pool);
    await addPairs(db.pool, c, 2);
    const {
      rows: [r],
    } = await db.pool.query(`insert into sourcebound.runs (conversation_id, status) values ($1, 'completed') returning id`, [c]);
    await db.pool.query(`insert into sourcebound.messages (conversation_id, run_id, role, content) values ($1, $2, 'assistant', 'a')`, [
      c,
      r.id,
    ]);
    const {
      rows: [u],
    } = await db.pool.query(
      `insert into sourcebound.messages (conversation_id, run_id, role, content, status) values ($1, $2, 'user', 'q', 'streaming') returning id`,
      [c, r.id],
    );
    expect(await pairCount(db.pool, c)).toBe(3);
    // Whitespace only: no longer a pair (0016 skipped this streaming -> streaming edit).
    await db.pool.query(`update sourcebound.messages set content = '  ' where id = $1`, [u.id]);
    expect(await pairCount(db.pool, c)).toBe(2);
    expect(await drift(db.pool, c)).toEqual([]);
  });
});

describe('two transactions each writing half of a pair', () => {
  type Step = (ids: { c: string; run: string; user?: string; assistant: string }) => Statement;
  const cases: { name: string; setup: 'streaming' | 'no user'; first: Step; second: Step }[] = [
    {
      name: 'the run completes first, the assistant message second',
      setup: 'streaming',
      first: ({ run }) => [`update sourcebound.runs set status = 'completed' where id = $1`, [run]],
      second: ({ assistant }) => [`update sourcebound.messages set status = 'completed' where id = $1`, [assistant]],
    },
    {
      name: 'the run completes first, the user message is inserted second',
      setup: 'no user',
      first: ({ run }) => [`update sourcebound.runs set status = 'completed' where id = $1`, [run]],
      second: ({ c, run }) => [
        `insert into sourcebound.messages (conversation_id, run_id, role, content) values ($1, $2, 'user', 'q')`,
        [c, run],
      ],
    },
    {
      name: 'the user message is inserted first, the run completes second',
      setup: 'no user',
      first: ({ c, run }) => [
        `insert into sourcebound.messages (conversation_id, run_id, role, content) values ($1, $2, 'user', 'q')`,
        [c, run],
      ],
      second: ({ run }) => [`update sourcebound.runs set status = 'completed' where id = $1`, [run]],
    },
  ];

  it.each(cases)('$name: the pair is made once the second commits (the 30th: one job)', async ({ setup, first, second }) => {
    const c = await createConversation(db.pool);
    await addPairs(db.pool, c, 29);
    const {
      rows: [r],
    } = await db.pool.query(`insert into sourcebound.runs (conversation_id, status) values ($1, 'running') returning id`, [c]);
    const assistantStatus = setup === 'streaming' ? 'streaming' : 'completed';
    if (setup === 'streaming')
      await db.pool.query(`insert into sourcebound.messages (conversation_id, run_id, role, content) values ($1, $2, 'user', 'q')`, [
        c,
        r.id,
      ]);
    const {
      rows: [a],
    } = await db.pool.query(
      `insert into sourcebound.messages (conversation_id, run_id, role, content, status) values ($1, $2, 'assistant', 'a', $3) returning id`,
      [c, r.id, assistantStatus],
    );
    const ids = { c, run: r.id as string, assistant: a.id as string };
    // The second waits on the first's conversation lock, then reads what it committed.
    await inTwoTransactions(db.url, first(ids), second(ids), { whileSecondRuns: waitForLockWait });
    expect(await pairCount(db.pool, c)).toBe(30);
    expect(await compactionJobs(db.pool, c)).toBe(1);
    expect(await drift(db.pool, c)).toEqual([]);
  });
});

/** Until the client's backend waits on a lock (the conversation's advisory lock): no sleep guesses the order. */
async function waitForLockWait(waiter: pg.Client): Promise<void> {
  const pid = (waiter as unknown as { processID: number }).processID;
  const deadline = Date.now() + 20_000;
  while (Date.now() < deadline) {
    const { rows } = await db.pool.query(`select wait_event_type from pg_stat_activity where pid = $1`, [pid]);
    if (rows[0]?.wait_event_type === 'Lock') return;
  }
  throw new Error("the second transaction never waited for the first one's lock");
}
