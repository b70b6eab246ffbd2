import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { runBudgetCharge, runBudgetEnsure, runBudgetGet } from '../db/queries/run-budget.ts';
import { runCorrectionInsert, runCreate, runInScopeGet, runModelRequestInsert, runModelRequestGet, runModelTurnInsert, runModelTurnOfRequest, runRequestGet, runRequestInsert, runToolUnitDispatch, runToolUnitLock, runToolUnitSettle, runToolUnitsInsert, type ToolUnitState } from '../db/queries/run-history.ts';
import type { Queryable } from '../db/queryable.ts';
import { runResultInsert, runResultMetaGet } from '../db/queries/run-results.ts';
import { BlankTextError, historyErrorFrom, isUniqueViolation, ResultNotFoundError, RunHistoryError, RunNotFoundError } from './run-errors.ts';
import { inTransaction, rollbackTo, savepoint } from '../db/transaction.ts';
import { isCorrectionRace } from '../db/database-errors.ts';
import { ESCAPED_JSON_KEY, INT4_MAX, isInt4, isUuid, runIdOf, toStoredJson, toStoredText } from './stored.ts';
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

function requireText(value: unknown, what: string): string {
  if (typeof value !== 'string') throw new RunHistoryError(`${what} must be a string`);
  return value;
}

/** Text in the form it is stored (toStoredText: a lone surrogate or a NUL becomes U+FFFD). */
function storedText(value: unknown, what: string): string {
  return toStoredText(requireText(value, what));
}

/**
 * User text (the request, a correction) with something in it, in the form it
 * is stored (toStoredText: a lone surrogate or a NUL becomes U+FFFD), so a
 * replay of the request compares what it would store with what is stored. It is carried
 * verbatim into every later request, where an empty text block is refused by
 * the Messages API, and it can never be edited: one blank entry would stop
 * the Run for good. Whitespace is what String.prototype.trim removes (the
 * database checks the same class: the run_turns_user_text_not_blank constraint).
 */
function requireUserText(value: unknown, what: string): string {
  const text = requireText(value, what);
  if (text.trim() === '') throw new BlankTextError(`${what} is empty or only whitespace: it would be an empty text block in every later request`);
  return toStoredText(text);
}

/** A count an `integer` column stores, or RunHistoryError naming it. */
function requireCount(value: unknown, what: string): number {
  if (!isInt4(value)) throw new RunHistoryError(`${what} must be an integer from 0 to ${INT4_MAX}, got ${String(value)}`);
  return value;
}

/**
 * A tool call id the Messages API accepts in `tool_use.id` and
 * `tool_result.tool_use_id` (it answers 400 "String should match pattern
 * '^[a-zA-Z0-9_-]+$'" otherwise). Ids from another provider or a framework
 * (`call:1`, `fn.search#2`) must be mapped by the application first.
 */
const TOOL_USE_ID = /^[a-zA-Z0-9_-]+$/;

/**
 * The tool calls of a model turn, checked, with each input in the form jsonb
 * stores (toStoredJson: a NUL or a lone surrogate in a valid tool call is kept
 * exactly, and read back so by loadState). Every later request carries each
 * call as a `tool_use` block, and the history is never edited: an id or an
 * input the Messages API refuses would make every later request of the Run a
 * 400, so it is refused here, when the application can still map it. An
 * input must be a JSON object (a missing or null one is sent as `{}`).
 */
function requireToolCalls(value: unknown): { id: string; name: string; input: unknown }[] {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) throw new RunHistoryError('recordModelTurn: toolCalls must be an array of {id, name, input}');
  const ids = new Set<string>();
  return value.map((p: unknown, i) => {
    if (p === null || typeof p !== 'object') throw new RunHistoryError(`recordModelTurn: tool call ${i} must be an object {id, name, input}, got ${p === null ? 'null' : typeof p}`);
    const { id, name, input } = p as ToolProposal;
    if (typeof id !== 'string' || id === '' || typeof name !== 'string' || name === '') throw new RunHistoryError('recordModelTurn: every tool call needs a non-empty id and name');
    if (!TOOL_USE_ID.test(id)) throw new RunHistoryError(`recordModelTurn: tool call id ${JSON.stringify(id.slice(0, 80))} is not one the Messages API accepts (letters, digits, _ and - only)`);
    if (ids.has(id)) throw new RunHistoryError(`recordModelTurn: tool call id ${id} appears twice`);
    ids.add(id);
    if (input === undefined || input === null) return { id, name, input: null };
    const stored = storedJson(input, `recordModelTurn: the input of tool call ${id}`);
    if (!isJsonObject(stored)) throw new RunHistoryError(`recordModelTurn: the input of tool call ${id} must be a JSON object, got ${Array.isArray(stored) ? 'an array' : stored === null ? 'null' : typeof stored}`);
    return { id, name, input: stored };
  });
}

/** Whether a stored value (toStoredJson) is a JSON object: an escaped one is an object whose JSON text is one. */
function isJsonObject(stored: unknown): boolean {
  if (stored === null || typeof stored !== 'object' || Array.isArray(stored)) return false;
  const escaped = (stored as Record<string, unknown>)[ESCAPED_JSON_KEY];
  return typeof escaped !== 'string' || Object.keys(stored).length !== 1 || escaped.startsWith('{');
}

/** `value` as toStoredJson stores it; a value that is not JSON (a BigInt, a cycle) is refused by name. */
function storedJson(value: unknown, what: string): unknown {
  try {
    return toStoredJson(value);
  } catch (error) {
    throw new RunHistoryError(`${what} is not JSON: ${(error as Error).message}`, { cause: error });
  }
}

function requireThinking(value: unknown): ThinkingBlock[] | null {
  if (value === undefined || value === null) return null;
  const ok = Array.isArray(value) && value.every((b) => b !== null && typeof b === 'object' && (
    (b.type === 'thinking' && typeof b.thinking === 'string' && typeof b.signature === 'string') ||
    (b.type === 'redacted_thinking' && typeof b.data === 'string')));
  if (!ok) throw new RunHistoryError('recordModelTurn: thinking must be an array of {type: "thinking", thinking, signature} or {type: "redacted_thinking", data} blocks');
  const blocks = (value as ThinkingBlock[]).map((b): ThinkingBlock => b.type === 'thinking' ? { type: 'thinking', thinking: b.thinking, signature: b.signature } : { type: 'redacted_thinking', data: b.data });
  // Stored as jsonb like a tool input: a block with a NUL or a lone surrogate is kept exactly (toStoredJson).
  return toStoredJson(blocks) as ThinkingBlock[];
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
    if (v !== null && v !== undefined && (!Number.isSafeInteger(v) || v < 0 || v > max)) throw new RunHistoryError(`startRun: budget.${k} must be an integer from 0 to ${max}, or null`);
  }
  const givenRunId = options.runId === undefined ? undefined : runIdOf(options.runId, scope);
  return inTransaction(pool, async (client) => {
    let runId = givenRunId;
    if (runId !== undefined) {
      await assertRun(client, runId, scope);
    } else {
      if (options.conversationId === undefined) throw new RunHistoryError('startRun: give runId or conversationId');
      if (!isUuid(options.conversationId)) throw new RunNotFoundError(`conversation ${JSON.stringify(String(options.conversationId).slice(0, 80))} not found in scope ${scope}: not a uuid`);
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
          if (recorded.text === text && recorded.proposalIds.join('\n') === proposals.map((p) => p.id).join('\n')) return { seq: recorded.seq };
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
  const usage = options.usage === undefined || options.usage === null ? null : {
    inputTokens: requireCount(options.usage.inputTokens, 'recordModelRequest: usage.inputTokens'),
    outputTokens: requireCount(options.usage.outputTokens, 'recordModelRequest: usage.outputTokens'),
  };
  return inTransaction(pool, async (client) => {
    await assertRun(client, runId, scope);
    await savepoint(client, 'receipt');
    try {
      const id = await runModelRequestInsert(client, runId, requestKey, requestBytes, usage?.inputTokens ?? null, usage?.outputTokens ?? null);
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
  if (typeof dispatchId !== 'string' || dispatchId === '') throw new RunHistoryError('recordToolCall: dispatchId must be a non-empty string');
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
    throw new RunHistoryError(`recordToolCall: tool call ${proposalId} is ${unit.status}${unit.dispatchId ? ` as ${unit.dispatchId}` : ''}`);
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
export async function recordToolResult(options: RecordToolResultOptions): Promise<{ status: Settlement; result: ResultMeta | null; replayed: boolean }> {
  const { pool, scope, proposalId, settlement } = options;
  const runId = runIdOf(options.runId, scope);
  if (!['settled', 'failed', 'unknown'].includes(settlement)) throw new RunHistoryError(`recordToolResult: settlement must be settled, failed or unknown, got ${String(settlement)}`);
  // A plain JS caller's null is an absent value, as for `error` (a null resultRef was destructured: a TypeError).
  const given = (v: unknown) => v !== undefined && v !== null;
  const resultRef = given(options.resultRef) ? options.resultRef : undefined;
  if (given(options.content) && resultRef !== undefined) throw new RunHistoryError('recordToolResult: give content or resultRef, not both');
  if (settlement === 'settled' && !given(options.content) && resultRef === undefined) throw new RunHistoryError('recordToolResult: a settled call needs its result (content or resultRef)');
  if (resultRef !== undefined && typeof resultRef !== 'object') throw new RunHistoryError('recordToolResult: resultRef must be {resultId, version}');
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
      throw new RunHistoryError(`recordToolResult: tool call ${proposalId} was dispatched as ${unit.dispatchId}, not ${options.dispatchId}`);
    }
    const dispatchId = unit.dispatchId ?? options.dispatchId ?? null;
    if (dispatchId === null && settlement !== 'failed') throw new RunHistoryError(`recordToolResult: a ${settlement} call needs its dispatch identity (dispatchId)`);
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
        status: settlement, dispatchId, resultId: result?.resultId ?? null, resultVersion: result?.version ?? null, inline, error: errorText,
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
