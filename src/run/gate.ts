import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { runCheckpointCommit, type CheckpointRow } from '../db/queries/run-checkpoints.ts';
import type { ReceiptRow, ReceiptSettlement } from '../db/queries/run-receipts.ts';
import type { RunState } from '../db/queries/run-state.ts';
import { evaluate, type Evaluated } from './assemble.ts';
import { hypothetical, type Candidate } from './candidate.ts';
import { isWriteRace } from './run-errors.ts';
import { RUN_HASH_VERSION } from './run-hash.ts';
import { escapedBytes } from './wire.ts';
import { minSummaryRoom, SUMMARY_NOTE, summaryNote } from './checkpoint-item.ts';
import { type RequestInput } from './request-slots.ts';
import { rollbackTo, savepoint } from '../db/transaction.ts';
import type { RunCompactionPolicy } from './types.ts';
import type { RunCompactionReport } from './reports.ts';

export type GateReport = Pick<
  RunCompactionReport,
  'decision' | 'reason' | 'summaryRequestId' | 'attempt' | 'summaryBytes' | 'bytesWithSummary' | 'checkpointId'
>;

/** Where the candidate stands in its plan (see planCompaction). */
export interface StepGoal {
  /** Checkpoints the plan still needs after this one; 0: this one must bring the request to the target. */
  remaining: number;
  /** The request's floor with this candidate and the remaining chunks in place under empty summaries. */
  planFloorBytes: number;
}

/** The gate's verdict on one answer: the checkpoint it would become, or why it is refused. */
export type GateVerdict =
  | { accepted: true; final: Evaluated; row: CheckpointRow; compaction: GateReport }
  | { accepted: false; compaction: GateReport & { reason: string } };

/**
 * The net-benefit gate. The full next request is re-assembled with the
 * summary in place (and fitted as any request is). The answer is accepted only
 * if that request saves at least the minimum and, for the last checkpoint of
 * the plan, is at or under the target; for an earlier one, if the rest of the
 * plan can still reach the target with this summary in place (its floor plus
 * this summary plus the minimum room of each remaining summary is at or under
 * the target). Otherwise the original history stays. Judged once, when the
 * answer comes back: the refusal is recorded on its receipt with its reason,
 * and that answer is never judged again (prepareRunRequest then takes a later
 * boundary). No database access.
 */
export function judge(
  state: RunState,
  input: RequestInput,
  policy: Readonly<RunCompactionPolicy>,
  before: Evaluated,
  candidate: Candidate,
  receipt: Pick<ReceiptRow, 'id' | 'attempt'>,
  text: string,
  goal: StepGoal,
  /** The answer's ungrounded facts (accepted under `flag`): the note names them, and they are measured with it. */
  ungrounded: readonly string[] = [],
): GateVerdict {
  const summaryBytes = Buffer.byteLength(text, 'utf8');
  const base = {
    decision: 'rejected' as const,
    summaryRequestId: receipt.id,
    attempt: receipt.attempt,
    summaryBytes,
    bytesWithSummary: null,
    checkpointId: null,
  };
  if (summaryBytes > policy.summaryCapBytes) {
    return { accepted: false, compaction: { ...base, reason: `summary_over_cap:${summaryBytes}>${policy.summaryCapBytes}` } };
  }
  const checkpointId = randomUUID();
  const after = evaluate(state, input, policy, hypothetical(candidate, text, checkpointId, ungrounded));
  const bytesWithSummary = after.fitted.bytes;
  const saved = before.fitted.bytes - bytesWithSummary;
  if (goal.remaining === 0 && bytesWithSummary > policy.targetBytes) {
    return { accepted: false, compaction: { ...base, bytesWithSummary, reason: `over_target:${bytesWithSummary}>${policy.targetBytes}` } };
  }
  if (goal.remaining > 0) {
    // The summary's bytes in the request (JSON-escaped) and its note's warning, if any, on top of the plan's floor.
    const warning = escapedBytes(summaryNote(ungrounded)) - escapedBytes(SUMMARY_NOTE);
    const reachable = goal.planFloorBytes + escapedBytes(text) + warning + goal.remaining * minSummaryRoom(policy);
    if (reachable > policy.targetBytes) {
      return { accepted: false, compaction: { ...base, bytesWithSummary, reason: `over_plan:${reachable}>${policy.targetBytes}` } };
    }
  }
  if (saved < policy.minSavingBytes) {
    return { accepted: false, compaction: { ...base, bytesWithSummary, reason: `insufficient_saving:${saved}<${policy.minSavingBytes}` } };
  }
  const row: CheckpointRow = {
    id: checkpointId,
    segment: candidate.segment,
    predecessorId: candidate.predecessorId,
    fromSeq: candidate.fromSeq,
    toSeq: candidate.toSeq,
    compactedSeqs: candidate.seqs,
    sourceHashes: candidate.groupHashes,
    sourceHash: candidate.sourceHash,
    hashVersion: RUN_HASH_VERSION,
    toolResultRefs: candidate.toolResultRefs,
    summary: text,
    summaryRequestId: receipt.id,
    correctionRevision: newestRevision(state),
    ungrounded: [...ungrounded],
  };
  return {
    accepted: true,
    final: after,
    row,
    compaction: { ...base, reason: null, decision: 'committed', bytesWithSummary, checkpointId },
  };
}

/** What became of an accepted answer at commit. */
export type CheckpointCommitted =
  | { kind: 'committed' }
  /** Its receipt was settled (as unknown, after its lease) before the answer came back: nothing is written. */
  | { kind: 'lease_lost' }
  /** The database refused the checkpoint as stale (the chain or the source moved): nothing is written. */
  | { kind: 'stale'; reason: string };

/**
 * Settles the receipt of an accepted answer `ok` (with its grounding verdict)
 * and inserts its checkpoint, in one database call: the only way a run
 * summary becomes a checkpoint (runCheckpointCommit).
 */
export async function commitCheckpoint(
  client: pg.PoolClient,
  state: RunState,
  input: RequestInput,
  row: CheckpointRow,
  settlement: ReceiptSettlement,
): Promise<CheckpointCommitted> {
  await savepoint(client, 'checkpoint');
  try {
    const committed = await runCheckpointCommit(
      client,
      {
        id: row.id,
        scope: state.run.scope,
        sourceHashes: row.sourceHashes,
        correctionRevision: row.correctionRevision,
        modelRoute: input.model,
        summaryRequestId: row.summaryRequestId,
      },
      settlement,
    );
    return committed ? { kind: 'committed' } : { kind: 'lease_lost' };
  } catch (error) {
    if (!isWriteRace(error)) throw error;
    await rollbackTo(client, 'checkpoint');
    return { kind: 'stale', reason: `stale_candidate:${(error as Error).message}` };
  }
}

function newestRevision(state: RunState): number {
  let revision = 0;
  for (const t of state.turns) if (t.revision !== null && t.revision > revision) revision = t.revision;
  return revision;
}
