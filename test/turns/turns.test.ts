import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { projectConversationHistory } from '../../src/projection/index.ts';
import {
  appendReply,
  beginTurn,
  completeTurn,
  failTurn,
  finishReply,
  startReply,
  TurnNotFoundError,
  TurnStateError,
} from '../../src/turns/index.ts';
import { createTestDatabase } from '../support/db.ts';
import { compactionJobs, drift, pairCount } from '../support/fixtures.ts';

/**
 * The turn helpers write what an application used to write in raw SQL: each
 * call one transaction, and a completed turn is a pair the pair index, the
 * enqueue trigger and the projection all see.
 */
const db = await createTestDatabase();
const { pool } = db;
const scope = 'tenant-a';

async function rowsOf(conversationId: string) {
  const runs = (await pool.query('select id, status from sourcebound.runs where conversation_id = $1 order by seq', [conversationId])).rows;
  const messages = (
    await pool.query(
      'select run_id as "runId", role, status, content from sourcebound.messages where conversation_id = $1 order by created_at, role desc',
      [conversationId],
    )
  ).rows;
  return { runs, messages };
}

describe('a turn written whole', () => {
  it('beginTurn creates the conversation, a running run and the user message; completeTurn makes it a pair', async () => {
    const begun = await beginTurn({ pool, scope, userText: 'What is the capital of France?' });
    expect(await rowsOf(begun.conversationId)).toEqual({
      runs: [{ id: begun.runId, status: 'running' }],
      messages: [{ runId: begun.runId, role: 'user', status: 'completed', content: 'What is the capital of France?' }],
    });
    expect(await pairCount(pool, begun.conversationId)).toBe(0);

    const { assistantMessageId } = await completeTurn({ pool, scope, runId: begun.runId, assistantText: 'Paris.' });
    const {
      rows: [pair],
    } = await pool.query('select * from sourcebound.pairs where run_id = $1', [begun.runId]);
    expect(pair).toMatchObject({ pair_index: 0, user_message_id: begun.userMessageId, assistant_message_id: assistantMessageId });
  });

  it('a second turn in the same conversation is the next pair; partial and clarify_pending are pairs too', async () => {
    const first = await beginTurn({ pool, scope, userText: 'one' });
    await completeTurn({ pool, scope, runId: first.runId, assistantText: 'reply one', status: 'partial' });
    const second = await beginTurn({ pool, scope, conversationId: first.conversationId, userText: 'two' });
    expect(second.conversationId).toBe(first.conversationId);
    await completeTurn({ pool, scope, runId: second.runId, assistantText: 'which one?', status: 'clarify_pending' });
    expect((await rowsOf(first.conversationId)).runs.map((r) => r.status)).toEqual(['partial', 'clarify_pending']);
    expect(await pairCount(pool, first.conversationId)).toBe(2);
  });

  it('a retried completeTurn (same text and status, after it committed) returns the same reply; a different one is refused', async () => {
    const t = await beginTurn({ pool, scope, userText: 'q' });
    const once = await completeTurn({ pool, scope, runId: t.runId, assistantText: 'a' });
    expect(await completeTurn({ pool, scope, runId: t.runId, assistantText: 'a' })).toEqual(once);
    const other = await completeTurn({ pool, scope, runId: t.runId, assistantText: 'b' }).catch((e: unknown) => e);
    expect(other).toBeInstanceOf(TurnStateError);
    expect(String(other)).toContain(`run ${t.runId} is already completed; only a run that is queued or running can be completed`);
    expect(await pairCount(pool, t.conversationId)).toBe(1);
  });

  it('ids are accepted in any case and braces, as PostgreSQL accepts them', async () => {
    const t = await beginTurn({ pool, scope, userText: 'q' });
    const next = await beginTurn({ pool, scope, conversationId: `{${t.conversationId.toUpperCase()}}`, userText: 'q2' });
    expect(next.conversationId).toBe(t.conversationId);
    await completeTurn({ pool, scope, runId: t.runId.toUpperCase(), assistantText: 'a' });
    expect(await pairCount(pool, t.conversationId)).toBe(1);
  });

  it('stores a NUL as U+FFFD instead of failing the turn (PostgreSQL text cannot hold it)', async () => {
    const t = await beginTurn({ pool, scope, userText: 'a\u0000b' });
    await completeTurn({ pool, scope, runId: t.runId, assistantText: 'c\u0000d' });
    expect((await rowsOf(t.conversationId)).messages.map((m) => m.content)).toEqual(['a\uFFFDb', 'c\uFFFDd']);
  });
});

describe('a streamed reply', () => {
  it('startReply, appendReply..., finishReply: never a pair while streaming, one pair at the end', async () => {
    const t = await beginTurn({ pool, scope, userText: 'Tell me a story.' });
    const { assistantMessageId } = await startReply({ pool, scope, runId: t.runId });
    for (const chunk of ['Once ', 'upon ', '', 'a time.']) {
      expect(await appendReply({ pool, scope, runId: t.runId, text: chunk })).toEqual({ assistantMessageId });
      expect(await pairCount(pool, t.conversationId)).toBe(0);
    }
    const reply = (await rowsOf(t.conversationId)).messages[1];
    expect(reply).toMatchObject({ role: 'assistant', status: 'streaming', content: 'Once upon a time.' });
    expect(await finishReply({ pool, scope, runId: t.runId })).toEqual({ assistantMessageId });
    expect(await finishReply({ pool, scope, runId: t.runId })).toEqual({ assistantMessageId });
    expect(await pairCount(pool, t.conversationId)).toBe(1);
    const late = await appendReply({ pool, scope, runId: t.runId, text: 'more' }).catch((e: unknown) => e);
    expect(late).toBeInstanceOf(TurnStateError);
    expect(String(late)).toContain(`run ${t.runId} (completed) has no streaming reply; start one with startReply`);
  });

  it('finishReply refuses a reply with no text yet (it would never be a pair); failTurn then ends the turn', async () => {
    const t = await beginTurn({ pool, scope, userText: 'q' });
    await startReply({ pool, scope, runId: t.runId });
    await appendReply({ pool, scope, runId: t.runId, text: '  \n' });
    await expect(finishReply({ pool, scope, runId: t.runId })).rejects.toThrow(
      `finishReply: the reply of run ${t.runId} holds no text yet, and a blank reply never forms a pair; appendReply text first, or end the turn with failTurn`,
    );
    await failTurn({ pool, scope, runId: t.runId, status: 'failed' });
    expect(await rowsOf(t.conversationId)).toMatchObject({
      runs: [{ status: 'failed' }],
      messages: [
        { role: 'user', status: 'completed' },
        { role: 'assistant', status: 'failed', content: '  \n' },
      ],
    });
  });

  it('completeTurn on a streaming reply points at finishReply', async () => {
    const t = await beginTurn({ pool, scope, userText: 'q' });
    await startReply({ pool, scope, runId: t.runId });
    await expect(completeTurn({ pool, scope, runId: t.runId, assistantText: 'a' })).rejects.toThrow(
      `completeTurn: run ${t.runId} has a streaming reply (startReply); finish it with finishReply, or end it with failTurn`,
    );
    await expect(startReply({ pool, scope, runId: t.runId })).rejects.toThrow(`startReply: run ${t.runId} already has a streaming reply`);
  });
});

describe('a failed turn', () => {
  it('failTurn keeps the streamed text as a failed reply, is a no-op when repeated, and the turn never counts', async () => {
    const t = await beginTurn({ pool, scope, userText: 'q' });
    await startReply({ pool, scope, runId: t.runId });
    await appendReply({ pool, scope, runId: t.runId, text: 'half a rep' });
    await failTurn({ pool, scope, runId: t.runId, status: 'cancelled' });
    await failTurn({ pool, scope, runId: t.runId, status: 'cancelled' });
    expect(await rowsOf(t.conversationId)).toMatchObject({
      runs: [{ status: 'cancelled' }],
      messages: [{ role: 'user' }, { role: 'assistant', status: 'failed', content: 'half a rep' }],
    });
    await expect(failTurn({ pool, scope, runId: t.runId, status: 'failed' })).rejects.toThrow(
      `failTurn: run ${t.runId} is already cancelled; only a run that is queued or running can be failed`,
    );
    await expect(finishReply({ pool, scope, runId: t.runId })).rejects.toThrow(TurnStateError);
    expect(await pairCount(pool, t.conversationId)).toBe(0);
  });

  it('a completed turn cannot be failed afterwards', async () => {
    const t = await beginTurn({ pool, scope, userText: 'q' });
    await completeTurn({ pool, scope, runId: t.runId, assistantText: 'a' });
    const error = await failTurn({ pool, scope, runId: t.runId, status: 'failed' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TurnStateError);
    expect(error).toMatchObject({ runId: t.runId, status: 'completed' });
    expect(await pairCount(pool, t.conversationId)).toBe(1);
  });
});

describe('scopes', () => {
  it('a conversation or run of another scope is not found, in the same words as one that does not exist', async () => {
    const t = await beginTurn({ pool, scope: 'tenant-b', userText: 'secret' });
    const missingConversation = '00000000-0000-4000-8000-000000000000';
    const asOther = await beginTurn({ pool, scope, conversationId: t.conversationId, userText: 'q' }).catch((e: unknown) => e);
    const asMissing = await beginTurn({ pool, scope, conversationId: missingConversation, userText: 'q' }).catch((e: unknown) => e);
    expect(asOther).toBeInstanceOf(TurnNotFoundError);
    expect(String(asOther)).toBe(`TurnNotFoundError: beginTurn: conversation ${t.conversationId} not found in scope 'tenant-a'`);
    expect(String(asMissing).replace(missingConversation, t.conversationId)).toBe(String(asOther));
    for (const call of [
      () => completeTurn({ pool, scope, runId: t.runId, assistantText: 'a' }),
      () => startReply({ pool, scope, runId: t.runId }),
      () => appendReply({ pool, scope, runId: t.runId, text: 'a' }),
      () => finishReply({ pool, scope, runId: t.runId }),
      () => failTurn({ pool, scope, runId: t.runId, status: 'failed' }),
    ]) {
      const error = await call().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(TurnNotFoundError);
      expect(error).toMatchObject({ field: 'runId', id: t.runId, scope });
      expect(String(error)).toMatch(new RegExp(`: run ${t.runId} not found in scope 'tenant-a'$`));
    }
    expect(await rowsOf(t.conversationId)).toMatchObject({ runs: [{ status: 'running' }], messages: [{ role: 'user' }] });
  });
});

describe('a pool or a client', () => {
  it("on a client inside the caller's transaction, the turn commits or rolls back with it", async () => {
    const client = await pool.connect();
    try {
      await client.query('begin');
      const t = await beginTurn({ pool: client, scope, userText: 'q' });
      await completeTurn({ pool: client, scope, runId: t.runId, assistantText: 'a' });
      await client.query('rollback');
      expect(await rowsOf(t.conversationId)).toEqual({ runs: [], messages: [] });

      await client.query('begin');
      const kept = await beginTurn({ pool: client, scope, userText: 'q' });
      // A refused call rolls back to its savepoint: the caller's transaction goes on.
      await expect(completeTurn({ pool: client, scope, runId: kept.runId, assistantText: ' ' })).rejects.toThrow('assistantText');
      await expect(failTurn({ pool: client, scope, runId: '00000000-0000-4000-8000-000000000000', status: 'failed' })).rejects.toThrow(
        TurnNotFoundError,
      );
      await completeTurn({ pool: client, scope, runId: kept.runId, assistantText: 'a' });
      await client.query('commit');
      expect(await pairCount(pool, kept.conversationId)).toBe(1);
    } finally {
      client.release();
    }
  });

  it('on an idle client (pg.Client), each call is its own transaction; a client whose transaction failed is refused', async () => {
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    try {
      const t = await beginTurn({ pool: client, scope, userText: 'q' });
      expect(client.getTransactionStatus()).toBe('I');
      await completeTurn({ pool: client, scope, runId: t.runId, assistantText: 'a' });
      expect(await pairCount(pool, t.conversationId)).toBe(1);
      await client.query('begin');
      await client.query('select 1/0').catch(() => {});
      await expect(beginTurn({ pool: client, scope, userText: 'q' })).rejects.toThrow(
        "beginTurn: the client's transaction has already failed; roll it back before writing a turn",
      );
      await client.query('rollback');
    } finally {
      await client.end();
    }
  });

  it('writes under READ COMMITTED even when the server defaults to REPEATABLE READ (the pair triggers refuse a snapshot)', async () => {
    const rr = new pg.Pool({ connectionString: db.url, options: '-c default_transaction_isolation=repeatable\\ read', max: 1 });
    try {
      expect((await rr.query('show transaction_isolation')).rows[0].transaction_isolation).toBe('repeatable read');
      const t = await beginTurn({ pool: rr, scope, userText: 'q' });
      await completeTurn({ pool: rr, scope, runId: t.runId, assistantText: 'a' });
      expect(await pairCount(pool, t.conversationId)).toBe(1);
    } finally {
      await rr.end();
    }
  });
});

describe('a long conversation written with the helpers', () => {
  it('45 turns (with failed ones between) cross the compaction threshold, enqueue once, and the projection sees every pair', async () => {
    const { conversationId } = await beginTurn({ pool, scope, userText: 'turn 0' }).then(async (t) => {
      await completeTurn({ pool, scope, runId: t.runId, assistantText: 'reply 0' });
      return t;
    });
    const jobsAfter: number[] = [];
    for (let i = 1; i < 45; i++) {
      const t = await beginTurn({ pool, scope, conversationId, userText: `turn ${i}` });
      if (i % 3 === 0) {
        await startReply({ pool, scope, runId: t.runId });
        await appendReply({ pool, scope, runId: t.runId, text: 'reply ' });
        await appendReply({ pool, scope, runId: t.runId, text: String(i) });
        await finishReply({ pool, scope, runId: t.runId, status: i % 2 === 0 ? 'completed' : 'partial' });
      } else {
        await completeTurn({ pool, scope, runId: t.runId, assistantText: `reply ${i}` });
      }
      if (i % 7 === 0) {
        // A turn that failed in between: never a pair, and it shifts nothing.
        const failed = await beginTurn({ pool, scope, conversationId, userText: `failed after ${i}` });
        await failTurn({ pool, scope, runId: failed.runId, status: 'failed' });
      }
      jobsAfter[i + 1] = await compactionJobs(pool, conversationId);
    }
    // No job below 30 pairs; the crossing at 30 enqueues the conversation once (one job key).
    expect(jobsAfter.slice(2, 30).every((n) => n === 0)).toBe(true);
    expect(jobsAfter.slice(30)).toEqual(Array(16).fill(1));
    const { rows: marks } = await pool.query('select from_pair from sourcebound.compaction_marks where conversation_id = $1 order by 1', [
      conversationId,
    ]);
    expect(marks.map((m) => m.from_pair)).toEqual([0, 10]);
    expect(await pairCount(pool, conversationId)).toBe(45);
    expect(await drift(pool, conversationId)).toEqual([]);

    const history = await projectConversationHistory({ pool, conversationId, scope, budgetBytes: 1024 * 1024 });
    expect(history.pairCount).toBe(45);
    expect(history.omitted).toEqual([]);
    expect(history.items.map((item) => (item.kind === 'pair' ? [item.pairIndex, item.userText, item.assistantText] : item.kind))).toEqual(
      Array.from({ length: 45 }, (_, i) => [i, `turn ${i}`, `reply ${i}`]),
    );
  });
});
