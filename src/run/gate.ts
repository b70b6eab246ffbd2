import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { runCheckpointInsert, type ReceiptRow, type RunState } from '../db/queries/run.ts';
import { RUN_PROMPT_VERSION } from '../gateway/prompts.ts';
import { evaluate, hypothetical, type Evaluated } from './assemble.ts';
import type { Candidate } from './candidate.ts';
import { isUniqueViolation } from './errors.ts';
import { RUN_HASH_VERSION } from './hash.ts';
import type { RequestInput } from './project.ts';
import { rollbackTo, savepoint } from './tx.ts';
import type { CompactionReport, RunCompactionPolicy } from './types.ts';

export type GateReport = Pick<CompactionReport, 'decision' | 'reason' | 'summaryRequestId' | 'attempt' | 'summaryBytes' | 'bytesWithSummary' | 'checkpointId'>;

/**
 * The net-benefit gate, then the checkpoint. The full next request is
 * re-assembled with the summary in place (and fitted as any request is); the
 * checkpoint is committed only if that request is at or under the target and
 * saves at least the minimum. Otherwise the original history stays.
 */
export async function gateAndCommit(
  client: pg.PoolClient,
  state: RunState,
  input: RequestInput,
  policy: Readonly<RunCompactionPolicy>,
  before: Evaluated,
  candidate: Candidate,
  receipt: Pick<ReceiptRow, 'id' | 'attempt'>,
  text: string,
  answerModel: string,
): Promise<{ final: Evaluated; compaction: GateReport }> {
  const summaryBytes = Buffer.byteLength(text, 'utf8');
  const base = { decision: 'rejected' as const, reason: null, summaryRequestId: receipt.id, attempt: receipt.attempt, summaryBytes, bytesWithSummary: null, checkpointId: null };
  if (summaryBytes > policy.summaryCapBytes) {
    return { final: before, compaction: { ...base, reason: `summary_over_cap:${summaryBytes}>${policy.summaryCapBytes}` } };
  }
  const checkpointId = randomUUID();
  const after = evaluate(state, input, policy, hypothetical(candidate, text, checkpointId));
  const bytesWithSummary = after.fitted.bytes;
  const saved = before.fitted.bytes - bytesWithSummary;
  if (bytesWithSummary > policy.targetBytes) {
    return { final: before, compaction: { ...base, bytesWithSummary, reason: `over_target:${bytesWithSummary}>${policy.targetBytes}` } };
  }
  if (saved < policy.minSavingBytes) {
    return { final: before, compaction: { ...base, bytesWithSummary, reason: `insufficient_saving:${saved}<${policy.minSavingBytes}` } };
  }
  await savepoint(client, 'checkpoint');
  try {
    await runCheckpointInsert(client, {
      id: checkpointId, runId: state.run.id, conversationId: state.run.conversationId, scope: state.run.scope,
      segment: candidate.segment, predecessorId: candidate.predecessorId, correctionRevision: newestRevision(state),
      modelRoute: input.model, fromSeq: candidate.fromSeq, toSeq: candidate.toSeq, compactedSeqs: candidate.seqs,
      sourceHashes: candidate.groupHashes, sourceHash: candidate.sourceHash, hashVersion: RUN_HASH_VERSION,
      toolResultRefs: candidate.toolResultRefs, summaryRequestId: receipt.id, summaryModel: answerModel,
      promptVersion: RUN_PROMPT_VERSION, summary: text,
    });
  } catch (error) {
    const code = (error as { code?: string }).code;
    if (code !== '23000' && !isUniqueViolation(error)) throw error;
    await rollbackTo(client, 'checkpoint');
    return { final: before, compaction: { ...base, bytesWithSummary, reason: `stale_candidate:${(error as Error).message}` } };
  }
  return { final: after, compaction: { ...base, decision: 'committed', bytesWithSummary, checkpointId } };
}

function newestRevision(state: RunState): number {
  let revision = 0;
  for (const t of state.turns) if (t.revision !== null && t.revision > revision) revision = t.revision;
  return revision;
}
