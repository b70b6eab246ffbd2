/**
 * The read projection (docs/design.md "Projection (the read module)"): the history
 * of a Conversation as it goes into the next model request.
 *
 * Terminology
 * - Pair: the user message and completed assistant message of one eligible
 *   Run, numbered by `pairIndex` (zero-based, oldest first).
 * - Range: ten pairs aligned on a multiple of ten (pairs 10k..10k+9), the only
 *   shape a summary may have. The newest range may hold fewer than ten pairs.
 * - Item: one unit of the projection, always whole: a raw pair, or a
 *   summarized range (its ten user messages verbatim plus the summary of its
 *   assistant replies). Items are never cut.
 * - Usable summary: a completed record whose range, version and source
 *   binding (the 20 message ids and the source hash) all hold now.
 * - Budget: the UTF-8 bytes of the JSON the chosen client's adapter produces
 *   (by default `messagesBytes(toAnthropicMessages(projection))`; format.ts),
 *   never exceeded.
 * - Tail: the newest pairs, raw. Head: summaries (each beside its ten user
 *   messages) of older ranges, before the tail. Gap: the pairs between head
 *   and tail left out, stated and bounded (MAX_GAP_PAIRS).
 * - Layout: where the history starts, which ranges it shows as summaries and
 *   what it leaves out. Fidelity comes first (fidelity.ts: the newest pairs
 *   raw, older material left out first, the budget used); in the default
 *   `stable` mode the layout is kept between calls while the prompt cache
 *   holds it, so each request's history extends the previous one's, and laid
 *   out anew (a rewrite) when it no longer fits, changed, or its cache expired.
 */

/** One pair, carried verbatim. */
export interface PairItem {
  kind: 'pair';
  pairIndex: number;
  runId: string;
  userMessageId: string;
  assistantMessageId: string;
  /** Byte-identical to the stored user message. */
  userText: string;
  assistantText: string;
}

/** A user message of a summarized range, verbatim. */
export interface SummaryUserMessage {
  pairIndex: number;
  messageId: string;
  text: string;
}

/** A summarized range: the ten original user messages verbatim, and the summary of the ten assistant replies. */
export interface SummaryItem {
  kind: 'summary';
  fromPair: number;
  toPair: number;
  /** The summary record used (sourcebound.conversation_summaries.id). */
  recordId: string;
  promptVersion: string;
  model: string;
  /** The ten user messages of the range in pair order. */
  userMessages: SummaryUserMessage[];
  summary: string;
  /**
   * Facts of the summary its sources do not contain (`kind:text`), recorded
   * when the grounding policy is `flag`; empty for a grounded summary.
   */
  ungrounded: string[];
  /** Marks the summary as a non-authoritative summary of the assistant replies of pairs fromPair-toPair (and names any ungrounded facts). */
  label: string;
}

export type ProjectionItem = PairItem | SummaryItem;

/** Why pairs are not in the request. */
export type OmittedReason =
  /** Older material left out for the budget: before the first item, or the stated gap between the summaries and the newest pairs. */
  | 'budget'
  /** One exchange larger than the room the request had for it: left out alone, with a note where it was, so older items that fit still come. */
  | 'too_large'
  /** The stored pair index could not be proven consistent from here on (see `problems`). */
  | 'inconsistent';

/** A span of pairs that is not in the request. */
export interface OmittedSpan {
  fromPair: number;
  toPair: number;
  reason: OmittedReason;
}

/** Why a range the walk reached was not presented as a summary. */
export type SummaryNotUsedReason =
  /** No completed or failed record: never summarized yet (or only running, pending or stale claims). */
  | 'not_yet_summarized'
  /** The newest range, with fewer than ten pairs: it cannot have a summary. */
  | 'incomplete_range'
  /** The only record for the range failed for good. */
  | 'failed'
  /** A completed record whose range is not ten pairs aligned on a multiple of ten. */
  | 'misaligned'
  /** A completed record made with a prompt version projection may not use (@1, unknown versions). */
  | 'version_not_allowed'
  /** A completed record whose source hash version this build cannot compute. */
  | 'hash_version_unknown'
  /** A completed record longer than the contract's 6,000-character ceiling: never projected. */
  | 'over_cap'
  /** A completed record whose text is only white space or invisible characters: it says nothing of the replies, never projected. */
  | 'blank'
  /** A completed record whose 20 message ids or source hash no longer match the current pairs (Case B). */
  | 'binding_changed'
  /** A usable summary whose candidate (ten user messages + summary) did not fit the budget left (Case C). */
  | 'does_not_fit'
  /** A usable summary whose candidate is not smaller than the range's ten original pairs: the originals say more for less. */
  | 'larger_than_original'
  /** A usable summary of a range the kept layout shows raw (it became ready after the layout was made): the raw pairs stay, read from the prompt cache, until the next rewrite. */
  | 'kept_raw_for_cache'
  /** A usable summary of a range the layout shows raw: its original pairs fit, and they say more. */
  | 'shown_raw'
  /** The range is not plannable for the current pair count (inside the newest 20 again): its summary may not be used. */
  | 'not_plannable';

export interface SummaryNotUsed {
  fromPair: number;
  toPair: number;
  reason: SummaryNotUsedReason;
  /** The record the reason is about, when there is one. */
  recordId?: string;
}

/** A stored state the projection could not prove consistent; it projected what it could and says what to do. */
export interface ProjectionProblem {
  /**
   * What left history out: the stored pair index is inconsistent
   * (`pair_index_gap`) or changed during the read (`pairs_changed_during_read`);
   * or the conversation holds exchanges no pair can take, so they are in no
   * request: `messages_without_run` (a message written without a run),
   * `replies_streaming` (an assistant reply still streaming: finish or fail
   * it), `runs_not_settled` (a run still queued or running ten minutes after
   * it began: complete or fail it).
   */
  kind: 'pair_index_gap' | 'pairs_changed_during_read' | 'messages_without_run' | 'replies_streaming' | 'runs_not_settled';
  /** The first pair the problem concerns (it and everything older are omitted); null for the last three kinds. */
  atPair: number | null;
  /** How many messages or runs (the last three kinds). */
  count?: number;
  message: string;
}

/** How the history relates to the previous request's (prompt caching). */
export interface ProjectionCacheInfo {
  /** `stable` (default): keep the layout between calls; `newest-first`: fill the budget anew every call. */
  mode: 'stable' | 'newest-first';
  /**
   * null: the history is the stored layout with new pairs appended: the
   * layout's part is byte-identical to what the last rewrite sent, and the
   * pairs after it are their current rows (a pair edited after an earlier
   * request sent it changes the request from that pair on). Otherwise why it
   * was laid out anew: no layout yet, the budget was reached (or the stored
   * layout held nothing), something in the prefix changed, or the stored
   * layout was last used longer ago than the prompt cache keeps it
   * (`cacheTtlSeconds`), so it is laid out afresh for fidelity.
   */
  rewrite: null | 'first' | 'budget' | 'changed' | 'expired';
  /** What a rewrite fills at least, when the history is larger (bytes): the next rewrite is about budget - lowWater bytes of new exchanges away. */
  lowWaterBytes: number;
  /**
   * Whether the layout was written (false in newest-first mode, with
   * persistLayout off, when no rewrite happened, when another call replaced
   * the stored layout since this one read it, or when the write failed).
   */
  layoutSaved: boolean;
}

export interface ConversationProjection {
  conversationId: string;
  scope: string;
  /** In conversation order, oldest first. */
  items: ProjectionItem[];
  /** Every pair not in `items`, as spans, oldest first. */
  omitted: OmittedSpan[];
  /** Per range the walk reached and projected raw, partially or not at all: why its summary was not used. */
  summaryNotUsed: SummaryNotUsed[];
  /** UTF-8 bytes of the JSON of the history as `format`'s adapter makes it (by default): never more than budgetBytes. */
  bytes: number;
  /** What the history could take: the stated budget (in bytes) less the reserve. */
  budgetBytes: number;
  /** The client whose JSON `bytes` measures: 'anthropic', 'openai' or 'ai-sdk'. */
  format: 'anthropic' | 'openai' | 'ai-sdk';
  /** The budget stated for the whole request, in bytes (budgetBytes, or budgetTokens converted). */
  requestBudgetBytes: number;
  /** Bytes reserved for the rest of the request (system prompt, tools, new message, bytes). */
  reservedBytes: number;
  /** Eligible pairs in the conversation. */
  pairCount: number;
  /** Prompt-cache layout: whether this history extends the previous one, or why it was laid out anew. */
  cache: ProjectionCacheInfo;
  /** Stored inconsistencies met (empty normally): the projection degraded instead of failing. */
  problems: ProjectionProblem[];
}
