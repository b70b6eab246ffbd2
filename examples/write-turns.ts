/**
 * The turn helpers of docs/turns.md, runnable: one exchange written whole,
 * and one streamed. test/turns/example.test.ts checks that docs/turns.md
 * shows this code (layout aside: both are compared as Prettier prints them)
 * and runs it against a real database. In an application, import from
 * 'sourcebound'.
 */
import type pg from 'pg';
import { appendReply, beginTurn, completeTurn, failTurn, finishReply, startReply } from '../src/index.ts';

export async function answer(
  pool: pg.Pool,
  scope: string,
  conversationId: string | undefined,
  question: string,
  callYourModel: (question: string) => Promise<string>,
): Promise<{ conversationId: string; runId: string }> {
  // No conversationId: a new conversation in the scope.
  const turn = await beginTurn({ pool, scope, conversationId, userText: question });
  try {
    const reply = await callYourModel(question);
    await completeTurn({ pool, scope, runId: turn.runId, assistantText: reply }); // status: 'completed' (default), 'partial', 'clarify_pending'
  } catch (error) {
    await failTurn({ pool, scope, runId: turn.runId, status: 'failed' }); // or 'cancelled'
    throw error;
  }
  return turn;
}

export async function answerStreamed(
  pool: pg.Pool,
  scope: string,
  conversationId: string | undefined,
  question: string,
  streamYourModel: (question: string) => AsyncIterable<string>,
): Promise<{ conversationId: string; runId: string }> {
  const turn = await beginTurn({ pool, scope, conversationId, userText: question });
  const { runId } = turn;
  try {
    await startReply({ pool, scope, runId }); // an assistant message in status 'streaming': never part of a pair
    for await (const text of streamYourModel(question)) await appendReply({ pool, scope, runId, text });
    await finishReply({ pool, scope, runId }); // completed: now a pair
  } catch (error) {
    await failTurn({ pool, scope, runId, status: 'failed' }); // the streamed text is kept, as a failed message
    throw error;
  }
  return turn;
}
