import { conversationInScopeExists, conversationInsert, messageInsert, runInsert } from '../db/queries/turns.ts';
import { TurnNotFoundError, turnErrorFrom } from './turn-errors.ts';
import { requireDatabase, requireOptions, requireScope, requireText, requireUuid } from './input.ts';
import { inTurnTransaction } from './turn-transaction.ts';
import type { TurnDatabase } from './types.ts';

export interface BeginTurnOptions {
  /** A pg Pool (the turn is its own transaction), or a client (inside its transaction when it is in one). */
  pool: TurnDatabase;
  /** The tenant namespace of the conversation. */
  scope: string;
  /** The conversation to add the turn to; absent: a new conversation is created in `scope`. */
  conversationId?: string;
  /** The user's message, verbatim (a NUL or a lone surrogate is stored as U+FFFD). */
  userText: string;
}

export interface BegunTurn {
  conversationId: string;
  runId: string;
  userMessageId: string;
}

const OPTIONS = ['pool', 'scope', 'conversationId', 'userText'] as const;

/**
 * Begins a turn in one transaction: the conversation (created when
 * `conversationId` is absent), a run in status `running`, and the user's
 * message. The turn counts as a pair only once completeTurn (or finishReply)
 * settles it; until then it is left out of every projection.
 * @throws TurnInputError naming the option, when scope, conversationId or userText cannot be taken (a blank userText included).
 * @throws TurnNotFoundError when the conversation is not in `scope` (whether or not it exists elsewhere).
 */
export async function beginTurn(options: BeginTurnOptions): Promise<BegunTurn> {
  const operation = 'beginTurn';
  const given = requireOptions(operation, options, OPTIONS);
  const db = requireDatabase(operation, given.pool);
  const scope = requireScope(operation, given.scope);
  const conversationId = given.conversationId === undefined ? undefined : requireUuid(operation, 'conversationId', given.conversationId);
  const userText = requireText(operation, 'userText', given.userText);
  const write = {
    operation,
    scope,
    conversationId,
    role: 'user' as const,
    runStatus: 'running',
    messageStatus: 'completed',
    text: { field: 'userText', value: userText },
  };
  try {
    return await inTurnTransaction(db, operation, async (client) => {
      let conversation = conversationId;
      if (conversation === undefined) {
        conversation = await conversationInsert(client, scope);
      } else if (!(await conversationInScopeExists(client, conversation, scope))) {
        throw new TurnNotFoundError(operation, 'conversationId', conversation, scope);
      }
      const runId = await runInsert(client, conversation, 'running');
      const userMessageId = await messageInsert(client, {
        conversationId: conversation,
        runId,
        role: 'user',
        content: userText,
        status: 'completed',
      });
      return { conversationId: conversation, runId, userMessageId };
    });
  } catch (error) {
    throw turnErrorFrom(error, write);
  }
}
