/**
 * Checkpoint statements of run compaction: immutable records of one summary each, written only
 * by sourcebound.run_checkpoint_commit() (guard: the run_checkpoints_guard trigger).
 */
import type { Queryable } from '../queryable.ts';
import { usageJson, type ReceiptSettlement } from './run-receipts.ts';

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

export interface CheckpointCommit {
  /** Chosen by the caller, so the request measured before the commit is byte-identical to the one after. */
  id: string;
  scope: string;
  /** The work groups' hashes, in order: their source hash must be the receipt's. */
  sourceHashes: string[];
  correctionRevision: number;
  modelRoute: string;
  /** The receipt the checkpoint is made of, settled `ok` by this same call. */
  summaryRequestId: string;
}

/**
 * Settles the receipt `ok` with its answer and grounding verdict and inserts
 * its checkpoint, in one call (sourcebound.run_checkpoint_commit(), the only
 * way to either). The checkpoint's run, range, compacted turns, source hash,
 * predecessor, segment and tool result references are taken from the receipt
 * and the Run's stored rows; the run_checkpoints_guard trigger checks chain,
 * range and settlement, and a refusal (a guard's, SQLSTATE 23000) writes
 * nothing. False when the receipt was already settled: nothing is written.
 */
export async function runCheckpointCommit(db: Queryable, c: CheckpointCommit, s: ReceiptSettlement): Promise<boolean> {
  if (s.status !== 'ok') throw new Error(`a checkpoint is committed with an ok answer, not ${s.status}`);
  const { rows } = await db.query<{ committed: boolean }>(
    `select sourcebound.run_checkpoint_commit($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::text[], $11::text[], $12::text[], $13, $14) as committed`,
    [
      c.scope,
      c.summaryRequestId,
      c.id,
      s.summary,
      s.answerModel,
      s.providerRequestId,
      usageJson(s.usage),
      s.chargedRequests,
      s.chargedTokens,
      s.grounding?.checked ?? null,
      s.grounding?.ungrounded ?? null,
      c.sourceHashes,
      c.correctionRevision,
      c.modelRoute,
    ],
  );
  return rows[0]!.committed;
}
