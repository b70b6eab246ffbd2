import type pg from 'pg';
import { runLockTry } from '../db/queries/run-history.ts';
import { runSummaryRequestsExpire, runSummaryRequestsList, type ReceiptListRow } from '../db/queries/run-receipts.ts';
import type { Summarizer } from '../support/summary-contract.ts';
import { RunNotFoundError } from './run-errors.ts';
import { resolvePolicy } from './policy.ts';
import { runIdOf } from './stored.ts';
import { toAnthropicRequest, type AnthropicRunRequest } from './wire.ts';
import { evaluate, handedOut, loadState, materialize, requestInput } from './assemble.ts';
import type { RequestInput } from './request-slots.ts';
import { inTransaction } from '../db/transaction.ts';
import type { RunCompactionPolicy, RunRequest } from './types.ts';
import type { FitStep, ReferenceMade } from './reports.ts';

export interface RecoverRunContextOptions extends RequestInput {
  pool: pg.Pool;
  runId: string;
  scope: string;
  /** The same policy the Run is prepared with (fitting must be reproduced exactly). */
  policy?: Partial<RunCompactionPolicy>;
  /** Epoch milliseconds, to judge leases. (Default: Date.now) */
  clock?: () => number;
  /**
   * Accepted (with any other prepareRunRequest option) so one options object
   * serves both calls. Never called: recovery makes no model call.
   */
  summarizer?: Summarizer;
}

/**
 * A summary request receipt as recovery reports it: `spent` is null while in
 * flight; `checkpointId` is the checkpoint it produced, when one was committed
 * (even if its acknowledgement was lost).
 */
export type SummaryReceipt = ReceiptListRow;

export interface RecoveryReport {
  runId: string;
  thresholdBytes: number;
  targetBytes: number;
  bytes: number;
  fits: boolean;
  /** Over the threshold: the next prepareRunRequest will consider compaction. */
  needsCompaction: boolean;
  steps: FitStep[];
  references: ReferenceMade[];
  catalog: 'full' | 'compact';
  checkpointsUsed: string[];
  brokenCheckpoints: string[];
  /** Every summary request of the Run, oldest first, as the records say. */
  receipts: SummaryReceipt[];
  /** Receipts still in flight within their lease: their outcome is not known yet, and nothing is sent for them. */
  inFlight: string[];
  /** Receipts found past their lease and settled as unknown now. */
  expiredReceipts: string[];
  /**
   * Tool calls proposed or dispatched but never settled, oldest first: after a
   * crash, settle each (recordToolResult as failed, or unknown when it may have
   * run): work after an open one is never compacted.
   */
  openUnits: OpenUnit[];
}

export interface OpenUnit {
  /** The model turn that proposed it. */
  seq: number;
  proposalId: string;
  tool: string;
  status: 'proposed' | 'dispatched';
  dispatchId: string | null;
}

/**
 * Cold recovery: rebuilds the Run's exact next request from records alone
 * (history, checkpoints, the result store) with no model, tool or network
 * call, and reports every summary request receipt with its settlement. A
 * receipt whose process died stays unknown (settled so once its lease
 * expired); a checkpoint that committed before its acknowledgement was lost
 * is found through its receipt and used. Nothing is ever re-sent here.
 * @throws RunNotFoundError when the Run is not in `scope`.
 */
export async function recoverRunContext(
  options: RecoverRunContextOptions,
): Promise<{ request: RunRequest; body: AnthropicRunRequest; report: RecoveryReport }> {
  const { pool, scope } = options;
  const runId = runIdOf(options.runId, scope);
  const policy = resolvePolicy(options.policy);
  const input = requestInput(options);
  const clock = options.clock ?? Date.now;
  return inTransaction(pool, async (client) => {
    const locked = await runLockTry(client, runId);
    const expired = locked ? await runSummaryRequestsExpire(client, scope, runId, new Date(clock())) : [];
    const state = await loadState(client, runId, scope, policy);
    if (!state) throw new RunNotFoundError(`run ${runId} not found in scope ${scope}`);
    const evaluated = evaluate(state, input, policy);
    // What prepareRunRequest hands out: over the threshold, the newest groups' results by reference too.
    const { projection, fitted } = handedOut(evaluated, policy);
    const receipts: SummaryReceipt[] = (await runSummaryRequestsList(client, runId)).map((r) => ({ ...r }));
    const request = await materialize(client, runId, fitted);
    return {
      request,
      body: toAnthropicRequest(request),
      report: {
        runId,
        thresholdBytes: policy.thresholdBytes,
        targetBytes: policy.targetBytes,
        bytes: fitted.bytes,
        fits: fitted.bytes <= policy.thresholdBytes,
        needsCompaction: evaluated.fitted.bytes > policy.thresholdBytes,
        steps: fitted.steps,
        references: fitted.references,
        catalog: fitted.catalog,
        checkpointsUsed: projection.usedCheckpoints,
        brokenCheckpoints: projection.brokenCheckpoints,
        receipts,
        inFlight: receipts.filter((r) => r.status === 'dispatched').map((r) => r.id),
        expiredReceipts: expired,
        openUnits: state.units
          .filter((u) => u.status === 'proposed' || u.status === 'dispatched')
          .map((u) => ({
            seq: u.turnSeq,
            proposalId: u.proposalId,
            tool: u.tool,
            status: u.status as OpenUnit['status'],
            dispatchId: u.dispatchId,
          })),
      },
    };
  });
}
