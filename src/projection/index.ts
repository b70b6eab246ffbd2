/** The read projection: a conversation's history for the next model request, within a byte budget. */
export { projectConversationHistory, MAX_PAGE_RANGES, type ProjectArgs } from './project.ts';
export { toAnthropicMessages, messagesBytes, itemBytes, noteBytes, type MessageParam } from './anthropic.ts';
export { ConversationNotFoundError } from './errors.ts';
export { summaryLabel, omittedNote } from './wording.ts';
export type {
  ConversationProjection, OmittedReason, OmittedSpan, PairItem, ProjectionItem, SummaryItem, SummaryNotUsed,
  SummaryNotUsedReason, SummaryUserMessage,
} from './types.ts';
export type { ReadEvent, ReadObserver } from '../db/queries/projection.ts';
