/**
 * What prepareRunRequest reports (PrepareReport, RunCompactionReport, CannotFit)
 * and the hooks that observe it. The records and requests these reports speak
 * of are in types.ts, with the terminology.
 */
import { type OutcomeKind } from '../support/summary-contract.ts';
import { type RunRequest } from './types.ts';

export type FitStepName = 'measure' | 'shrink_catalog' | 'reference_results' | 'excerpt_recent' | 'reference_recent' | 'compaction';

export interface FitStep {
  step: FitStepName;
  bytesBefore: number;
  bytesAfter: number;
}

/** A tool result body the request shows as a reference instead. */
export interface ReferenceMade {
  proposalId: string;
  resultId: string;
  version: number;
  savedBytes: number;
  /** `reference`: an older body by its reference (or, only over the threshold, one of the newest groups); `excerpt`: a body of the newest groups by its excerpt and reference. */
  form: 'reference' | 'excerpt';
}

export type CompactionDecision =
  /** Hooks only (onBeforeCompaction): the receipt is committed and the summary request is about to be sent. */
  | 'pending'
  /** At or under the threshold after reversible fitting. */
  | 'not_needed'
  /** policy.enabled is false. */
  | 'disabled'
  /** No summary request was made (see reason). */
  | 'skipped'
  /** A checkpoint was committed (see checkpointId). */
  | 'committed'
  /** The summary came back but failed the net-benefit gate; the original history stays. */
  | 'rejected'
  /** The summary request did not produce a summary (see outcome and reason). */
  | 'failed';

export interface CandidateReport {
  fromSeq: number;
  toSeq: number;
  /** The model turns whose groups the candidate covers. */
  seqs: number[];
  toolUnits: number;
  sourceHash: string;
  identityKey: string;
  /** Bytes the candidate's groups take in the current request. */
  requestBytes: number;
  /** Bytes of summarizer input. */
  inputBytes: number;
}

/** The compaction plan a summary belongs to (see the Terminology). */
export interface CompactionPlanReport {
  /** Checkpoints the plan needs, this candidate's first; when the target is out of reach, every compactable chunk. */
  checkpoints: number;
  /** The request's floor with all of them in place under empty summaries. */
  floorBytes: number;
  /** Whether floorBytes plus minSummaryBytes per summary is at or under the target. */
  reachable: boolean;
  /** What the floor consists of (the parts add up to floorBytes). */
  floor: {
    /** Model, system prompt, tool schemas, the result catalog and the response reserve. */
    envelope: number;
    /** The initial request and every correction, verbatim. */
    protected: number;
    /** Checkpoint summary items: the committed ones as shown, the planned ones without text (note, ids, tool-result references). */
    summaries: number;
    /** Work still shown: the newest groups, work after a pending effect, and anything the plan leaves. */
    work: number;
  };
}

export interface RunCompactionReport {
  decision: CompactionDecision;
  reason: string | null;
  candidate: CandidateReport | null;
  /** The plan the candidate belongs to; null when no plan was made. */
  plan: CompactionPlanReport | null;
  summaryRequestId: string | null;
  attempt: number | null;
  outcome: OutcomeKind | null;
  /** The summary's room in UTF-8 bytes (at most summaryCapBytes). */
  summaryAllowance: number | null;
  /** The character limit the summarizer was told for that room, for the script of its material (bytes / 1 to 4). */
  summaryMaxChars: number | null;
  summaryBytes: number | null;
  /** The full next request's bytes with the summary, after fitting. */
  bytesWithSummary: number | null;
  checkpointId: string | null;
  /**
   * An identity that spent every attempt (maxAttempts) on the material this
   * call would have summarized first: that material is never sent again, so
   * the candidate moved to a later boundary (or, with none yet, nothing was sent).
   */
  exhausted: ExhaustedIdentity | null;
  /**
   * An identity whose summary the net-benefit gate refused, on the material
   * this call would have summarized first (or a part of it that starts it):
   * that answer is not judged again and that material is never sent again, so
   * the candidate moved to a later boundary (or, with none that could pass the
   * gate yet, nothing was sent).
   */
  refused: RefusedIdentity | null;
}

/** A candidate identity whose answer the net-benefit gate refused, and why. */
export interface RefusedIdentity {
  identityKey: string;
  fromSeq: number;
  toSeq: number;
  /** The receipt of the refused answer. */
  summaryRequestId: string;
  attempt: number;
  /** The refused summary's UTF-8 bytes: a later boundary is taken once an answer this large would save the minimum. */
  summaryBytes: number;
  /** The gate's reason, as recorded on the receipt (e.g. insufficient_saving:3100<4096); null for an answer settled before reasons were recorded. */
  reason: string | null;
}

/** A candidate identity with no attempt left, and why. */
export interface ExhaustedIdentity {
  identityKey: string;
  fromSeq: number;
  toSeq: number;
  attempts: number;
  lastOutcome: 'ok' | 'invalid' | 'unknown';
  /** The last attempt's reason (e.g. deadline_exceeded, a contract failure). */
  reason: string | null;
}

export interface PrepareReport {
  runId: string;
  thresholdBytes: number;
  targetBytes: number;
  /** Bytes before and after each step, in order. */
  steps: FitStep[];
  /** References made by fitting in the final request. */
  references: ReferenceMade[];
  catalog: 'full' | 'compact';
  /** Checkpoints the final request uses, oldest first. */
  checkpointsUsed: string[];
  /** Checkpoints whose sources no longer hash the same: their originals are shown instead. */
  brokenCheckpoints: string[];
  /** The last compaction decision of this call: why it stopped (or `committed` when its last summary reached the target). */
  compaction: RunCompactionReport;
  /**
   * Every compaction decision of this call, in order; `compaction` is the
   * last. One per summary requested (each its own checkpoint when
   * committed), then a `skipped` one when the plan stopped short of the target
   * for another reason (budget, limit, cancellation...). With no summary: the
   * one decision (`not_needed`, `disabled` or `skipped`).
   */
  compactions: RunCompactionReport[];
  /** Summary requests found unsettled past their lease and settled as unknown by this call. */
  expiredReceipts: string[];
  /** Measured size of the final request (serialized bytes + response reserve). */
  bytes: number;
  /** Whether the final request is at or under the threshold. */
  fits: boolean;
  /** Why it does not fit, when it does not. */
  reason: string | null;
  /** Errors thrown by hooks (they change nothing). */
  hookErrors: string[];
}

/** A part of the request and the bytes it holds (the parts of a CannotFit add up to its bytes). */
export interface ByteHolder {
  what:
    | 'envelope'
    | 'catalog'
    | 'response_reserve'
    | 'protected_originals'
    | 'checkpoint_summaries'
    | 'recent_work'
    | 'work_after_a_pending_effect'
    | 'older_work';
  bytes: number;
  /** The history entries (seq; a checkpoint by its first seq) that make it up. */
  seqs: number[];
  /** Its five largest entries. */
  largest: { seq: number; bytes: number }[];
}

/**
 * prepareRunRequest could not bring the request to the threshold: it is not
 * handed out as sendable. `unsent` is what it would have been, for inspection.
 */
export interface CannotFit {
  kind: 'cannot_fit';
  /** Measured bytes (body + response reserve). */
  bytes: number;
  thresholdBytes: number;
  /** What holds the bytes, largest first. */
  holders: ByteHolder[];
  unsent: RunRequest;
}

/** What hooks observe: a deep-frozen copy. */
export interface CompactionObservation {
  phase: 'before' | 'after';
  runId: string;
  scope: string;
  bytesBefore: number;
  compaction: RunCompactionReport;
}

export type DeepReadonly<T> = T extends (infer U)[]
  ? readonly DeepReadonly<U>[]
  : T extends object
    ? { readonly [K in keyof T]: DeepReadonly<T[K]> }
    : T;

/** Observers of compaction. Awaited; a throw or a mutation changes nothing. */
export interface RunCompactionHooks {
  /** Before each summary request is dispatched (its receipt is already committed). */
  onBeforeCompaction?: (observation: DeepReadonly<CompactionObservation>) => void | Promise<void>;
  /** After each summary's decision is settled and committed (committed, rejected or failed). */
  onAfterCompaction?: (observation: DeepReadonly<CompactionObservation>) => void | Promise<void>;
}
