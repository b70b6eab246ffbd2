/**
 * sourcebound for an application's request path: write turns, project the
 * history, shape it for a client. `import ... from 'sourcebound/app'` loads
 * none of the worker's machinery (graphile-worker, prom-client, the summarizer
 * SDKs, drizzle's migrator), so an app that only writes and projects starts
 * fast; `sourcebound` (src/index.ts) exports all of this and the rest.
 */
export { SourceboundError } from './support/errors.ts';
export {
  beginTurn,
  completeTurn,
  startReply,
  appendReply,
  finishReply,
  failTurn,
  TurnInputError,
  TurnNotFoundError,
  TurnStateError,
  COMPLETED_TURN_STATUSES,
  FAILED_TURN_STATUSES,
  RUN_STATUSES,
  MESSAGE_STATUSES,
  MESSAGE_ROLES,
} from './turns/index.ts';
export type {
  BeginTurnOptions,
  BegunTurn,
  CompleteTurnOptions,
  FailTurnOptions,
  ReplyAddress,
  CompletedTurnStatus,
  FailedTurnStatus,
  RunStatus,
  MessageStatus,
  MessageRole,
  TurnDatabase,
} from './turns/index.ts';
export {
  projectConversationHistory,
  toAnthropicMessages,
  toOpenAIMessages,
  toModelMessages,
  historyBytes,
  BYTES_PER_TOKEN,
  ConversationNotFoundError,
} from './projection/index.ts';
export type {
  ConversationProjection,
  ProjectionItem,
  PairItem,
  SummaryItem,
  OmittedSpan,
  SummaryNotUsed,
  ProjectionFormat,
  RequestReserve,
  ModelMessagesOptions,
  ModelHistoryMessage,
  ModelTextPart,
  ProjectArgs,
} from './projection/index.ts';
