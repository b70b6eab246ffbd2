/** Writing turns (src/turns/types.ts has the terminology). */
export { beginTurn, type BeginTurnOptions, type BegunTurn } from './begin.ts';
export { completeTurn, type CompleteTurnOptions } from './complete.ts';
export { startReply, appendReply, finishReply, type ReplyAddress } from './reply.ts';
export { failTurn, type FailTurnOptions } from './fail.ts';
export { TurnInputError, TurnNotFoundError, TurnStateError } from './turn-errors.ts';
export {
  COMPLETED_TURN_STATUSES,
  FAILED_TURN_STATUSES,
  MESSAGE_ROLES,
  MESSAGE_STATUSES,
  RUN_STATUSES,
  type CompletedTurnStatus,
  type FailedTurnStatus,
  type MessageRole,
  type MessageStatus,
  type RunStatus,
  type TurnDatabase,
} from './types.ts';
