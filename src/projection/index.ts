/** The read projection: a conversation's history for the next model request, within a byte budget. */
export { projectConversationHistory, MAX_PAGE_RANGES, type ProjectArgs } from './project.ts';
export { toAnthropicMessages, messagesBytes, itemBytes, noteBytes, BREAKPOINT_BYTES, type AdapterOptions, type MessageParam } from './anthropic.ts';
export { CACHE_LOOKBACK_BLOCKS, CACHE_PRICES, ROOM_MAX_RATIO, ROOM_MIN_RATIO, ROOM_TURNS, expectedTurns, ledgerAllows, lowWaterBytes, requestCost, rewritePays, roomBytes, savedBefore, wholeHistoryCost, type CacheLedger } from './cache.ts';
export { ConversationNotFoundError } from './errors.ts';
export { summaryLabel, omittedNote } from './wording.ts';
export type {
  ConversationProjection, OmittedReason, OmittedSpan, PairItem, ProjectionCacheInfo, ProjectionItem, ProjectionProblem,
  SummaryItem, SummaryNotUsed, SummaryNotUsedReason, SummaryUserMessage,
} from './types.ts';
export type { ReadEvent, ReadObserver } from '../db/queries/projection.ts';
