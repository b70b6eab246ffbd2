import { messageInsert, runStatusUpdate } from '../db/queries/turns.ts';
import { TurnStateError, turnErrorFrom } from './turn-errors.ts';
import { requireDatabase, requireOneOf, requireOptions, requireScope, requireText, requireUuid } from './input.ts';
import { assertUserMessage, isOpen, lockRun, settledError } from './run.ts';
import { inTurnTransaction } from './turn-transaction.ts';
import { COMPLETED_TURN_STATUSES, type CompletedTurnStatus, type TurnDatabase } from './types.ts';

export interface CompleteTurnOptions {
  /** A pg Pool (the call is its own transaction), or a client (inside its transaction when it is in one). */
  pool: TurnDatabase;
  scope: string;
  /** The run beginTurn returned. */
  runId: string;
  /** The assistant's whole reply (a NUL or a lone surrogate is stored as U+FFFD). */
  assistantText: string;
  /** How the run ended; each of these makes the turn a pair. (Default: 'completed') */
  status?: CompletedTurnStatus;
}

const OPTIONS = ['pool', 'scope', 'runId', 'assistantText', 'status'] as const;

/**
 * Completes a begun turn in one transaction: writes the whole reply (status
 * `completed`) and settles the run in `status`, which makes the turn a pair
 * (and may enqueue compaction). Calling it again with the same text and
 * status after it committed (a retry after a lost connection) returns the
 * same reply.
 * @throws TurnInputError naming the option, when scope, runId, assistantText (a blank one included) or status cannot be taken.
 * @throws TurnNotFoundError when the run is not in `scope`.
 * @throws TurnStateError when the run is already settled, has a reply (a streaming one is finished with finishReply), or has no user message.
 */
export async function completeTurn(options: CompleteTurnOptions): Promise<{ assistantMessageId: string }> {
  const operation = 'completeTurn';
  const given = requireOptions(operation, options, OPTIONS);
  const db = requireDatabase(operation, given.pool);
  const scope = requireScope(operation, given.scope);
  const runId = requireUuid(operation, 'runId', given.runId);
  const text = requireText(operation, 'assistantText', given.assistantText);
  const status = requireOneOf(operation, 'status', given.status, COMPLETED_TURN_STATUSES, 'completed');
  try {
    return await inTurnTransaction(db, operation, async (client) => {
      const run = await lockRun(client, operation, runId, scope);
      if (!isOpen(run.status)) {
        const reply = run.reply;
        if (run.status === status && reply?.status === 'completed' && reply.content === text) return { assistantMessageId: reply.id };
        throw settledError(run, operation, 'be completed');
      }
      if (run.reply !== null) {
        throw new TurnStateError(
          run.reply.status === 'streaming'
            ? `${operation}: run ${runId} has a streaming reply (startReply); finish it with finishReply, or end it with failTurn`
            : `${operation}: run ${runId} already has a ${run.reply.status} reply`,
          runId,
          run.status,
        );
      }
      assertUserMessage(run, operation);
      const assistantMessageId = await messageInsert(client, {
        conversationId: run.conversationId,
        runId,
        role: 'assistant',
        content: text,
        status: 'completed',
      });
      await runStatusUpdate(client, runId, status);
      return { assistantMessageId };
    });
  } catch (error) {
    throw turnErrorFrom(error, {
      operation,
      scope,
      runId,
      role: 'assistant',
      runStatus: status,
      messageStatus: 'completed',
      text: { field: 'assistantText', value: text },
    });
  }
}
