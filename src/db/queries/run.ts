/**
 * Every SQL statement of run compaction (src/run), named noun-first. Callers
 * pass a pool or a checked-out client; statements that must run together are
 * run by the caller inside one BEGIN ... COMMIT on one client.
 * Tables: src/db/schema/runs-history.ts; guards: migrations 0007-0011.
 */
import type pg from 'pg';
import { LOCK_NS } from '../locks.ts';

/** Anything that can run a query: a pool or a checked-out client. */
export type Queryable = Pick<pg.Pool, 'query'> | Pick<pg.PoolClient, 'query'>;

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
}

export interface CatalogRow {
  resultId: string;
  version: number;
  bytes: number;
  lines: number;
  sha256: string;
  label: string | null;
}

export interface BudgetRow {
  requestsLimit: number | null;
  tokensLimit: number | null;
  requestsUsed: number;
  tokensUsed: number;
  requestsReserved: number;
  tokensReserved: number;
}

export type ReceiptStatus = 'dispatched' | 'ok' | 'invalid' | 'deferred' | 'unknown' | 'config';

export interface ReceiptRow {
  id: string;
  identityKey: string;
  attempt: number;
  predecessorId: string | null;
  fromSeq: number;
  toSeq: number;
  compactedSeqs: number[];
  sourceHash: string;
  model: string;
  promptVersion: string;
  status: ReceiptStatus;
  spent: boolean | null;
  reason: string | null;
  summary: string | null;
  answerModel: string | null;
  notBefore: string | null;
  leaseExpiresAt: string;
  checkpointId: string | null;
}

/** Everything a projection needs, read in one statement (one snapshot). */
export interface RunState {
  run: RunRow;
  turns: TurnRow[];
  units: UnitRow[];
  checkpoints: CheckpointRow[];
  catalog: CatalogRow[];
  budget: BudgetRow | null;
  /** Receipts in flight, and every receipt made on top of the newest checkpoint. */
  receipts: ReceiptRow[];
}

// ---------------------------------------------------------------------------
// Locks

/**
 * Tries the transaction-scoped lock that serializes preparers of one Run.
 * Must run inside BEGIN on the client that will COMMIT (a session lock taken
 * through a pool can leak: its unlock may land on another connection).
 */
export async function runLockTry(client: Pick<pg.PoolClient, 'query'>, runId: string): Promise<boolean> {
  const { rows } = await client.query<{ locked: boolean }>(
    'select pg_try_advisory_xact_lock($1, hashtext($2)) as locked', [LOCK_NS.runCompaction, runId]);
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
     where r.id = $1 and c.scope = $2`, [runId, scope]);
  return rows[0] ?? null;
}

/** Creates a Run (status running) in a conversation of `scope`; null when the conversation is not in that scope. */
export async function runCreate(db: Queryable, conversationId: string, scope: string): Promise<string | null> {
  const { rows } = await db.query<{ id: string }>(
    `insert into sourcebound.runs (conversation_id, status)
     select c.id, 'running' from sourcebound.conversations c where c.id = $1 and c.scope = $2
     returning id`, [conversationId, scope]);
  return rows[0]?.id ?? null;
}

const STATE_SQL = `
with r as (
  select r.id, r.conversation_id, c.scope, r.status
  from sourcebound.runs r join sourcebound.conversations c on c.id = r.conversation_id
  where r.id = $1 and c.scope = $2
), cp as (
  -- Bodies are not read here: projection works on sizes, and only the bodies shown are fetched (runResultBodies).
  select k.* from sourcebound.run_checkpoints k where k.run_id = (select id from r)
), last_cp as (
  select id, to_seq from cp order by segment desc limit 1
)
select
  (select json_build_object('id', id, 'conversationId', conversation_id, 'scope', scope, 'status', status) from r) as run,
  (select coalesce(json_agg(json_build_object(
       'turnSeq', u.turn_seq, 'position', u.position, 'proposalId', u.proposal_id, 'tool', u.tool_name, 'input', u.input,
       'status', u.status, 'dispatchId', u.dispatch_id, 'resultId', u.result_id, 'resultVersion', u.result_version,
       'inline', u.result_inline, 'error', u.error, 'bytes', x.byte_size, 'lines', x.line_count, 'sha256', x.sha256,
       'label', x.label, 'jsonBytes', x.json_bytes)
     order by u.turn_seq, u.position), '[]')
     from sourcebound.run_tool_units u
     left join sourcebound.run_results x on x.id = u.result_id and x.version = u.result_version
     where u.run_id = (select id from r)) as units,
  (select coalesce(json_agg(json_build_object(
       'id', k.id, 'segment', k.segment, 'predecessorId', k.predecessor_id, 'fromSeq', k.from_seq, 'toSeq', k.to_seq,
       'compactedSeqs', k.compacted_seqs, 'sourceHashes', k.source_hashes, 'sourceHash', k.source_hash,
       'hashVersion', k.hash_version, 'toolResultRefs', k.tool_result_refs, 'summary', k.summary,
       'summaryRequestId', k.summary_request_id, 'correctionRevision', k.correction_revision) order by k.segment), '[]')
     from cp k) as checkpoints,
  (select coalesce(json_agg(json_build_object(
       'resultId', x.id, 'version', x.version, 'bytes', x.byte_size, 'lines', x.line_count, 'sha256', x.sha256, 'label', x.label)
     order by x.created_at, x.id, x.version), '[]')
     from sourcebound.run_results x where x.run_id = (select id from r) and x.kind = 'external') as catalog,
  (select json_build_object('requestsLimit', b.requests_limit, 'tokensLimit', b.tokens_limit, 'requestsUsed', b.requests_used,
       'tokensUsed', b.tokens_used, 'requestsReserved', b.requests_reserved, 'tokensReserved', b.tokens_reserved)
     from sourcebound.run_budgets b where b.run_id = (select id from r)) as budget,
  (select coalesce(json_agg(json_build_object(
       'id', s.id, 'identityKey', s.identity_key, 'attempt', s.attempt, 'predecessorId', s.predecessor_id,
       'fromSeq', s.from_seq, 'toSeq', s.to_seq, 'compactedSeqs', s.compacted_seqs, 'sourceHash', s.source_hash,
       'model', s.model, 'promptVersion', s.prompt_version, 'status', s.status, 'spent', s.spent, 'reason', s.reason,
       'summary', s.summary, 'answerModel', s.answer_model, 'notBefore', s.not_before, 'leaseExpiresAt', s.lease_expires_at,
       'checkpointId', (select k.id from cp k where k.summary_request_id = s.id)) order by s.dispatched_at, s.attempt), '[]')
     from sourcebound.run_summary_requests s
     where s.run_id = (select id from r)
       and (s.status = 'dispatched' or s.predecessor_id is not distinct from (select id from last_cp))) as receipts`;

/**
 * The Run's whole projection input; null when the Run is not in `scope`.
 *
 * Two statements, turns first: texts travel as plain rows (PostgreSQL's JSON
 * escaping of large texts costs more than the rest of the load), everything
 * else as one JSON row. History is append-only, so reading turns first and
 * then dropping what is newer than them gives a consistent view: units of
 * unread turns, and checkpoints over unread turns (committed meanwhile by a
 * preparer holding the lock), are left out.
 */
export async function runStateLoad(db: Queryable, runId: string, scope: string): Promise<RunState | null> {
  const { rows: turns } = await db.query<TurnRow>(
    `select t.seq::float8 as seq, t.kind, t.revision, t.text
     from sourcebound.run_turns t
     where t.run_id = $1 and exists (
       select 1 from sourcebound.runs r join sourcebound.conversations c on c.id = r.conversation_id
       where r.id = $1 and c.scope = $2)
     order by t.seq`, [runId, scope]);
  const { rows } = await db.query<{
    run: RunRow | null; units: UnitRow[]; checkpoints: CheckpointRow[];
    catalog: CatalogRow[]; budget: BudgetRow | null; receipts: ReceiptRow[];
  }>(STATE_SQL, [runId, scope]);
  const row = rows[0];
  if (!row || !row.run) return null;
  const newest = turns.at(-1)?.seq ?? 0;
  return {
    run: row.run,
    turns,
    units: row.units.filter((u) => u.turnSeq <= newest),
    checkpoints: row.checkpoints.filter((c) => c.toSeq <= newest),
    catalog: row.catalog,
    budget: row.budget,
    receipts: row.receipts,
  };
}

// ---------------------------------------------------------------------------
// History

/** Inserts the initial request (revision 0). */
export async function runRequestInsert(db: Queryable, runId: string, text: string): Promise<number> {
  const { rows } = await db.query<{ seq: number }>(
    `insert into sourcebound.run_turns (run_id, kind, revision, text) values ($1, 'request', 0, $2) returning seq::float8 as seq`,
    [runId, text]);
  return rows[0]!.seq;
}

/** The initial request of a Run, if recorded. */
export async function runRequestGet(db: Queryable, runId: string): Promise<{ seq: number; text: string } | null> {
  const { rows } = await db.query<{ seq: number; text: string }>(
    `select seq::float8 as seq, text from sourcebound.run_turns where run_id = $1 and kind = 'request'`, [runId]);
  return rows[0] ?? null;
}

/** Inserts the next correction; its revision is the Run's newest + 1 (the guard refuses a Run without a request). */
export async function runCorrectionInsert(db: Queryable, runId: string, text: string): Promise<{ seq: number; revision: number }> {
  const { rows } = await db.query<{ seq: number; revision: number }>(
    `insert into sourcebound.run_turns (run_id, kind, revision, text)
     select $1, 'correction', coalesce(max(t.revision), 0) + 1, $2
     from sourcebound.run_turns t where t.run_id = $1 and t.revision is not null
     returning seq::float8 as seq, revision`, [runId, text]);
  return rows[0]!;
}

/** Inserts a model turn; `modelRequestKey` links the receipt of the request that produced it. */
export async function runModelTurnInsert(db: Queryable, runId: string, text: string, modelRequestKey: string | null): Promise<{ seq: number; modelRequestId: number | null }> {
  const { rows } = await db.query<{ seq: number; modelRequestId: number | null }>(
    `insert into sourcebound.run_turns (run_id, kind, text, model_request_id)
     values ($1, 'model', $2, (select id from sourcebound.run_model_requests where run_id = $1 and request_key = $3))
     returning seq::float8 as seq, model_request_id::float8 as "modelRequestId"`, [runId, text, modelRequestKey]);
  return rows[0]!;
}

/** Inserts a model turn's proposals as `proposed` tool units, in order. */
export async function runToolUnitsInsert(db: Queryable, runId: string, turnSeq: number, proposals: readonly { id: string; name: string; input: unknown }[]): Promise<void> {
  if (proposals.length === 0) return;
  await db.query(
    `insert into sourcebound.run_tool_units (run_id, turn_seq, position, proposal_id, tool_name, input)
     select $1, $2, p.ord - 1, p.id, p.name, p.input
     from unnest($3::text[], $4::text[], $5::jsonb[]) with ordinality as p(id, name, input, ord)`,
    [runId, turnSeq, proposals.map((p) => p.id), proposals.map((p) => p.name), proposals.map((p) => JSON.stringify(p.input ?? null))]);
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
    `select ${UNIT_COLUMNS} from sourcebound.run_tool_units where run_id = $1 and proposal_id = $2 for update`, [runId, proposalId]);
  return rows[0] ?? null;
}

/** Marks a proposed unit dispatched under `dispatchId`; null when it was not `proposed`. */
export async function runToolUnitDispatch(db: Queryable, runId: string, proposalId: string, dispatchId: string): Promise<ToolUnitState | null> {
  const { rows } = await db.query<ToolUnitState>(
    `update sourcebound.run_tool_units set status = 'dispatched', dispatch_id = $3, dispatched_at = now()
     where run_id = $1 and proposal_id = $2 and status = 'proposed'
     returning ${UNIT_COLUMNS}`, [runId, proposalId, dispatchId]);
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
export async function runToolUnitSettle(db: Queryable, runId: string, proposalId: string, s: ToolUnitSettlement): Promise<ToolUnitState | null> {
  const { rows } = await db.query<ToolUnitState>(
    `update sourcebound.run_tool_units
     set status = $3, dispatch_id = coalesce(dispatch_id, $4), result_id = $5, result_version = $6,
         result_inline = $7, error = $8, settled_at = now(),
         dispatched_at = coalesce(dispatched_at, case when $4::text is not null then now() end)
     where run_id = $1 and proposal_id = $2 and status in ('proposed', 'dispatched')
     returning ${UNIT_COLUMNS}`,
    [runId, proposalId, s.status, s.dispatchId, s.resultId, s.resultVersion, s.inline, s.error]);
  return rows[0] ?? null;
}

/** Inserts a receipt of the application's model request. */
export async function runModelRequestInsert(db: Queryable, runId: string, requestKey: string, requestBytes: number, inputTokens: number | null, outputTokens: number | null): Promise<number> {
  const { rows } = await db.query<{ id: number }>(
    `insert into sourcebound.run_model_requests (run_id, request_key, request_bytes, input_tokens, output_tokens)
     values ($1, $2, $3, $4, $5) returning id::float8 as id`, [runId, requestKey, requestBytes, inputTokens, outputTokens]);
  return rows[0]!.id;
}

/** The id of a model request receipt by its key. */
export async function runModelRequestGet(db: Queryable, runId: string, requestKey: string): Promise<number | null> {
  const { rows } = await db.query<{ id: number }>(
    'select id::float8 as id from sourcebound.run_model_requests where run_id = $1 and request_key = $2', [runId, requestKey]);
  return rows[0]?.id ?? null;
}

// ---------------------------------------------------------------------------
// Results

/** Stores a new version of `resultId` (version 1 when new); size, lines and hash are computed by the database. */
export async function runResultInsert(db: Queryable, r: { runId: string; resultId: string; kind: 'external' | 'tool_result'; label: string | null; content: string }): Promise<CatalogRow> {
  const { rows } = await db.query<CatalogRow>(
    `insert into sourcebound.run_results (id, version, run_id, kind, label, content)
     values ($1, coalesce((select max(version) + 1 from sourcebound.run_results where id = $1), 1), $2, $3, $4, $5)
     returning id as "resultId", version, byte_size as bytes, line_count as lines, sha256, label`,
    [r.resultId, r.runId, r.kind, r.label, r.content]);
  return rows[0]!;
}

/** The bodies of the given result versions of a Run, keyed `id:version`. */
export async function runResultBodies(db: Queryable, runId: string, refs: readonly { resultId: string; version: number }[]): Promise<Map<string, string>> {
  const bodies = new Map<string, string>();
  if (refs.length === 0) return bodies;
  const { rows } = await db.query<{ id: string; version: number; content: string }>(
    `select x.id, x.version, x.content from sourcebound.run_results x
     join unnest($2::uuid[], $3::int[]) as w(id, version) on w.id = x.id and w.version = x.version
     where x.run_id = $1`, [runId, refs.map((r) => r.resultId), refs.map((r) => r.version)]);
  for (const r of rows) bodies.set(`${r.id}:${r.version}`, r.content);
  return bodies;
}

/** The first `chars` characters of the given result versions of a Run, keyed `id:version`. */
export async function runResultExcerpts(db: Queryable, runId: string, refs: readonly { resultId: string; version: number }[], chars: number): Promise<Map<string, string>> {
  const excerpts = new Map<string, string>();
  if (refs.length === 0) return excerpts;
  const { rows } = await db.query<{ id: string; version: number; excerpt: string }>(
    `select x.id, x.version, left(x.content, $4) as excerpt from sourcebound.run_results x
     join unnest($2::uuid[], $3::int[]) as w(id, version) on w.id = x.id and w.version = x.version
     where x.run_id = $1`, [runId, refs.map((r) => r.resultId), refs.map((r) => r.version), chars]);
  for (const r of rows) excerpts.set(`${r.id}:${r.version}`, r.excerpt);
  return excerpts;
}

/** Metadata of one result version of a Run. */
export async function runResultMetaGet(db: Queryable, runId: string, resultId: string, version: number): Promise<(CatalogRow & { kind: string }) | null> {
  const { rows } = await db.query<CatalogRow & { kind: string }>(
    `select id as "resultId", version, byte_size as bytes, line_count as lines, sha256, label, kind
     from sourcebound.run_results where run_id = $1 and id = $2 and version = $3`, [runId, resultId, version]);
  return rows[0] ?? null;
}

export type ResultSlice =
  | { kind: 'all' }
  | { kind: 'bytes'; start: number; end: number }
  | { kind: 'lines'; from: number; to: number };

/** A result version (whole, a byte slice as raw bytes, or lines from..to, 1-based inclusive) of a Run in `scope`. */
export async function runResultRead(db: Queryable, runId: string, scope: string, resultId: string, version: number, slice: ResultSlice): Promise<(CatalogRow & { text: string | null; raw: Buffer | null }) | null> {
  const { rows } = await db.query<CatalogRow & { text: string | null; raw: Buffer | null }>(
    `select x.id as "resultId", x.version, x.byte_size as bytes, x.line_count as lines, x.sha256, x.label,
       case $5::text
         when 'all' then x.content
         when 'lines' then array_to_string((string_to_array(x.content, E'\\n'))[$6::int:$7::int], E'\\n')
       end as text,
       case when $5::text = 'bytes' then substring(convert_to(x.content, 'UTF8') from $6::int + 1 for greatest($7::int - $6::int, 0)) end as raw
     from sourcebound.run_results x
     join sourcebound.runs r on r.id = x.run_id
     join sourcebound.conversations c on c.id = r.conversation_id
     where x.run_id = $1 and c.scope = $2 and x.id = $3 and x.version = $4`,
    [runId, scope, resultId, version, slice.kind,
      slice.kind === 'bytes' ? slice.start : slice.kind === 'lines' ? slice.from : null,
      slice.kind === 'bytes' ? slice.end : slice.kind === 'lines' ? slice.to : null]);
  return rows[0] ?? null;
}

/** The newest version of every result of a Run (for listing). */
export async function runResultsList(db: Queryable, runId: string): Promise<(CatalogRow & { kind: string })[]> {
  const { rows } = await db.query<CatalogRow & { kind: string }>(
    `select id as "resultId", version, byte_size as bytes, line_count as lines, sha256, label, kind
     from sourcebound.run_results where run_id = $1 order by created_at, id, version`, [runId]);
  return rows;
}

// ---------------------------------------------------------------------------
// Budget

/** Creates the Run's budget row (null limits = unlimited); keeps an existing one. */
export async function runBudgetEnsure(db: Queryable, runId: string, requestsLimit: number | null, tokensLimit: number | null): Promise<void> {
  await db.query(
    `insert into sourcebound.run_budgets (run_id, requests_limit, tokens_limit) values ($1, $2, $3)
     on conflict (run_id) do nothing`, [runId, requestsLimit, tokensLimit]);
}

export async function runBudgetGet(db: Queryable, runId: string): Promise<BudgetRow | null> {
  const { rows } = await db.query<BudgetRow>(
    `select requests_limit as "requestsLimit", tokens_limit::float8 as "tokensLimit", requests_used as "requestsUsed",
       tokens_used::float8 as "tokensUsed", requests_reserved as "requestsReserved", tokens_reserved::float8 as "tokensReserved"
     from sourcebound.run_budgets where run_id = $1`, [runId]);
  return rows[0] ?? null;
}

/**
 * Reserves `requests` and `tokens`, only if at least `keepRequests` and
 * `keepTokens` stay available afterwards (the finalization reserve). One
 * conditional UPDATE: two reservations can never both take the last of it.
 */
export async function runBudgetReserve(db: Queryable, runId: string, requests: number, tokens: number, keepRequests: number, keepTokens: number): Promise<boolean> {
  const { rowCount } = await db.query(
    `update sourcebound.run_budgets
     set requests_reserved = requests_reserved + $2, tokens_reserved = tokens_reserved + $3, updated_at = now()
     where run_id = $1
       and (requests_limit is null or requests_limit - requests_used - requests_reserved - $2 >= $4)
       and (tokens_limit is null or tokens_limit - tokens_used - tokens_reserved - $3 >= $5)`,
    [runId, requests, tokens, keepRequests, keepTokens]);
  return rowCount === 1;
}

/** Charges what the application's own model request used (it was already sent: never refused). */
export async function runBudgetCharge(db: Queryable, runId: string, requests: number, tokens: number): Promise<void> {
  await db.query(
    `update sourcebound.run_budgets set requests_used = requests_used + $2, tokens_used = tokens_used + $3, updated_at = now()
     where run_id = $1`, [runId, requests, tokens]);
}

// ---------------------------------------------------------------------------
// Summary requests (receipts) and checkpoints

export interface ReceiptInsert {
  runId: string;
  conversationId: string;
  scope: string;
  identityKey: string;
  predecessorId: string | null;
  fromSeq: number;
  toSeq: number;
  compactedSeqs: number[];
  sourceHash: string;
  hashVersion: number;
  model: string;
  promptVersion: string;
  maxChars: number;
  inputBytes: number;
  reservedRequests: number;
  reservedTokens: number;
  leaseExpiresAt: Date;
}

/** Writes a receipt as `dispatched`, numbered after the identity's earlier dispatches. */
export async function runSummaryRequestInsert(db: Queryable, r: ReceiptInsert): Promise<{ id: string; attempt: number }> {
  const { rows } = await db.query<{ id: string; attempt: number }>(
    `insert into sourcebound.run_summary_requests (
       run_id, conversation_id, scope, identity_key, attempt, predecessor_id, from_seq, to_seq, compacted_seqs,
       source_hash, hash_version, model, prompt_version, max_chars, input_bytes, reserved_requests, reserved_tokens,
       lease_expires_at)
     values ($1, $2, $3, $4,
       (select coalesce(max(attempt), 0) + 1 from sourcebound.run_summary_requests where identity_key = $4),
       $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)
     returning id, attempt`,
    [r.runId, r.conversationId, r.scope, r.identityKey, r.predecessorId, r.fromSeq, r.toSeq, r.compactedSeqs,
      r.sourceHash, r.hashVersion, r.model, r.promptVersion, r.maxChars, r.inputBytes, r.reservedRequests,
      r.reservedTokens, r.leaseExpiresAt]);
  return rows[0]!;
}

export interface ReceiptSettlement {
  status: Exclude<ReceiptStatus, 'dispatched'>;
  spent: boolean;
  reason: string | null;
  summary: string | null;
  answerModel: string | null;
  providerRequestId: string | null;
  usage: unknown;
  chargedRequests: number;
  chargedTokens: number;
  notBefore: Date | null;
}

/**
 * Settles a receipt still `dispatched` and moves its reservation to the
 * budget's used amounts, in one statement. False when it was already settled
 * (e.g. presumed lost after its lease by another preparer): then nothing changes.
 */
export async function runSummaryRequestSettle(db: Queryable, id: string, s: ReceiptSettlement): Promise<boolean> {
  const { rows } = await db.query<{ settled: number }>(
    `with s as (
       update sourcebound.run_summary_requests
       set status = $2, spent = $3, reason = $4, summary = $5, answer_model = $6, provider_request_id = $7, usage = $8,
           charged_requests = $9, charged_tokens = $10, not_before = $11, settled_at = now()
       where id = $1 and status = 'dispatched'
       returning run_id, reserved_requests, reserved_tokens
     ), b as (
       update sourcebound.run_budgets b
       set requests_reserved = b.requests_reserved - s.reserved_requests, tokens_reserved = b.tokens_reserved - s.reserved_tokens,
           requests_used = b.requests_used + $9, tokens_used = b.tokens_used + $10, updated_at = now()
       from s where b.run_id = s.run_id
       returning 1
     )
     select (select count(*) from s)::int as settled`,
    [id, s.status, s.spent, s.reason, s.summary, s.answerModel, s.providerRequestId,
      s.usage === null || s.usage === undefined ? null : JSON.stringify(s.usage), s.chargedRequests, s.chargedTokens, s.notBefore]);
  return rows[0]!.settled === 1;
}

/**
 * Settles as `unknown` every receipt of the Run still in flight after its
 * lease (`now`): the process that sent it is presumed lost. The reservation
 * is charged in full: the request may have been processed.
 */
export async function runSummaryRequestsExpire(db: Queryable, runId: string, now: Date): Promise<string[]> {
  const { rows } = await db.query<{ id: string }>(
    `with e as (
       update sourcebound.run_summary_requests
       set status = 'unknown', spent = true, settled_at = now(),
           reason = 'lease_expired: unsettled after its deadline; the process that sent it was lost',
           charged_requests = reserved_requests, charged_tokens = reserved_tokens
       where run_id = $1 and status = 'dispatched' and lease_expires_at < $2
       returning id, reserved_requests, reserved_tokens
     ), b as (
       update sourcebound.run_budgets b
       set requests_reserved = b.requests_reserved - t.r, tokens_reserved = b.tokens_reserved - t.t,
           requests_used = b.requests_used + t.r, tokens_used = b.tokens_used + t.t, updated_at = now()
       from (select sum(reserved_requests)::int as r, sum(reserved_tokens)::bigint as t from e) t
       where b.run_id = $1 and t.r is not null
       returning 1
     )
     select id from e order by id`, [runId, now]);
  return rows.map((r) => r.id);
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

/** Inserts a checkpoint; the guard (0011) checks chain, range, settlement and binding. */
export async function runCheckpointInsert(db: Queryable, c: CheckpointInsert): Promise<string> {
  const { rows } = await db.query<{ id: string }>(
    `insert into sourcebound.run_checkpoints (
       id, run_id, conversation_id, scope, segment, predecessor_id, correction_revision, model_route, from_seq, to_seq,
       compacted_seqs, source_hashes, source_hash, hash_version, tool_result_refs, summary_request_id, summary_model,
       prompt_version, summary, summary_bytes)
     values ($19, $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, octet_length($18))
     returning id`,
    [c.runId, c.conversationId, c.scope, c.segment, c.predecessorId, c.correctionRevision, c.modelRoute, c.fromSeq,
      c.toSeq, c.compactedSeqs, c.sourceHashes, c.sourceHash, c.hashVersion, JSON.stringify(c.toolResultRefs),
      c.summaryRequestId, c.summaryModel, c.promptVersion, c.summary, c.id]);
  return rows[0]!.id;
}

export interface ReceiptListRow {
  id: string;
  attempt: number;
  identityKey: string;
  status: ReceiptStatus;
  spent: boolean | null;
  reason: string | null;
  fromSeq: number;
  toSeq: number;
  predecessorId: string | null;
  model: string;
  leaseExpiresAt: Date;
  dispatchedAt: Date;
  settledAt: Date | null;
  checkpointId: string | null;
}

/** Every summary request receipt of a Run, oldest first, with the checkpoint each produced. */
export async function runSummaryRequestsList(db: Queryable, runId: string): Promise<ReceiptListRow[]> {
  const { rows } = await db.query<ReceiptListRow>(
    `select s.id, s.attempt, s.identity_key as "identityKey", s.status, s.spent, s.reason, s.from_seq::float8 as "fromSeq",
       s.to_seq::float8 as "toSeq", s.predecessor_id as "predecessorId", s.model,
       s.lease_expires_at as "leaseExpiresAt", s.dispatched_at as "dispatchedAt", s.settled_at as "settledAt", k.id as "checkpointId"
     from sourcebound.run_summary_requests s
     left join sourcebound.run_checkpoints k on k.summary_request_id = s.id
     where s.run_id = $1 order by s.dispatched_at, s.attempt`, [runId]);
  return rows;
}
