/**
 * Run compaction (docs/runs.md).
 *
 * Terminology
 * - Run history: the ordered, append-only record of one Run: the initial user
 *   request, user corrections (revision 1, 2, ...), model turns (text and tool
 *   proposals) and tool units. `seq` orders it.
 * - Protected originals: the initial request and every correction. Carried
 *   verbatim and in order into every request; never summarizer material.
 * - Tool unit: a tool proposal with its dispatch and its result, one record.
 *   Settlement: `settled` (a result), `failed`, `unknown` (the effect may or
 *   may not have happened). Before that it is `proposed` or `dispatched`.
 * - Work group: a model turn and all its tool units; the unit of compaction.
 * - Result store: versioned, immutable bodies the model rereads by id and
 *   exact version, or a byte or line range of one.
 * - Wire form: the body sent to the provider (anthropic.ts,
 *   toAnthropicRequest). Every size here is its exact UTF-8 length (plus the
 *   response reserve): what is measured is what is sent.
 * - Inline limit: a tool result body over `inlineResultBytes` is never shown
 *   whole; the newest groups show its excerpt (`excerptBytes`) and reference,
 *   older ones its reference. Rereads are bounded in bytes too (readResult).
 * - Reversible fitting: making the request smaller without losing anything:
 *   a shorter result catalog, older tool result bodies replaced by references
 *   to the result store, then bodies of the newest groups by their excerpt
 *   and reference; last, only in the request handed out and only when that
 *   brings it to the threshold, bodies of the newest groups by reference
 *   alone (`reference_recent`; compaction is planned without this step).
 * - Cannot fit: still over the threshold after fitting and compaction; the
 *   result is `{ ok: false, cannotFit }`, naming what holds the bytes.
 * - Exhausted identity: a candidate identity that spent every attempt; its
 *   material is never sent again, the next candidate takes a later boundary.
 * - Refused identity: a candidate identity whose summary came back and was
 *   refused by the net-benefit gate (the refusal and its reason are recorded
 *   on its receipt). The answer is judged once and never again, its material
 *   is never sent again, and the next candidate takes a later boundary, once
 *   the Run has grown enough for an answer that large to save the minimum.
 * - Semantic compaction: lossy, non-authoritative model summaries of older
 *   settled work groups, each committed as a checkpoint.
 * - Chunk: consecutive compactable work groups one summary covers, oldest
 *   first: at most `maxSummaryInputBytes` of summarizer input (at least one
 *   group), unless it would then not save `minSavingBytes` even with a
 *   summary of `minSummaryBytes` (then it takes the next groups too, until it
 *   would).
 * - Floor: the smallest request reversible fitting can make (compact catalog,
 *   every older rereadable body by reference). A summary's room is measured
 *   against the floor: fitting references more bodies to make room for it.
 * - Compaction plan: the fewest chunks, the candidate first, whose
 *   checkpoints bring the request to the target: the plan's floor (its chunks
 *   in place under empty summaries) plus `minSummaryBytes` per summary is at
 *   or under the target. Each summary is allowed an equal share of that room,
 *   at most the cap, and at most what the work it replaces allows: 6 bytes a
 *   tool call plus 12 a model turn, at least 512 (every checkpoint stays in
 *   every later request, so summaries must grow with the work, not with the
 *   number of checkpoints; see compaction-plan.ts `scaled`). Under the `flag`
 *   grounding policy a summary's room includes a reserve for its note's
 *   warning (checkpoint-item.ts `warningReserve`): `minSummaryBytes` plus the reserve
 *   is the least room a summary takes, and the summarizer is told the
 *   allowance less the reserve.
 * - Checkpoint: the immutable record of one summary: which turns it
 *   replaced (and their source hashes), the summary, the summary request that
 *   produced it, the predecessor checkpoint. Checkpoints never overlap.
 * - Note: what a checkpoint's item says of itself in the request (SUMMARY_NOTE);
 *   a summary accepted under the `flag` grounding policy also names there up
 *   to five of its ungrounded facts, read from its receipt.
 * - Summary request receipt: written and committed before the summary model
 *   call; settled once with the outcome. Recovery reads receipts, never
 *   guesses.
 * - Pressure: the serialized request's UTF-8 bytes plus the response reserve,
 *   compared with the threshold (compaction trigger) and the target (what
 *   fitting and compaction aim for).
 *
 * The compaction rule (prepareRunRequest, gate.ts)
 * 1. Only above compactAboveBytes (the target) after reversible fitting, and only if a plan
 *    reaches the target: otherwise nothing is sent (`insufficient_room`, with
 *    what the floor consists of). What no plan can remove: the envelope and
 *    the reserve, the protected originals, the newest groups, work after a
 *    pending effect, and the summary items themselves (their text, a note,
 *    and a bounded account of their tool calls: counts, the first failed and
 *    unknown ids, a pointer to read_result; about 13 bytes per compacted call
 *    over a long Run, not one reference per call).
 * 2. The plan is carried out one summary at a time, each a separate request
 *    with its own receipt and reservation (which keeps the rest of the plan
 *    and the finalization reserve available), each its own immutable
 *    checkpoint after the one before.
 * 3. Each checkpoint is committed only if the re-assembled request saves at
 *    least `minSavingBytes`, and, for the plan's last one, is at or under the
 *    target; for an earlier one, if the rest of the plan still reaches the
 *    target with this summary in place (`over_plan` otherwise). An answer is
 *    judged once, when it comes back; a refusal is recorded on its receipt
 *    with its reason and stands: the next candidate is a later boundary.
 * 4. It stops at the target, at the first summary not committed (the
 *    committed ones stay: each made progress, and the next call plans again
 *    from them), or after `maxSummariesPerPrepare` summaries.
 */
import { type ThinkingBlock } from '../db/queries/run-history.ts';
import { type GroundingPolicy } from '../support/summary-contract.ts';

export type Settlement = 'settled' | 'failed' | 'unknown';
export type ToolUnitStatus = 'proposed' | 'dispatched' | Settlement;

/** A tool call the model proposed in a turn. */
export interface ToolProposal {
  /** The model's id for it (e.g. Anthropic `tool_use.id`); unique within the Run; letters, digits, `_` and `-` only (what the Messages API accepts). */
  id: string;
  name: string;
  /**
   * JSON object input (the Messages API refuses any other; a missing or null
   * one is sent as `{}`). Stored as jsonb: key order is normalized. An input jsonb cannot
   * hold (a NUL or a lone surrogate in a string or key) is stored escaped
   * (toStoredJson in stored.ts) and comes back exactly, key order included.
   */
  input: unknown;
}

/** An exact version of a stored result. */
export interface ResultRef {
  resultId: string;
  version: number;
}

/** What the store knows about a result version. */
export interface ResultMeta extends ResultRef {
  bytes: number;
  lines: number;
  sha256: string;
  label: string | null;
}

// ---------------------------------------------------------------------------
// The request prepareRunRequest builds

export interface UserRequestItem {
  kind: 'user_request';
  seq: number;
  /** Verbatim. */
  text: string;
}

export interface CorrectionItem {
  kind: 'correction';
  seq: number;
  revision: number;
  /** Verbatim. */
  text: string;
}

export interface CheckpointSummaryItem {
  kind: 'checkpoint_summary';
  checkpointId: string;
  segment: number;
  fromSeq: number;
  toSeq: number;
  /** Always false: a summary describes work; it is not a record of what happened. */
  authoritative: false;
  /** What the summary is and is not; under the `flag` grounding policy it also names the summary's ungrounded facts. */
  note: string;
  text: string;
  /** Present only for a summary accepted under `flag`: the facts its material does not contain (`kind:text`), as on its receipt. */
  ungrounded?: string[];
  /** How many tool units the summary replaced (their references stay on the checkpoint record). */
  toolUnits: number;
  /**
   * A bounded account of those tool units as the request carries it: counts by
   * tool and settlement, the first failed and unknown ids, and how to list their
   * results (read_result {"checkpoint": segment}).
   */
  toolCalls: string;
}

/** A thinking block, as stored: defined beside the rows that carry it (db/queries/run-history.ts). */
export type { ThinkingBlock };

export interface ModelTurnItem {
  kind: 'model_turn';
  seq: number;
  text: string;
  toolCalls: ToolProposal[];
  /** Thinking blocks of the turn, sent back first and verbatim. */
  thinking?: ThinkingBlock[];
}

export interface ToolResultItem {
  kind: 'tool_result';
  /** The seq of the model turn that proposed the call. */
  seq: number;
  proposalId: string;
  tool: string;
  dispatchId: string | null;
  status: ToolUnitStatus;
  error?: string;
  /** The result body, when shown inline. */
  body?: string;
  /** The beginning of the body (at most `excerptBytes`), shown with its reference when the whole body is not. */
  excerpt?: string;
  /** The result in the store, when shown as a reference (externalized, over the inline limit, or reduced by fitting). */
  reference?: ResultMeta & { note: string };
}

export type RunRequestItem = UserRequestItem | CorrectionItem | CheckpointSummaryItem | ModelTurnItem | ToolResultItem;

/** A catalog entry: an externalized result the model can reread. */
export interface CatalogEntry {
  resultId: string;
  version: number;
  bytes: number;
  lines: number;
  sha256?: string;
  label?: string | null;
}

/**
 * The complete next model request. Its size is the UTF-8 length of the body
 * sent to the provider, `JSON.stringify(toAnthropicRequest(request))`, plus
 * `responseReserveBytes` (measureRequest).
 */
export interface RunRequest {
  model: string;
  system: string;
  tools: readonly unknown[];
  messages: RunRequestItem[];
  /** The newest stored results, as many as the catalog's bytes allow. */
  resultCatalog: CatalogEntry[];
  /** Stored results left out of the catalog (listed by read_result {"catalog": ...}). */
  resultCatalogOmitted: number;
  responseReserveBytes: number;
}

// ---------------------------------------------------------------------------
// Options

/** Every knob of run compaction; DEFAULT_RUN_POLICY has the defaults. */
export interface RunCompactionPolicy {
  /** New checkpoints may be made; committed ones are used either way. (Default: true) */
  enabled: boolean;
  /** No request is handed out above this many bytes (the soft threshold). (Default: 262144, 256 KiB) */
  thresholdBytes: number;
  /** Reversible fitting starts above, and compaction must reach, this many bytes. (Default: 229376, 224 KiB) */
  targetBytes: number;
  /**
   * Semantic compaction is considered when the request is still above this
   * many bytes after reversible fitting; 0 means the target. Between the
   * target and the threshold a failed, slow or bad summary leaves a request
   * that still fits and the next call tries again; at the threshold itself one
   * failure would leave nothing sendable. At most thresholdBytes. (Default: 0, the target)
   */
  compactAboveBytes: number;
  /** A checkpoint must save at least this many bytes. (Default: 4096) */
  minSavingBytes: number;
  /** Largest accepted summary in UTF-8 bytes. (Default: 6000) */
  summaryCapBytes: number;
  /** A summary smaller than this is not worth a model request: no call when less room is left. (Default: 256) */
  minSummaryBytes: number;
  /** The newest work groups never compacted nor fitted. (Default: 3) */
  keepRecentGroups: number;
  /** Bytes reserved for the response, added to the measured request. (Default: 16384) */
  responseReserveBytes: number;
  /** Deadline of one summary request in milliseconds. (Default: 120000) */
  summaryDeadlineMs: number;
  /** How long after its deadline an unsettled summary request is presumed lost (then settled unknown). (Default: 30000) */
  leaseGraceMs: number;
  /** Spent dispatches per candidate identity, 1 or 2 (the database allows at most 2). (Default: 2) */
  maxAttempts: number;
  /** Largest summarizer input in bytes; fewer groups are taken when more would not fit. (Default: 262144) */
  maxSummaryInputBytes: number;
  /**
   * Most summaries one prepareRunRequest requests, each for its
   * own checkpoint, one after another (a plan of more is finished by the next
   * calls). With `summaryDeadlineMs`, it bounds the time one call may spend in
   * summary requests. At least 1. (Default: 16)
   */
  maxSummariesPerPrepare: number;
  /** Bytes of a model turn's text given to the summarizer. (Default: 8192) */
  turnExcerptBytes: number;
  /** Bytes of a tool's input and of its result given to the summarizer. (Default: 1024) */
  toolExcerptBytes: number;
  /**
   * A tool result body over this many UTF-8 bytes is never shown whole: the
   * request shows its excerpt and reference in the newest groups, its reference in older ones (it stays in the store, rereadable
   * in bounded ranges). (Default: 32768)
   */
  inlineResultBytes: number;
  /** Bytes of the excerpt shown with a reference, for bodies over the inline limit and when fitting reaches into the newest groups. (Default: 2048) */
  excerptBytes: number;
  /** Most bytes the result catalog adds to the system prompt; older entries are listed by read_result. The compact catalog has a quarter, without labels. (Default: 4096) */
  catalogBytes: number;
  /** A summary fact not in the summarizer's material (src/grounding/index.ts): `reject` makes the answer invalid, `flag` records it. (Default: reject) */
  grounding: GroundingPolicy;
}

/** The Run's resources kept for finalization, and the size of a summary's reservation. */
export interface SummaryBudgetOptions {
  /** Model requests that must stay available after a summary request. (Default: 1) */
  finalizationRequests?: number;
  /** Tokens that must stay available after a summary request's reservation. (Default: 0) */
  finalizationTokens?: number;
  /** Tokens reserved for one summary request. (Default: input bytes / 3 + the summary allowance + 512) */
  summaryTokens?: number;
}

/** The Run's budget as stored; null limits mean no limit. */
export interface RunBudget {
  requestsLimit: number | null;
  tokensLimit: number | null;
  requestsUsed: number;
  tokensUsed: number;
  requestsReserved: number;
  tokensReserved: number;
}
