import { messagesOfRunListForUpdate, runInScopeGetForUpdate, type TurnMessageRow } from '../db/queries/turns.ts';
import type { Queryable } from '../db/queryable.ts';
import { TurnNotFoundError, TurnStateError } from './turn-errors.ts';
import { OPEN_RUN_STATUSES, type RunStatus } from './types.ts';

/** A run of the scope, locked for the rest of the transaction, with its user message and reply. */
export interface LockedRun {
  runId: string;
  conversationId: string;
  status: RunStatus;
  user: TurnMessageRow | null;
  reply: TurnMessageRow | null;
}

/**
 * Locks the run (and its messages) for the rest of the transaction.
 * @throws TurnNotFoundError when the run is not in `scope`.
 */
export async function lockRun(client: Queryable, operation: string, runId: string, scope: string): Promise<LockedRun> {
  const run = await runInScopeGetForUpdate(client, runId, scope);
  if (run === null) throw new TurnNotFoundError(operation, 'runId', runId, scope);
  const { user, reply } = await messagesOfRunListForUpdate(client, runId);
  return { runId, conversationId: run.conversationId, status: run.status, user, reply };
}

export function isOpen(status: RunStatus): boolean {
  return (OPEN_RUN_STATUSES as readonly RunStatus[]).includes(status);
}

/**
 * The run has the user message a pair needs (completed, with text): a run
 * begun outside beginTurn may lack it, and completing it would silently make
 * no pair.
 * @throws TurnStateError otherwise.
 */
export function assertUserMessage(run: LockedRun, operation: string): void {
  const user = run.user;
  if (user !== null && user.status === 'completed' && user.content.trim() !== '') return;
  const what = user === null ? 'no user message' : user.status !== 'completed' ? `a ${user.status} user message` : 'a blank user message';
  throw new TurnStateError(
    `${operation}: run ${run.runId} has ${what}, so it would never form a pair; begin turns with beginTurn`,
    run.runId,
    run.status,
  );
}

/** @throws TurnStateError saying the run is already settled and which statuses the call needs. */
export function settledError(run: LockedRun, operation: string, doing: string): TurnStateError {
  return new TurnStateError(
    `${operation}: run ${run.runId} is already ${run.status}; only a run that is ${OPEN_RUN_STATUSES.join(' or ')} can ${doing}`,
    run.runId,
    run.status,
  );
}
