import { describe, expect, it } from 'vitest';
import { createTestDatabase } from './support/db.ts';
import { inTwoTransactions } from './support/transactions.ts';
import { addPairs, compactionJobs, createConversation, drift, pairCount } from './support/fixtures.ts';

const db = await createTestDatabase();

describe('the conversation store', () => {
  it('accepts a plain INSERT of the required columns', async () => {
    const {
      rows: [c],
    } = await db.pool.query(`insert into sourcebound.conversations (scope) values ('s') returning *`);
    expect(c.id).toMatch(/^[0-9a-f-]{36}$/);
    expect(c.created_at).toBeInstanceOf(Date);
    const {
      rows: [r],
    } = await db.pool.query(`insert into sourcebound.runs (conversation_id, status) values ($1, 'queued') returning *`, [c.id]);
    const {
      rows: [m],
    } = await db.pool.query(
      `insert into sourcebound.messages (conversation_id, run_id, role, content) values ($1, $2, 'user', 'hi') returning *`,
      [c.id, r.id],
    );
    expect(m.status).toBe('completed');
  });

  it('refuses unknown run statuses, roles and message statuses', async () => {
    const c = await createConversation(db.pool);
    await expect(db.pool.query(`insert into sourcebound.runs (conversation_id, status) values ($1, 'done')`, [c])).rejects.toThrow(
      /runs_status_known/,
    );
    const {
      rows: [r],
    } = await db.pool.query(`insert into sourcebound.runs (conversation_id, status) values ($1, 'running') returning id`, [c]);
    await expect(
      db.pool.query(`insert into sourcebound.messages (conversation_id, run_id, role, content) values ($1, $2, 'tool', 'x')`, [c, r.id]),
    ).rejects.toThrow(/messages_role_known/);
    await expect(
      db.pool.query(
        `insert into sourcebound.messages (conversation_id, run_id, role, content, status) values ($1, $2, 'user', 'x', 'done')`,
        [c, r.id],
      ),
    ).rejects.toThrow(/messages_status_known/);
  });

  it('allows at most one user and one assistant message per run', async () => {
    const c = await createConversation(db.pool);
    const [p] = await addPairs(db.pool, c, 1);
    await expect(
      db.pool.query(`insert into sourcebound.messages (conversation_id, run_id, role, content) values ($1, $2, 'user', 'again')`, [
        c,
        p!.runId,
      ]),
    ).rejects.toThrow(/messages_run_role_key/);
  });

  it('refuses a message whose run belongs to another conversation', async () => {
    const a = await createConversation(db.pool);
    const b = await createConversation(db.pool);
    const {
      rows: [r],
    } = await db.pool.query(`insert into sourcebound.runs (conversation_id, status) values ($1, 'completed') returning id`, [a]);
    await expect(
      db.pool.query(`insert into sourcebound.messages (conversation_id, run_id, role, content) values ($1, $2, 'user', 'x')`, [b, r.id]),
    ).rejects.toThrow(/messages_run_same_conversation_fk/);
    // Nor can a message move to another conversation while keeping its run.
    const [p] = await addPairs(db.pool, a, 1);
    await expect(
      db.pool.query(`update sourcebound.messages set conversation_id = $1 where id = $2`, [b, p!.userMessageId]),
    ).rejects.toThrow(/messages_run_same_conversation_fk/);
  });

  it('refuses TRUNCATE of the tables that keep immutable records', async () => {
    for (const table of ['conversation_summaries', 'conversation_summary_attempts', 'run_checkpoints', 'run_turns']) {
      await expect(db.pool.query(`truncate sourcebound.${table} cascade`), table).rejects.toThrow(/cannot be truncated/);
    }
  });

  it('deleting a conversation deletes its runs, messages and pairs', async () => {
    const c = await createConversation(db.pool);
    await addPairs(db.pool, c, 35);
    await db.pool.query('delete from sourcebound.conversations where id = $1', [c]);
    for (const table of ['runs', 'messages', 'pairs']) {
      const { rows } = await db.pool.query(`select count(*)::int as n from sourcebound.${table} where conversation_id = $1`, [c]);
      expect(rows[0].n, table).toBe(0);
    }
  });
});

describe('edits (messages.edited_at, 0037)', () => {
  it('records when the content of a completed message changes, and only then', async () => {
    const c = await createConversation(db.pool);
    const {
      rows: [r],
    } = await db.pool.query(`insert into sourcebound.runs (conversation_id, status) values ($1, 'running') returning id`, [c]);
    const {
      rows: [u],
    } = await db.pool.query(
      `insert into sourcebound.messages (conversation_id, run_id, role, content) values ($1, $2, 'user', 'q') returning id`,
      [c, r.id],
    );
    const {
      rows: [a],
    } = await db.pool.query(
      `insert into sourcebound.messages (conversation_id, run_id, role, content, status) values ($1, $2, 'assistant', '', 'streaming') returning id`,
      [c, r.id],
    );
    const editedAt = async (id: string) =>
      (await db.pool.query(`select edited_at from sourcebound.messages where id = $1`, [id])).rows[0].edited_at as Date | null;
    // Streaming, then completing: no edit.
    await db.pool.query(`update sourcebound.messages set content = 'ans' where id = $1`, [a.id]);
    await db.pool.query(`update sourcebound.messages set content = 'answer', status = 'completed' where id = $1`, [a.id]);
    expect(await editedAt(a.id)).toBeNull();
    // The same text written again, or another column: no edit.
    await db.pool.query(`update sourcebound.messages set content = 'q' where id = $1`, [u.id]);
    await db.pool.query(`update sourcebound.messages set status = 'completed' where id = $1`, [u.id]);
    expect(await editedAt(u.id)).toBeNull();
    // Another text in a completed message: an edit, on the user's message and on the assistant's.
    await db.pool.query(`update sourcebound.messages set content = 'q, edited' where id = $1`, [u.id]);
    await db.pool.query(`update sourcebound.messages set content = 'answer, edited' where id = $1`, [a.id]);
    expect(await editedAt(u.id)).toBeInstanceOf(Date);
    expect(await editedAt(a.id)).toBeInstanceOf(Date);
  });
});

describe('eligibility', () => {
  async function singleRun(c: string, runStatus: string, user: string, assistant: string, assistantStatus: string) {
    const {
      rows: [r],
    } = await db.pool.query(`insert into sourcebound.runs (conversation_id, status) values ($1, $2) returning id`, [c, runStatus]);
    await db.pool.query(`insert into sourcebound.messages (conversation_id, run_id, role, content) values ($1, $2, 'user', $3)`, [
      c,
      r.id,
      user,
    ]);
    await db.pool.query(
      `insert into sourcebound.messages (conversation_id, run_id, role, content, status) values ($1, $2, 'assistant', $3, $4)`,
      [c, r.id, assistant, assistantStatus],
    );
    return r.id as string;
  }

  it.each([
    ['completed', 'q', 'a', 'completed', true],
    ['partial', 'q', 'a', 'completed', true],
    ['clarify_pending', 'q', 'a', 'completed', true],
    ['running', 'q', 'a', 'completed', false],
    ['queued', 'q', 'a', 'completed', false],
    ['failed', 'q', 'a', 'completed', false],
    ['cancelled', 'q', 'a', 'completed', false],
    ['completed', 'q', 'a', 'streaming', false],
    ['completed', 'q', 'a', 'failed', false],
    ['completed', '', 'a', 'completed', false],
    ['completed', 'q', '', 'completed', false],
    ['completed', ' \n\t', 'a', 'completed', false],
    // Whitespace is what JavaScript's trim removes, whatever the server's locale.
    ['completed', 'q', '\u00a0\ufeff\u3000\u2028', 'completed', false],
    ['completed', '\u200a\u202f', 'a', 'completed', false],
    ['completed', 'q', '\u200b', 'completed', true],
  ])('run %s, user %j, assistant %j (%s) -> eligible: %s', async (runStatus, user, assistant, assistantStatus, eligible) => {
    const c = await createConversation(db.pool);
    await singleRun(c, runStatus, user, assistant, assistantStatus);
    expect(await pairCount(db.pool, c)).toBe(eligible ? 1 : 0);
    expect(await drift(db.pool, c)).toEqual([]);
  });

  it('a run with only a user message is not a pair', async () => {
    const c = await createConversation(db.pool);
    const {
      rows: [r],
    } = await db.pool.query(`insert into sourcebound.runs (conversation_id, status) values ($1, 'completed') returning id`, [c]);
    await db.pool.query(`insert into sourcebound.messages (conversation_id, run_id, role, content) values ($1, $2, 'user', 'q')`, [
      c,
      r.id,
    ]);
    expect(await pairCount(db.pool, c)).toBe(0);
  });

  it('indexes pairs in run order and shifts them when an older run becomes eligible or stops being eligible', async () => {
    const c = await createConversation(db.pool);
    const written = await addPairs(db.pool, c, 5, undefined, { runStatus: 'running' });
    // Complete them out of order: 3, 0, 4, 1, 2.
    for (const i of [3, 0, 4, 1, 2])
      await db.pool.query(`update sourcebound.runs set status = 'completed' where id = $1`, [written[i]!.runId]);
    const order = async () =>
      (await db.pool.query(`select run_id from sourcebound.pairs where conversation_id = $1 order by pair_index`, [c])).rows.map(
        (r) => r.run_id,
      );
    expect(await order()).toEqual(written.map((w) => w.runId));
    await db.pool.query(`update sourcebound.messages set content = '' where id = $1`, [written[1]!.assistantMessageId]);
    expect(await order()).toEqual([0, 2, 3, 4].map((i) => written[i]!.runId));
    await db.pool.query(`delete from sourcebound.runs where id = $1`, [written[0]!.runId]);
    expect(await order()).toEqual([2, 3, 4].map((i) => written[i]!.runId));
    expect(await drift(db.pool, c)).toEqual([]);
  });

  it('the eligible_pairs view carries both texts byte for byte', async () => {
    const c = await createConversation(db.pool);
    const text = 'naïve 数据 🚀 \u200f\u200b end';
    await addPairs(db.pool, c, 1, () => ({ user: text, assistant: `${text}!` }));
    const { rows } = await db.pool.query('select * from sourcebound.eligible_pairs where conversation_id = $1', [c]);
    expect(rows).toHaveLength(1);
    expect(rows[0].pair_index).toBe(0);
    expect(rows[0].user_text).toBe(text);
    expect(rows[0].assistant_text).toBe(`${text}!`);
  });
});

describe('enqueue triggers', () => {
  it('adds no job below 30 pairs and one at the crossing to 30', async () => {
    const c = await createConversation(db.pool);
    await addPairs(db.pool, c, 29);
    expect(await compactionJobs(db.pool, c)).toBe(0);
    await addPairs(db.pool, c, 1, undefined, { startAt: 29 });
    expect(await compactionJobs(db.pool, c)).toBe(1);
  });

  it('a bulk insert of 50 pairs in one statement ends with exactly one job', async () => {
    const c = await createConversation(db.pool);
    await addPairs(db.pool, c, 50);
    expect(await pairCount(db.pool, c)).toBe(50);
    expect(await compactionJobs(db.pool, c)).toBe(1);
  });

  it('a run status change from running to completed crosses the threshold', async () => {
    const c = await createConversation(db.pool);
    await addPairs(db.pool, c, 29);
    const [last] = await addPairs(db.pool, c, 1, undefined, { runStatus: 'running', startAt: 29 });
    expect(await compactionJobs(db.pool, c)).toBe(0);
    await db.pool.query(`update sourcebound.runs set status = 'completed' where id = $1`, [last!.runId]);
    expect(await compactionJobs(db.pool, c)).toBe(1);
  });

  it('an assistant message going streaming -> completed crosses the threshold; streaming updates add nothing', async () => {
    const c = await createConversation(db.pool);
    await addPairs(db.pool, c, 29);
    const {
      rows: [r],
    } = await db.pool.query(`insert into sourcebound.runs (conversation_id, status) values ($1, 'completed') returning id`, [c]);
    await db.pool.query(`insert into sourcebound.messages (conversation_id, run_id, role, content) values ($1, $2, 'user', 'q29')`, [
      c,
      r.id,
    ]);
    const {
      rows: [a],
    } = await db.pool.query(
      `insert into sourcebound.messages (conversation_id, run_id, role, content, status) values ($1, $2, 'assistant', '', 'streaming') returning id`,
      [c, r.id],
    );
    for (const partial of ['a', 'an', 'ans'])
      await db.pool.query(`update sourcebound.messages set content = $2 where id = $1`, [a.id, partial]);
    expect(await compactionJobs(db.pool, c)).toBe(0);
    await db.pool.query(`update sourcebound.messages set content = 'answer', status = 'completed' where id = $1`, [a.id]);
    expect(await compactionJobs(db.pool, c)).toBe(1);
  });

  it('a rolled-back transaction enqueues nothing', async () => {
    const c = await createConversation(db.pool);
    await addPairs(db.pool, c, 29);
    const client = await db.pool.connect();
    try {
      await client.query('begin');
      await addPairs(client, c, 5, undefined, { startAt: 29 });
      expect(await compactionJobs(client, c)).toBe(1);
      await client.query('rollback');
    } finally {
      client.release();
    }
    expect(await compactionJobs(db.pool, c)).toBe(0);
    expect(await pairCount(db.pool, c)).toBe(29);
  });

  it('two transactions completing pairs 29 and 30 concurrently end with the job enqueued', async () => {
    for (let round = 0; round < 5; round++) {
      const c = await createConversation(db.pool);
      await addPairs(db.pool, c, 28);
      const pending = await addPairs(db.pool, c, 2, undefined, { runStatus: 'running', startAt: 28 });
      const complete = `update sourcebound.runs set status = 'completed' where id = $1`;
      await inTwoTransactions(db.url, [complete, [pending[0]!.runId]], [complete, [pending[1]!.runId]]);
      expect(await pairCount(db.pool, c)).toBe(30);
      expect(await compactionJobs(db.pool, c)).toBe(1);
      expect(await drift(db.pool, c)).toEqual([]);
    }
  });

  it('two transactions each completing half of the 30th pair still make it a pair and enqueue', async () => {
    const c = await createConversation(db.pool);
    await addPairs(db.pool, c, 29);
    const {
      rows: [r],
    } = await db.pool.query(`insert into sourcebound.runs (conversation_id, status) values ($1, 'running') returning id`, [c]);
    await db.pool.query(`insert into sourcebound.messages (conversation_id, run_id, role, content) values ($1, $2, 'user', 'q')`, [
      c,
      r.id,
    ]);
    const {
      rows: [m],
    } = await db.pool.query(
      `insert into sourcebound.messages (conversation_id, run_id, role, content, status) values ($1, $2, 'assistant', 'a', 'streaming') returning id`,
      [c, r.id],
    );
    await inTwoTransactions(
      db.url,
      [`update sourcebound.messages set status = 'completed' where id = $1`, [m.id]],
      [`update sourcebound.runs set status = 'completed' where id = $1`, [r.id]],
    );
    expect(await pairCount(db.pool, c)).toBe(30);
    expect(await compactionJobs(db.pool, c)).toBe(1);
  });

  it('an edit inside a plannable range enqueues; an edit in the raw tail does not', async () => {
    const c = await createConversation(db.pool);
    const written = await addPairs(db.pool, c, 30);
    await db.pool.query('delete from graphile_worker._private_jobs');
    await db.pool.query(`update sourcebound.messages set content = 'edited' where id = $1`, [written[25]!.assistantMessageId]);
    expect(await compactionJobs(db.pool, c)).toBe(0);
    await db.pool.query(`update sourcebound.messages set content = 'edited' where id = $1`, [written[3]!.userMessageId]);
    expect(await compactionJobs(db.pool, c)).toBe(1);
  });

  it('sourcebound.enqueue_compaction enqueues by hand and refuses an unknown conversation', async () => {
    const c = await createConversation(db.pool);
    await db.pool.query('select sourcebound.enqueue_compaction($1)', [c]);
    await db.pool.query('select sourcebound.enqueue_compaction($1)', [c]);
    expect(await compactionJobs(db.pool, c)).toBe(1);
    await expect(db.pool.query('select sourcebound.enqueue_compaction(gen_random_uuid())')).rejects.toThrow(/does not exist/);
  });
});
