/**
 * Run history statements of run compaction (src/run): Runs, the per-Run lock, turns (request,
 * corrections, model turns), tool units and the application's model request receipts.
 * Callers pass a pool or a checked-out client; statements that must run together are run by
 * the caller inside one BEGIN ... COMMIT on one client.
 * Tables: src/db/schema/runs-history.ts; guards: the run_*_guard triggers.
 */
import type pg from 'pg';
import type { Queryable } from '../queryable.ts';
import { LOCK_NS } from '../locks.ts';

/** Anything that can run a query: a pool or a checked-out client. */
/** A thinking block of an extended-thinking model turn, kept verbatim (the Messages API requires it with tool use). */
export type ThinkingBlock = { type: 'thinking'; thinking: string; signature: string } | { type: 'redacted_thinking'; data: string };

// ---------------------------------------------------------------------------
// Row shapes (camelCase, as the statements return them)

export interface RunRow {
  id: string;
  conversationId: string;
  scope: string;
  status: string;
}

export interface TurnRow {
  seq: number;
  kind: 'request' | 'correction' | 'model';
  revision: number | null;
  text: string;
  /** Thinking blocks of a model turn, when it had any. */
  thinking?: ThinkingBlock[];
}

export interface UnitRow {
  turnSeq: number;
  position: number;
  proposalId: string;
  tool: string;
  input: unknown;
  status: 'proposed' | 'dispatched' | 'settled' | 'failed' | 'unknown';
  dispatchId: string | null;
  resultId: string | null;
  resultVersion: number | null;
  /** Shown inline (true) or only by reference (externalized). */
  inline: boolean;
  error: string | null;
  bytes: number | null;
  lines: number | null;
  /** Bytes of the body as a JSON string; the body itself is fetched only if it is shown. */
  jsonBytes: number | null;
  sha256: string | null;
  label: string | null;
}

// ---------------------------------------------------------------------------
// Locks

/**
 * Tries the transaction-scoped lock that serializes preparers of one Run.
 * Must run inside BEGIN on the client that will COMMIT (a session lock taken
 * through a pool can leak: its unlock may land on another connection).
 */
export async function runLockTry(client: Pick<pg.PoolClient, 'query'>, runId: string): Promise<boolean> {
  const { rows } = await client.query<{ locked: boolean }>('select pg_try_advisory_xact_lock($1, hashtext($2)) as locked', [
    LOCK_NS.runCompaction,
    runId,
  ]);
  return rows[0]!.locked;
}

/** Waits for the same lock; used only to settle a receipt this process owns (a settlement must not be skipped). */
export async function runLockWait(client: Pick<pg.PoolClient, 'query'>, runId: string): Promise<void> {
  await client.query('select pg_advisory_xact_lock($1, hashtext($2))', [LOCK_NS.runCompaction, runId]);
}

// ---------------------------------------------------------------------------
// Runs

/** The Run when it exists in `scope`, else null. */
export async function runInScopeGet(db: Queryable, runId: string, scope: string): Promise<RunRow | null> {
  const { rows } = await db.query<RunRow>(
    `select r.id, r.conversation_id as "conversationId", c.scope, r.status
     from sourcebound.runs r join sourcebound.conversations c on c.id = r.conversation_id
     where r.id = $1 and c.scope = $2`,
    [runId, scope],
  );
  return rows[0] ?? null;
}

/** Creates a Run (status running) in a conversation of `scope`; null when the conversation is not in that scope. */
export async function runCreate(db: Queryable, conversationId: string, scope: string): Promise<string | null> {
  const { rows } = await db.query<{ id: string }>(
    `insert into sourcebound.runs (conversation_id, status)
     select c.id, 'running' from sourcebound.conversations c where c.id = $1 and c.scope = $2
     returning id`,
    [conversationId, scope],
  );
  return rows[0]?.id ?? null;
}

// ---------------------------------------------------------------------------
// History

/** Inserts the initial request (revision 0). */
export async function runRequestInsert(db: Queryable, runId: string, text: string): Promise<number> {
  const { rows } = await db.query<{ seq: number }>(
    `insert into sourcebound.run_turns (run_id, kind, revision, text) values ($1, 'request', 0, $2) returning seq::float8 as seq`,
    [runId, text],
  );
  return rows[0]!.seq;
}

/** The initial request of a Run, if recorded. */
export async function runRequestGet(db: Queryable, runId: string): Promise<{ seq: number; text: string } | null> {
  const { rows } = await db.query<{ seq: number; text: string }>(
    `select seq::float8 as seq, text from sourcebound.run_turns where run_id = $1 and kind = 'request'`,
    [runId],
  );
  return rows[0] ?? null;
}

/** Inserts the next correction; its revision is the Run's newest + 1 (the guard refuses a Run without a request). */
export async function runCorrectionInsert(db: Queryable, runId: string, text: string): Promise<{ seq: number; revision: number }> {
  const { rows } = await db.query<{ seq: number; revision: number }>(
    `insert into sourcebound.run_turns (run_id, kind, revision, text)
     select $1, 'correction', coalesce(max(t.revision), 0) + 1, $2
     from sourcebound.run_turns t where t.run_id = $1 and t.revision is not null
     returning seq::float8 as seq, revision`,
    [runId, text],
  );
  return rows[0]!;
}

/** Inserts a model turn; `modelRequestKey` links the receipt of the request that produced it. */
export async function runModelTurnInsert(
  db: Queryable,
  runId: string,
  text: string,
  modelRequestKey: string | null,
  thinking: readonly ThinkingBlock[] | null,
): Promise<{ seq: number; modelRequestId: number | null }> {
  const { rows } = await db.query<{ seq: number; modelRequestId: number | null }>(
    `insert into sourcebound.run_turns (run_id, kind, text, model_request_id, thinking)
     values ($1, 'model', $2, (select id from sourcebound.run_model_requests where run_id = $1 and request_key = $3), $4::jsonb)
     returning seq::float8 as seq, model_request_id::float8 as "modelRequestId"`,
    [runId, text, modelRequestKey, thinking === null || thinking.length === 0 ? null : JSON.stringify(thinking)],
  );
  return rows[0]!;
}

/**
 * The model turn already recorded for a model request key, with its proposal
 * ids in order; null when the key has no turn yet; undefined when the Run has
 * no model request of that key. Locks the request's receipt (FOR UPDATE) for
 * the rest of the transaction, so two recordings of one key are serialized.
 */
export async function runModelTurnOfRequest(
  db: Queryable,
  runId: string,
  requestKey: string,
): Promise<{ seq: number; text: string; proposalIds: string[] } | null | undefined> {
  const { rows: receipt } = await db.query<{ id: string }>(
    'select id from sourcebound.run_model_requests where run_id = $1 and request_key = $2 for update',
    [runId, requestKey],
  );
  if (receipt.length === 0) return undefined;
  const { rows } = await db.query<{ seq: number; text: string; proposalIds: string[] }>(
    `select t.seq::float8 as seq, t.text,
       coalesce((select array_agg(u.proposal_id order by u.position) from sourcebound.run_tool_units u
                 where u.run_id = t.run_id and u.turn_seq = t.seq), '{}') as "proposalIds"
     from sourcebound.run_turns t where t.run_id = $1 and t.model_request_id = $2 order by t.seq limit 1`,
    [runId, receipt[0]!.id],
  );
  return rows[0] ?? null;
}

/** Inserts a model turn's proposals as `proposed` tool units, in order. */
export async function runToolUnitsInsert(
  db: Queryable,
  runId: string,
  turnSeq: number,
  proposals: readonly { id: string; name: string; input: unknown }[],
): Promise<void> {
  if (proposals.length === 0) return;
  await db.query(
    `insert into sourcebound.run_tool_units (run_id, turn_seq, position, proposal_id, tool_name, input)
     select $1, $2, p.ord - 1, p.id, p.name, p.input
     from unnest($3::text[], $4::text[], $5::jsonb[]) with ordinality as p(id, name, input, ord)`,
    [runId, turnSeq, proposals.map((p) => p.id), proposals.map((p) => p.name), proposals.map((p) => JSON.stringify(p.input ?? null))],
  );
}

export interface ToolUnitState {
  turnSeq: number;
  proposalId: string;
  tool: string;
  status: UnitRow['status'];
  dispatchId: string | null;
  resultId: string | null;
  resultVersion: number | null;
  error: string | null;
}

const UNIT_COLUMNS = `turn_seq::float8 as "turnSeq", proposal_id as "proposalId", tool_name as tool, status,
  dispatch_id as "dispatchId", result_id as "resultId", result_version as "resultVersion", error`;

/** A tool unit, locked for the rest of the transaction (FOR UPDATE). */
export async function runToolUnitLock(db: Queryable, runId: string, proposalId: string): Promise<ToolUnitState | null> {
  const { rows } = await db.query<ToolUnitState>(
    `select ${UNIT_COLUMNS} from sourcebound.run_tool_units where run_id = $1 and proposal_id = $2 for update`,
    [runId, proposalId],
  );
  return rows[0] ?? null;
}

/** Marks a proposed unit dispatched under `dispatchId`; null when it was not `proposed`. */
export async function runToolUnitDispatch(
  db: Queryable,
  runId: string,
  proposalId: string,
  dispatchId: string,
): Promise<ToolUnitState | null> {
  const { rows } = await db.query<ToolUnitState>(
    `update sourcebound.run_tool_units set status = 'dispatched', dispatch_id = $3, dispatched_at = now()
     where run_id = $1 and proposal_id = $2 and status = 'proposed'
     returning ${UNIT_COLUMNS}`,
    [runId, proposalId, dispatchId],
  );
  return rows[0] ?? null;
}

export interface ToolUnitSettlement {
  status: 'settled' | 'failed' | 'unknown';
  dispatchId: string | null;
  resultId: string | null;
  resultVersion: number | null;
  inline: boolean;
  error: string | null;
}

/** Settles an open unit (proposed or dispatched); null when it was not open. */
export async function runToolUnitSettle(
  db: Queryable,
  runId: string,
  proposalId: string,
  s: ToolUnitSettlement,
): Promise<ToolUnitState | null> {
  const { rows } = await db.query<ToolUnitState>(
    `update sourcebound.run_tool_units
     set status = $3, dispatch_id = coalesce(dispatch_id, $4), result_id = $5, result_version = $6,
         result_inline = $7, error = $8, settled_at = now(),
         dispatched_at = coalesce(dispatched_at, case when $4::text is not null then now() end)
     where run_id = $1 and proposal_id = $2 and status in ('proposed', 'dispatched')
     returning ${UNIT_COLUMNS}`,
    [runId, proposalId, s.status, s.dispatchId, s.resultId, s.resultVersion, s.inline, s.error],
  );
  return rows[0] ?? null;
}

/** Inserts a receipt of the application's model request. */
export async function runModelRequestInsert(
  db: Queryable,
  runId: string,
  requestKey: string,
  requestBytes: number,
  inputTokens: number | null,
  outputTokens: number | null,
): Promise<number> {
  const { rows } = await db.query<{ id: number }>(
    `insert into sourcebound.run_model_requests (run_id, request_key, request_bytes, input_tokens, output_tokens)
     values ($1, $2, $3, $4, $5) returning id::float8 as id`,
    [runId, requestKey, requestBytes, inputTokens, outputTokens],
  );
  return rows[0]!.id;
}

/** The id of a model request receipt by its key. */
export async function runModelRequestGet(db: Queryable, runId: string, requestKey: string): Promise<number | null> {
  const { rows } = await db.query<{ id: number }>(
    'select id::float8 as id from sourcebound.run_model_requests where run_id = $1 and request_key = $2',
    [runId, requestKey],
  );
  return rows[0]?.id ?? null;
}
