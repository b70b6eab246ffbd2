import { describe, expect, it } from 'vitest';
import { projectConversationHistory } from '../../src/projection/index.ts';
import { appendReply, beginTurn, completeTurn, startReply } from '../../src/turns/index.ts';
import { createTestDatabase } from '../support/db.ts';

/**
 * What makes history silently disappear is reported in `problems`: an
 * exchange that no pair can take is in no request, and before this the
 * projection said nothing (pairCount 0, problems []).
 */
const db = await createTestDatabase();
const { pool } = db;
const scope = 'tenant-a';
const project = (conversationId: string) => projectConversationHistory({ pool, scope, conversationId, budgetBytes: 64 * 1024 });

describe('problems: exchanges no pair can take', () => {
  it('a healthy conversation, with the current turn in flight, reports none', async () => {
    const t = await beginTurn({ pool, scope, userText: 'first' });
    await completeTurn({ pool, scope, runId: t.runId, assistantText: 'answer' });
    await beginTurn({ pool, scope, conversationId: t.conversationId, userText: 'second, being answered now' });
    expect((await project(t.conversationId)).problems).toEqual([]);
  });

  it('a message written without a run, a reply left streaming, a run left running for ten minutes: each named, with its count', async () => {
    const t = await beginTurn({ pool, scope, userText: 'first' });
    const c = t.conversationId;
    await completeTurn({ pool, scope, runId: t.runId, assistantText: 'answer' });
    await pool.query(
      `insert into sourcebound.messages (conversation_id, role, content) values ($1, 'user', 'raw SQL, no run'), ($1, 'assistant', 'no run either')`,
      [c],
    );
    const streamed = await beginTurn({ pool, scope, conversationId: c, userText: 'streamed' });
    await startReply({ pool, scope, runId: streamed.runId });
    await appendReply({ pool, scope, runId: streamed.runId, text: 'partial...' });
    const stuck = await beginTurn({ pool, scope, conversationId: c, userText: 'the app crashed here' });
    await pool.query(`update sourcebound.runs set created_at = now() - interval '11 minutes' where id = $1`, [stuck.runId]);

    const { problems, items } = await project(c);
    expect(items.filter((i) => i.kind === 'pair')).toHaveLength(1);
    expect(problems.map((p) => [p.kind, p.count, p.atPair])).toEqual([
      ['messages_without_run', 2, null],
      ['replies_streaming', 1, null],
      ['runs_not_settled', 1, null],
    ]);
    expect(problems[0]!.message).toBe(
      '2 messages have no run, so no pair and no request carries them: write turns with beginTurn/completeTurn',
    );
    // The streamed run is running too, but began just now: not reported as unsettled.
  });

  it('reads no more than before: still one statement for a kept layout', async () => {
    const t = await beginTurn({ pool, scope, userText: 'q' });
    await completeTurn({ pool, scope, runId: t.runId, assistantText: 'a' });
    await project(t.conversationId);
    const statements: string[] = [];
    await projectConversationHistory({
      pool,
      scope,
      conversationId: t.conversationId,
      budgetBytes: 64 * 1024,
      onRead: (e) => statements.push(e.statement ?? e.query),
    });
    expect(new Set(statements)).toEqual(new Set(['projectionRead']));
  });
});
