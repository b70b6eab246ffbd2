import { messageInsert, messageStatusUpdate, replyAppend, runInScopeStatusGet, runStatusUpdate } from '../db/queries/turns.ts';
import { TurnNotFoundError, TurnStateError, turnErrorFrom } from './turn-errors.ts';
import { requireChunk, requireDatabase, requireOneOf, requireOptions, requireScope, requireUuid } from './input.ts';
import { assertUserMessage, isOpen, lockRun, settledError } from './run.ts';
import { inTurnTransaction } from './turn-transaction.ts';
import { COMPLETED_TURN_STATUSES, type CompletedTurnStatus, type TurnDatabase } from './types.ts';

/**
 * A streamed reply: startReply writes an empty assistant message in status
 * `streaming`, appendReply adds text to its end (as often as the app wants
 * what it has shown kept: every chunk, or every second), finishReply
 * completes it and settles the run, which makes the turn a pair. failTurn
 * ends it instead. A streaming reply is never part of a pair, so the
 * projection never shows half a reply.
 */

export interface ReplyAddress {
  /** A pg Pool (the call is its own transaction), or a client (inside its transaction when it is in one). */
  pool: TurnDatabase;
  scope: string;
  /** The run beginTurn returned. */
  runId: string;
}

function address(operation: string, options: unknown, extra: readonly string[] = []) {
  const given = requireOptions(operation, options, ['pool', 'scope', 'runId', ...extra]);
  return {
    given,
    db: requireDatabase(operation, given.pool),
    scope: requireScope(operation, given.scope),
    runId: requireUuid(operation, 'runId', given.runId),
  };
}

/**
 * Starts the reply of a begun turn: an empty assistant message in status `streaming`.
 * @throws TurnInputError naming the option, when scope or runId cannot be taken.
 * @throws TurnNotFoundError when the run is not in `scope`.
 * @throws TurnStateError when the run is settled or already has a reply.
 */
export async function startReply(options: ReplyAddress): Promise<{ assistantMessageId: string }> {
  const operation = 'startReply';
  const { db, scope, runId } = address(operation, options);
  try {
    return await inTurnTransaction(db, operation, async (client) => {
      const run = await lockRun(client, operation, runId, scope);
      if (!isOpen(run.status)) throw settledError(run, operation, 'start a reply');
      if (run.reply !== null)
        throw new TurnStateError(`${operation}: run ${runId} already has a ${run.reply.status} reply`, runId, run.status);
      const assistantMessageId = await messageInsert(client, {
        conversationId: run.conversationId,
        runId,
        role: 'assistant',
        content: '',
        status: 'streaming',
      });
      return { assistantMessageId };
    });
  } catch (error) {
    throw turnErrorFrom(error, { operation, scope, runId, role: 'assistant', messageStatus: 'streaming' });
  }
}

/**
 * Adds `text` to the end of the streaming reply (stored as beginTurn stores text).
 * @throws TurnInputError naming the option, when scope, runId or text cannot be taken.
 * @throws TurnNotFoundError when the run is not in `scope`.
 * @throws TurnStateError when the run has no streaming reply (not started, finished, or failed).
 */
export async function appendReply(options: ReplyAddress & { text: string }): Promise<{ assistantMessageId: string }> {
  const operation = 'appendReply';
  const { given, db, scope, runId } = address(operation, options, ['text']);
  const text = requireChunk(operation, 'text', given.text);
  try {
    return await inTurnTransaction(db, operation, async (client) => {
      const assistantMessageId = await replyAppend(client, runId, scope, text);
      if (assistantMessageId !== null) return { assistantMessageId };
      const status = await runInScopeStatusGet(client, runId, scope);
      if (status === null) throw new TurnNotFoundError(operation, 'runId', runId, scope);
      throw new TurnStateError(`${operation}: run ${runId} (${status}) has no streaming reply; start one with startReply`, runId, status);
    });
  } catch (error) {
    throw turnErrorFrom(error, { operation, scope, runId, text: { field: 'text', value: text } });
  }
}

/**
 * Completes the streaming reply with the text appended so far and settles
 * the run in `status`, which makes the turn a pair. Calling it again with the
 * same status after it committed returns the same reply.
 * @throws TurnInputError naming the option, when scope, runId or status cannot be taken.
 * @throws TurnNotFoundError when the run is not in `scope`.
 * @throws TurnStateError when the run is settled, has no streaming reply, or its reply holds no text yet (append some, or failTurn).
 */
export async function finishReply(options: ReplyAddress & { status?: CompletedTurnStatus }): Promise<{ assistantMessageId: string }> {
  const operation = 'finishReply';
  const { given, db, scope, runId } = address(operation, options, ['status']);
  const status = requireOneOf(operation, 'status', given.status, COMPLETED_TURN_STATUSES, 'completed');
  try {
    return await inTurnTransaction(db, operation, async (client) => {
      const run = await lockRun(client, operation, runId, scope);
      const reply = run.reply;
      if (!isOpen(run.status)) {
        if (run.status === status && reply?.status === 'completed') return { assistantMessageId: reply.id };
        throw settledError(run, operation, 'finish a reply');
      }
      if (reply === null || reply.status !== 'streaming') {
        throw new TurnStateError(
          `${operation}: run ${runId} has ${reply === null ? 'no reply' : `a ${reply.status} reply`} to finish; start one with startReply, or write the whole reply with completeTurn`,
          runId,
          run.status,
        );
      }
      if (reply.content.trim() === '') {
        throw new TurnStateError(
          `${operation}: the reply of run ${runId} holds no text yet, and a blank reply never forms a pair; appendReply text first, or end the turn with failTurn`,
          runId,
          run.status,
        );
      }
      assertUserMessage(run, operation);
      await messageStatusUpdate(client, reply.id, 'completed');
      await runStatusUpdate(client, runId, status);
      return { assistantMessageId: reply.id };
    });
  } catch (error) {
    throw turnErrorFrom(error, { operation, scope, runId, role: 'assistant', runStatus: status, messageStatus: 'completed' });
  }
}
