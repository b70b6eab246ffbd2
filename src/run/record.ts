import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { runBudgetCharge, runBudgetEnsure, runBudgetGet } from '../db/queries/run-budget.ts';
import {
  runCorrectionInsert,
  runCreate,
  runInScopeGet,
  runModelRequestInsert,
  runModelRequestGet,
  runModelTurnInsert,
  runModelTurnOfRequest,
  runRequestGet,
  runRequestInsert,
  runToolUnitDispatch,
  runToolUnitLock,
  runToolUnitSettle,
  runToolUnitsInsert,
  type ToolUnitState,
} from '../db/queries/run-history.ts';
import type { Queryable } from '../db/queryable.ts';
import { runResultInsert, runResultMetaGet } from '../db/queries/run-results.ts';
import { historyErrorFrom, isUniqueViolation, ResultNotFoundError, RunHistoryError, RunNotFoundError } from './run-errors.ts';
import { inTransaction, rollbackTo, savepoint } from '../db/transaction.ts';
import { isCorrectionRace } from '../db/database-errors.ts';
import { requireCount, requireThinking, requireToolCalls, requireUserText, storedText } from './record-input.ts';
import { INT4_MAX, isInt4, isUuid, runIdOf } from './stored.ts';
import type { ResultMeta, ResultRef, RunBudget, Settlement, ThinkingBlock, ToolProposal } from './types.ts';

/**
 * The recording API: what an application calls as its agent loop runs. Every
 * entry is append-only (the database refuses edits); every call checks the
 * Run's scope; replays of the same fact are idempotent where the fact has an
 * identity (the request, a dispatch, a settlement, a model request key).
 */

interface RunAddress {
  pool: pg.Pool;
  runId: string;
  scope: string;
}

async function assertRun(db: Queryable, runId: string, scope: string): Promise<void> {
  if (!(await runInScopeGet(db, runId, scope))) throw new RunNotFoundError(`run ${runId} not found in scope ${scope}`);
}

export interface StartRunOptions {
  pool: pg.Pool;
  scope: string;
  /** The user's initial request, verbatim. */
  request: string;
  /** An existing Run (the application created the sourcebound.runs row). */
  runId?: string;
  /** Or: create a Run (status running) in this conversation. */
  conversationId?: string;
  /** The Run's resources; null or omitted = no limit. Stored once, at the first start. */
  budget?: { requests?: number | null; tokens?: number | null };
}

/**
 * Records a Run's initial request (revision 0) and its budget. Calling it again
 * with the same text returns the same entry. The text is stored well-formed: a
 * lone surrogate (which UTF-8 cannot encode) becomes U+FFFD, as
 * String.prototype.toWellFormed does, and a replay is compared in that form,
 * so replaying such a text is idempotent too.
 * @throws RunNotFoundError when the Run (or conversation) is not in `scope`, or its id is not a uuid.
 * @throws BlankTextError when `request` is empty or only whitespace.
 * @throws RunHistoryError when the Run already has a different request, or neither runId nor conversationId is given.
 */
export async function startRun(options: StartRunOptions): Promise<{ runId: string; seq: number }> {
  const { pool, scope } = options;
  const request = requireUserText(options.request, 'startRun: request');
  const limits = options.budget ?? {};
  // The request limit is an integer column, the token limit a bigint (any safe integer).
  for (const [k, v] of Object.entries(limits)) {
    const max = k === 'requests' ? INT4_MAX : Number.MAX_SAFE_INTEGER;
    if (v !== null && v !== undefined && (!Number.isSafeInteger(v) || v < 0 || v > max))
      throw new RunHistoryError(`startRun: budget.${k} must be an integer from 0 to ${max}, or null`);
  }
  const givenRunId = options.runId === undefined ? undefined : runIdOf(options.runId, scope);
  return inTransaction(pool, async (client) => {
    let runId = givenRunId;
    if (runId !== undefined) {
      await assertRun(client, runId, scope);
    } else {
      if (options.conversationId === undefined) throw new RunHistoryError('startRun: give runId or conversationId');
      if (!isUuid(options.conversationId))
        throw new RunNotFoundError(
          `conversation ${JSON.stringify(String(options.conversationId).slice(0, 80))} not found in scope ${scope}: not a uuid`,
        );
      const created = await runCreate(client, options.conversationId, scope).catch((e) => {
        throw historyErrorFrom(e, 'startRun');
      });
      if (created === null) throw new RunNotFoundError(`conversation ${options.conversationId} not found in scope ${scope}`);
      runId = created;
    }
    const existing = await runRequestGet(client, runId);
    if (existing) {
      if (existing.text !== request) throw new RunHistoryError(`startRun: run ${runId} already has a different initial request`);
      return { runId, seq: existing.seq };
    }
    const seq = await runRequestInsert(client, runId, request).catch((e) => {
      throw historyErrorFrom(e, 'startRun');
    });
    await runBudgetEnsure(client, runId, limits.requests ?? null, limits.tokens ?? null);
    return { runId, seq };
  });
}

/**
 * Records a user correction, verbatim, as the next revision (1, 2, ...).
 * Stored well-formed, like the request: a lone surrogate becomes U+FFFD.
 * @throws BlankTextError when `text` is empty or only whitespace.
 * @throws RunNotFoundError / RunHistoryError (no initial request yet).
 */
export async function recordCorrection(options: RunAddress & { text: string }): Promise<{ seq: number; revision: number }> {
  const { pool, scope } = options;
  const runId = runIdOf(options.runId, scope);
  const text = requireUserText(options.text, 'recordCorrection: text');
  await assertRun(pool, runId, scope);
  // Two corrections at once compute the same revision: the unique index (or the guard, which
  // sees the other's commit) refuses one, and it retries with the next revision.
  for (let attempt = 0; ; attempt++) {
    try {
      return await runCorrectionInsert(pool, runId, text);
    } catch (error) {
      const raced = isUniqueViolation(error) || isCorrectionRace(error);
      if (attempt < 10 && raced) continue;
      throw historyErrorFrom(error, 'recordCorrection');
    }
  }
}

export interface RecordModelTurnOptions extends RunAddress {
  /** The model's text (narration, reasoning it showed, the answer so far). */
  text: string;
  /** The tool calls it proposed, in order. Each becomes a tool unit in state `proposed`. */
  toolCalls?: readonly ToolProposal[];
  /** The key of the model request (recordModelRequest) that produced this turn: one turn per key (recording it again returns that turn). */
  modelRequestKey?: string;
  /** Thinking blocks of an extended-thinking turn, verbatim: sent back before its tool use, as the Messages API requires. */
  thinking?: readonly ThinkingBlock[];
}

/**
 * Records a model turn and its tool proposals. Any JSON tool input and thinking
 * block is kept exactly, a NUL or a lone surrogate included (jsonb refuses
 * both: such a value is stored escaped, see toStoredJson), and sent back so.
 * With `modelRequestKey`, recording the same turn again (a replay after a
 * crash) returns the turn already recorded for that model request.
 * @throws RunHistoryError for a tool call that is not an object with a non-empty id (letters, digits, _ and -) and name,
 * an input that is not a JSON object, a duplicate proposal id, an unknown model request key, a different turn for a model
 * request key that has one, or no initial request yet.
 */
export async function recordModelTurn(options: RecordModelTurnOptions): Promise<{ seq: number }> {
  const { pool, scope } = options;
  const runId = runIdOf(options.runId, scope);
  const text = storedText(options.text, 'recordModelTurn: text');
  const proposals = requireToolCalls(options.toolCalls);
  const thinking = requireThinking(options.thinking);
  const key = options.modelRequestKey ?? null;
  return inTransaction(pool, async (client) => {
    await assertRun(client, runId, scope);
    try {
      if (key !== null) {
        // A replay after a crash (the application could not know whether the turn was committed) returns the
        // turn recorded for that model request: a second copy repeated the model's text in every later request,
        // and one with tool calls was refused as a duplicate id, which the application could not tell from a bug.
        const recorded = await runModelTurnOfRequest(client, runId, String(key));
        if (recorded === undefined) throw new RunHistoryError(`recordModelTurn: no model request ${key} in run ${runId}`);
        if (recorded !== null) {
          if (recorded.text === text && recorded.proposalIds.join('\n') === proposals.map((p) => p.id).join('\n'))
            return { seq: recorded.seq };
          throw new RunHistoryError(`recordModelTurn: model request ${key} already has a different turn (seq ${recorded.seq})`);
        }
      }
      const { seq, modelRequestId } = await runModelTurnInsert(client, runId, text, key, thinking);
      if (key !== null && modelRequestId === null) {
        throw new RunHistoryError(`recordModelTurn: no model request ${key} in run ${runId}`);
      }
      await runToolUnitsInsert(client, runId, seq, proposals);
      return { seq };
    } catch (error) {
      throw historyErrorFrom(error, 'recordModelTurn');
    }
  });
}

export interface RecordModelRequestOptions extends RunAddress {
  /** The application's identity of the request; a second record with the same key is a no-op. */
  requestKey: string;
  /** Size of what was sent (e.g. PrepareReport.bytes). */
  requestBytes: number;
  /** Token usage the provider reported; when unknown, the Run is charged bytes / 3 (never zero). */
  usage?: { inputTokens: number; outputTokens: number } | null;
}

/**
 * Records the receipt of one of the application's own model requests and
 * charges it to the Run's budget (one request and its tokens).
 * @throws RunHistoryError when requestBytes or a usage count is not an integer from 0 to 2147483647 (they are
 * integer columns; a string would be added as text, not charged as a number).
 */
export async function recordModelRequest(options: RecordModelRequestOptions): Promise<{ id: number; charged: boolean }> {
  const { pool, scope, requestKey } = options;
  const runId = runIdOf(options.runId, scope);
  const requestBytes = requireCount(options.requestBytes, 'recordModelRequest: requestBytes');
  const usage =
    options.usage === undefined || options.usage === null
      ? null
      : {
          inputTokens: requireCount(options.usage.inputTokens, 'recordModelRequest: usage.inputTokens'),
          outputTokens: requireCount(options.usage.outputTokens, 'recordModelRequest: usage.outputTokens'),
        };
  return inTransaction(pool, async (client) => {
    await assertRun(client, runId, scope);
    await savepoint(client, 'receipt');
    try {
      const id = await runModelRequestInsert(
        client,
        runId,
        requestKey,
        requestBytes,
        usage?.inputTokens ?? null,
        usage?.outputTokens ?? null,
      );
      await runBudgetEnsure(client, runId, null, null);
      const tokens = usage ? usage.inputTokens + usage.outputTokens : Math.ceil(requestBytes / 3);
      await runBudgetCharge(client, runId, 1, tokens);
      return { id, charged: true };
    } catch (error) {
      if (!isUniqueViolation(error, 'run_model_requests_key')) throw historyErrorFrom(error, 'recordModelRequest');
      await rollbackTo(client, 'receipt');
      return { id: (await runModelRequestGet(client, runId, requestKey))!, charged: false };
    }
  });
}

/**
 * Records that a proposed tool call was dispatched under `dispatchId` (the
 * application's idempotency key for the effect). Idempotent for the same id.
 * @throws RunHistoryError for an unknown proposal, or one dispatched or settled under another identity.
 */
export async function recordToolCall(options: RunAddress & { proposalId: string; dispatchId: string }): Promise<ToolUnitState> {
  const { pool, scope, proposalId, dispatchId } = options;
  const runId = runIdOf(options.runId, scope);
  if (typeof dispatchId !== 'string' || dispatchId === '')
    throw new RunHistoryError('recordToolCall: dispatchId must be a non-empty string');
  return inTransaction(pool, async (client) => {
    await assertRun(client, runId, scope);
    try {
      const done = await runToolUnitDispatch(client, runId, proposalId, dispatchId);
      if (done) return done;
    } catch (error) {
      throw historyErrorFrom(error, 'recordToolCall');
    }
    const unit = await runToolUnitLock(client, runId, proposalId);
    if (!unit) throw new RunHistoryError(`recordToolCall: no tool call ${proposalId} was proposed in run ${runId}`);
    if (unit.dispatchId === dispatchId) return unit;
    throw new RunHistoryError(
      `recordToolCall: tool call ${proposalId} is ${unit.status}${unit.dispatchId ? ` as ${unit.dispatchId}` : ''}`,
    );
  });
}

export interface RecordToolResultOptions extends RunAddress {
  proposalId: string;
  /** Required unless the call was recorded with recordToolCall (or it failed before dispatch). */
  dispatchId?: string;
  settlement: Settlement;
  /** The result body: stored in the result store (so it can be reread) and shown inline while recent. */
  content?: string;
  /** Or: a result already in the store (storeResult); the request then shows only its reference. */
  resultRef?: ResultRef;
  /** Why it failed, or what is known about an unknown effect (a string: it is shown to the model as written). */
  error?: string;
  /** Catalog label for a stored body. */
  label?: string;
}

/**
 * Settles a tool call: its result and settlement, in one unit with the call.
 * Replaying the same settlement is a no-op; a different one is refused.
 * @throws RunHistoryError for an unknown proposal, a second different settlement, a `settled` call without a result,
 * or an `error` that is not a string.
 * @throws ResultNotFoundError when `resultRef` is not a result of this Run (a version that is not an integer from 1 to
 * 2147483647 never is).
 */
export async function recordToolResult(
  options: RecordToolResultOptions,
): Promise<{ status: Settlement; result: ResultMeta | null; replayed: boolean }> {
  const { pool, scope, proposalId, settlement } = options;
  const runId = runIdOf(options.runId, scope);
  if (!['settled', 'failed', 'unknown'].includes(settlement))
    throw new RunHistoryError(`recordToolResult: settlement must be settled, failed or unknown, got ${String(settlement)}`);
  // A plain JS caller's null is an absent value, as for `error` (a null resultRef was destructured: a TypeError).
  const given = (v: unknown) => v !== undefined && v !== null;
  const resultRef = given(options.resultRef) ? options.resultRef : undefined;
  if (given(options.content) && resultRef !== undefined) throw new RunHistoryError('recordToolResult: give content or resultRef, not both');
  if (settlement === 'settled' && !given(options.content) && resultRef === undefined)
    throw new RunHistoryError('recordToolResult: a settled call needs its result (content or resultRef)');
  if (resultRef !== undefined && typeof resultRef !== 'object')
    throw new RunHistoryError('recordToolResult: resultRef must be {resultId, version}');
  const content = given(options.content) ? storedText(options.content, 'recordToolResult: content') : undefined;
  const errorText = options.error === undefined || options.error === null ? null : storedText(options.error, 'recordToolResult: error');
  const label = options.label === undefined || options.label === null ? null : storedText(options.label, 'recordToolResult: label');
  return inTransaction(pool, async (client) => {
    await assertRun(client, runId, scope);
    const unit = await runToolUnitLock(client, runId, proposalId);
    if (!unit) throw new RunHistoryError(`recordToolResult: no tool call ${proposalId} was proposed in run ${runId}`);
    if (unit.status === 'settled' || unit.status === 'failed' || unit.status === 'unknown') {
      if (unit.status === settlement && (options.dispatchId === undefined || options.dispatchId === unit.dispatchId)) {
        const meta = unit.resultId === null ? null : await runResultMetaGet(client, runId, unit.resultId, unit.resultVersion!);
        return { status: unit.status, result: meta && strip(meta), replayed: true };
      }
      throw new RunHistoryError(`recordToolResult: tool call ${proposalId} is already ${unit.status}`);
    }
    if (options.dispatchId !== undefined && unit.dispatchId !== null && unit.dispatchId !== options.dispatchId) {
      throw new RunHistoryError(
        `recordToolResult: tool call ${proposalId} was dispatched as ${unit.dispatchId}, not ${options.dispatchId}`,
      );
    }
    const dispatchId = unit.dispatchId ?? options.dispatchId ?? null;
    if (dispatchId === null && settlement !== 'failed')
      throw new RunHistoryError(`recordToolResult: a ${settlement} call needs its dispatch identity (dispatchId)`);
    let result: ResultMeta | null = null;
    let inline = true;
    try {
      if (content !== undefined) {
        result = strip(await runResultInsert(client, { runId, resultId: randomUUID(), kind: 'tool_result', label, content }));
      } else if (resultRef !== undefined) {
        const { resultId, version } = resultRef;
        const meta = !isUuid(resultId) || !isInt4(version, 1) ? null : await runResultMetaGet(client, runId, resultId, version);
        if (!meta) throw new ResultNotFoundError(`result ${String(resultId)} version ${String(version)} not found in run ${runId}`);
        result = strip(meta);
        inline = false;
      }
      await runToolUnitSettle(client, runId, proposalId, {
        status: settlement,
        dispatchId,
        resultId: result?.resultId ?? null,
        resultVersion: result?.version ?? null,
        inline,
        error: errorText,
      });
    } catch (error) {
      throw historyErrorFrom(error, 'recordToolResult');
    }
    return { status: settlement, result, replayed: false };
  });
}

function strip(row: { resultId: string; version: number; bytes: number; lines: number; sha256: string; label: string | null }): ResultMeta {
  return { resultId: row.resultId, version: row.version, bytes: row.bytes, lines: row.lines, sha256: row.sha256, label: row.label };
}

/** The Run's budget (null when none was recorded: no limits). */
export async function readRunBudget(options: RunAddress): Promise<RunBudget | null> {
  const runId = runIdOf(options.runId, options.scope);
  await assertRun(options.pool, runId, options.scope);
  return runBudgetGet(options.pool, runId);
}
