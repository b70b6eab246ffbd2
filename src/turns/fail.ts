import { messageStatusUpdate, runStatusUpdate } from '../db/queries/turns.ts';
import { turnErrorFrom } from './turn-errors.ts';
import { requireDatabase, requireOneOf, requireOptions, requireScope, requireUuid } from './input.ts';
import { isOpen, lockRun, settledError } from './run.ts';
import { inTurnTransaction } from './turn-transaction.ts';
import { FAILED_TURN_STATUSES, type FailedTurnStatus, type TurnDatabase } from './types.ts';

export interface FailTurnOptions {
  /** A pg Pool (the call is its own transaction), or a client (inside its transaction when it is in one). */
  pool: TurnDatabase;
  scope: string;
  runId: string;
  /** `failed` (an error ended it) or `cancelled` (someone stopped it). */
  status: FailedTurnStatus;
}

const OPTIONS = ['pool', 'scope', 'runId', 'status'] as const;

/**
 * Ends a begun turn without a pair, in one transaction: the run is settled
 * in `status`, and a streaming reply becomes `failed` (its text is kept, and
 * never enters a projection). Calling it again with the same status is a
 * no-op, so a failure path may run twice.
 * @throws TurnInputError naming the option, when scope, runId or status cannot be taken.
 * @throws TurnNotFoundError when the run is not in `scope`.
 * @throws TurnStateError when the run is already settled in another status (completed, or the other failure status).
 */
export async function failTurn(options: FailTurnOptions): Promise<void> {
  const operation = 'failTurn';
  const given = requireOptions(operation, options, OPTIONS);
  const db = requireDatabase(operation, given.pool);
  const scope = requireScope(operation, given.scope);
  const runId = requireUuid(operation, 'runId', given.runId);
  const status = requireOneOf(operation, 'status', given.status, FAILED_TURN_STATUSES);
  try {
    await inTurnTransaction(db, operation, async (client) => {
      const run = await lockRun(client, operation, runId, scope);
      if (!isOpen(run.status)) {
        if (run.status === status) return;
        throw settledError(run, operation, `be ${status}`);
      }
      if (run.reply?.status === 'streaming') await messageStatusUpdate(client, run.reply.id, 'failed');
      await runStatusUpdate(client, runId, status);
    });
  } catch (error) {
    throw turnErrorFrom(error, { operation, scope, runId, runStatus: status, messageStatus: 'failed' });
  }
}
