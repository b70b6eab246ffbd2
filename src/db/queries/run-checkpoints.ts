/**
 * Checkpoint statements of run compaction: immutable records of one summary each (guard:
 * the run_checkpoints_guard trigger).
 */
import type { Queryable } from '../queryable.ts';

export interface ToolResultRefRow {
  proposalId: string;
  tool: string;
  settlement: 'settled' | 'failed' | 'unknown';
  dispatchId: string | null;
  resultId: string | null;
  version: number | null;
}

export interface CheckpointRow {
  id: string;
  segment: number;
  predecessorId: string | null;
  fromSeq: number;
  toSeq: number;
  compactedSeqs: number[];
  sourceHashes: string[];
  sourceHash: string;
  hashVersion: number;
  toolResultRefs: ToolResultRefRow[];
  summary: string;
  summaryRequestId: string;
  correctionRevision: number;
  /**
   * The summary's ungrounded facts (`kind:text`), read from its receipt
   * (grounding_ungrounded): non-empty only for a summary accepted under the
   * `flag` grounding policy. The request's note names them.
   */
  ungrounded: string[];
}

export interface CheckpointInsert {
  /** Chosen by the caller, so the request measured before the insert is byte-identical to the one after. */
  id: string;
  runId: string;
  conversationId: string;
  scope: string;
  segment: number;
  predecessorId: string | null;
  correctionRevision: number;
  modelRoute: string;
  fromSeq: number;
  toSeq: number;
  compactedSeqs: number[];
  sourceHashes: string[];
  sourceHash: string;
  hashVersion: number;
  toolResultRefs: ToolResultRefRow[];
  summaryRequestId: string;
  summaryModel: string;
  promptVersion: string;
  summary: string;
}

/** Inserts a checkpoint; the run_checkpoints_guard trigger checks chain, range, settlement and binding. */
export async function runCheckpointInsert(db: Queryable, c: CheckpointInsert): Promise<string> {
  const { rows } = await db.query<{ id: string }>(
    `insert into sourcebound.run_checkpoints (
       id, run_id, conversation_id, scope, segment, predecessor_id, correction_revision, model_route, from_seq, to_seq,
       compacted_seqs, source_hashes, source_hash, hash_version, tool_result_refs, summary_request_id, summary_model,
       prompt_version, summary, summary_bytes)
     values ($19, $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, octet_length($18))
     returning id`,
    [
      c.runId,
      c.conversationId,
      c.scope,
      c.segment,
      c.predecessorId,
      c.correctionRevision,
      c.modelRoute,
      c.fromSeq,
      c.toSeq,
      c.compactedSeqs,
      c.sourceHashes,
      c.sourceHash,
      c.hashVersion,
      JSON.stringify(c.toolResultRefs),
      c.summaryRequestId,
      c.summaryModel,
      c.promptVersion,
      c.summary,
      c.id,
    ],
  );
  return rows[0]!.id;
}
