/**
 * The summary contract: the shapes both sides of a summarizer call share and
 * that sit below everything that makes or checks one. What a summarizer is
 * given (MaterialItem, SummaryRequest), what it answers (Outcome), and what the
 * grounding check records on an answer (Grounding, Fact) and may do about it
 * (GroundingPolicy). A leaf: the gateway, grounding, configuration and the
 * stored records all import these, and it imports nothing.
 *
 * Terminology
 * - Summarizer: something that turns material (texts tagged with ids) into one
 *   plain-text summary. The Anthropic provider and the offline extractive
 *   summarizer are summarizers.
 * - Gateway: the one door both compaction systems use to reach a summarizer. It
 *   adds admission (per-process and fleet-wide limits) and classifies every
 *   result into one Outcome.
 * - Outcome: what a model call came to. The compaction systems decide what an
 *   outcome costs (an attempt, a deferral, a loud failure); the gateway only
 *   names it.
 */

/**
 * The summary contract's ceiling in characters (code points): a summary is
 * never longer. A lower limit may be configured, a higher one may not, and
 * the read projection refuses a completed record over it.
 */
export const SUMMARY_CHAR_CEILING = 6000;

/** Token usage as reported by the provider (null when the provider gave none). */
export interface Usage {
  inputTokens: number;
  outputTokens: number;
}

/** The model answered and the answer is an acceptable summary. */
export interface OkOutcome {
  kind: 'ok';
  text: string;
  /** Model identity to record, e.g. `anthropic/claude-haiku-4-5` or `sourcebound/extractive@1`. */
  model: string;
  usage: Usage | null;
  requestId: string | null;
  /** The grounding check of the text (src/grounding/index.ts), once it was made. */
  grounding?: Grounding;
}

/** The model answered, but the answer is not a summary (tool use, truncation, refusal, empty, too long...). Spends an attempt. */
export interface InvalidOutcome {
  kind: 'invalid';
  reason: string;
  model: string;
  usage: Usage | null;
  requestId: string | null;
  /** Set when the answer was invalid because of its grounding check (reason `ungrounded: ...`). */
  grounding?: Grounding;
}

/** The provider refused before generating (429, 529, 503, admission wait timed out). Spends no attempt. */
export interface DeferredOutcome {
  kind: 'deferred';
  reason: string;
  /** How long the provider asked us to wait, when it said. */
  retryAfterMs: number | null;
}

/** The request may have been processed (timeout after send, connection cut, abort after send). Spends an attempt. */
export interface UnknownOutcome {
  kind: 'unknown';
  reason: string;
  requestId: string | null;
}

/** Bad configuration (no key, 401, 403, 404 model, 400 request shape). Loud; spends no attempt. */
export interface ConfigOutcome {
  kind: 'config';
  reason: string;
  status: number | null;
}

export type Outcome = OkOutcome | InvalidOutcome | DeferredOutcome | UnknownOutcome | ConfigOutcome;
export type OutcomeKind = Outcome['kind'];

/**
 * One piece of material to summarize, named by `id` as its prompt version
 * names items (prompts.ts ItemKey): a conversation reply's pair number
 * (`12`, conversation-compaction@5), an assistant message id (@2-@4), a run's
 * `turn:3`.
 */
export interface MaterialItem {
  id: string;
  text: string;
}

export interface SummaryRequest {
  /** A version from the prompt registry, e.g. `conversation-compaction@3`. */
  promptVersion: string;
  /** The material, in order. Never user text for conversation compaction. */
  items: readonly MaterialItem[];
  /** Maximum characters of the accepted summary (default from configuration, 6,000). */
  maxChars?: number;
  /** Deadline for this call in milliseconds (default from configuration). */
  deadlineMs?: number;
  /** Cancels the call; an abort after the request was sent is an `unknown` outcome. */
  signal?: AbortSignal;
}

export interface Summarizer {
  /** The identity recorded on every summary this summarizer produces. */
  readonly model: string;
  summarize(request: SummaryRequest): Promise<Outcome>;
}

// Grounding (src/grounding/): what a check of a summary against its material finds.

export type FactKind = 'url' | 'email' | 'path' | 'code' | 'date' | 'time' | 'money' | 'version' | 'identifier' | 'number';

export interface Fact {
  kind: FactKind;
  /** The fact as written in the text. */
  text: string;
  /** The canonical form (see the normalization in src/grounding/index.ts). */
  key: string;
  /** Directly followed by `…`: the summarizer cut it; a prefix of a material token grounds it. */
  truncated: boolean;
}

/** What the check found, stored with the attempt: facts as `kind:text`. */
export interface Grounding {
  /** Every fact checked, in order of first occurrence, without repeats. */
  checked: string[];
  /** The checked facts the material does not contain. */
  ungrounded: string[];
}

export type GroundingPolicy = 'reject' | 'flag';
export const GROUNDING_POLICIES: readonly GroundingPolicy[] = Object.freeze(['reject', 'flag']);
/** The policy when nothing is configured. */
export const DEFAULT_GROUNDING_POLICY: GroundingPolicy = 'reject';
