/** The read projection: a conversation's history for the next model request, within a byte budget. */
export { projectConversationHistory, MAX_PAGE_PAIRS, type ProjectArgs } from './project.ts';
export {
  toAnthropicMessages,
  messagesBytes,
  itemBytes,
  noteBytes,
  projectedBytes,
  BREAKPOINT_BYTES,
  type AdapterOptions,
  type MessageParam,
} from './to-anthropic.ts';
export { toOpenAIMessages } from './to-openai.ts';
export { toModelMessages, type ModelHistoryMessage, type ModelMessagesOptions, type ModelTextPart } from './to-ai-sdk.ts';
export { FORMATS, historyBytes, type Format, type ProjectionFormat } from './format.ts';
export { BYTES_PER_TOKEN, resolveBudget, type RequestReserve, type ResolvedBudget } from './budget.ts';
export { CACHE_LOOKBACK_BLOCKS, CACHE_PRICES, DEFAULT_CACHE_TTL_SECONDS, lowWaterBytes, requestCost, roomBytes } from './cache.ts';
export { FILL_RATIO, HEAD_MAX_RATIO, MAX_GAP_PAIRS, TAIL_PAIRS } from './fidelity.ts';
export { ConversationNotFoundError } from './projection-errors.ts';
export { summaryLabel, omittedNote } from './wording.ts';
export type {
  ConversationProjection,
  OmittedReason,
  OmittedSpan,
  PairItem,
  ProjectionCacheInfo,
  ProjectionItem,
  ProjectionProblem,
  SummaryItem,
  SummaryNotUsed,
  SummaryNotUsedReason,
  SummaryUserMessage,
} from './types.ts';
export type { ReadEvent, ReadObserver } from '../db/queries/projection.ts';
