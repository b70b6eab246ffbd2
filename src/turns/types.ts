/**
 * Writing turns: what an application calls to put a conversation into the
 * tables sourcebound reads, without writing the SQL itself.
 *
 * Terminology
 * - Turn: one Run of a Conversation with its user message and its assistant
 *   reply, written through its states: begun (run `running`, user message
 *   written), then completed (the reply written and the run settled in an
 *   eligible status, which makes it a Pair) or failed (the run settled
 *   `failed` or `cancelled`, never a Pair).
 * - Reply: the assistant message of a Turn. Written whole (completeTurn) or
 *   streamed (startReply, appendReply..., finishReply); while streaming its
 *   status is `streaming` and it is not part of any Pair.
 * - Open run: a run in status `queued` or `running`: the only kind a reply
 *   can be added to, completed or failed.
 * - Scope: the tenant namespace; a conversation or run of another scope is
 *   "not found", exactly as one that does not exist.
 */
import type pg from 'pg';
import { MESSAGE_ROLES, MESSAGE_STATUSES, RUN_STATUSES } from '../db/schema/conversations.ts';

import type { MessageRole, MessageStatus, RunStatus } from '../db/queries/turns.ts';
export type { MessageRole, MessageStatus, RunStatus };

/** The statuses a turn completes with: the run's Pair is eligible in each. */
export const COMPLETED_TURN_STATUSES = ['completed', 'partial', 'clarify_pending'] as const satisfies readonly RunStatus[];
export type CompletedTurnStatus = (typeof COMPLETED_TURN_STATUSES)[number];

/** The statuses a turn fails with: the run never forms a Pair. */
export const FAILED_TURN_STATUSES = ['failed', 'cancelled'] as const satisfies readonly RunStatus[];
export type FailedTurnStatus = (typeof FAILED_TURN_STATUSES)[number];

/** Statuses of a run that is not settled yet. */
export const OPEN_RUN_STATUSES = ['queued', 'running'] as const satisfies readonly RunStatus[];

/**
 * Where a turn is written: a pool (each call is its own READ COMMITTED
 * transaction) or a connected client (its own transaction when the client is
 * idle; inside the caller's transaction, under a savepoint, when it is in one,
 * so a refused call leaves that transaction usable).
 */
export type TurnDatabase = pg.Pool | pg.PoolClient | pg.Client;

export { MESSAGE_ROLES, MESSAGE_STATUSES, RUN_STATUSES };
