/**
 * SQL of conversation compaction (System 1), named noun-first. Every query
 * takes the client it runs on, so callers decide the transaction.
 */
import type pg from 'pg';
import type { Queryable } from '../queryable.ts';
import type { Grounding } from '../../support/summary-contract.ts';

/**
 * How a hot query is sent. `prepared`: as a named prepared statement, parsed
 * and planned once per connection (the claim's and the commit's text is long:
 * parsing and planning it was 0.15-0.25 ms of backend CPU a call). Only on a
 * direct connection: a transaction pooler (PgBouncer in transaction mode)
 * runs each transaction on any server connection, where the statement was
 * never prepared. (Default: false)
 */
export interface SendOptions {
  prepared?: boolean;
}

/** A query config, named when `prepared` (the name is the statement's on every connection). */
function statement(name: string, text: string, values: unknown[], options: SendOptions | undefined): pg.QueryConfig {
  return options?.prepared ? { name: `sourcebound.${name}`, text, values } : { text, values };
}

export interface PairRow {
  pairIndex: number;
  runId: string;
  userMessageId: string;
  userText: string;
  assistantMessageId: string;
  assistantText: string;
}

export interface SummaryRow extends SummaryIdentity {
  id: string;
  status: 'running' | 'pending' | 'completed' | 'failed' | 'stale';
  summary: string | null;
  attemptsSpent: number;
  leaseOwner: string | null;
  leaseExpiresAt: Date | null;
  notBefore: Date | null;
  failureReason: string | null;
  createdAt: Date;
  completedAt: Date | null;
}

// Arrays come back as JSON: JSON.parse is native, node-postgres parses a
// text[] character by character in JavaScript (about 1 ms for a claim's ten replies).
const SUMMARY_COLUMNS = `id, conversation_id as "conversationId", scope, from_pair as "fromPair", to_pair as "toPair",
  to_json(source_message_ids) as "sourceMessageIds", source_hash as "sourceHash", hash_version as "hashVersion",
  model, prompt_version as "promptVersion", status, summary, attempts_spent as "attemptsSpent",
  lease_owner as "leaseOwner", lease_expires_at as "leaseExpiresAt", not_before as "notBefore",
  failure_reason as "failureReason", created_at as "createdAt", completed_at as "completedAt"`;

/** The conversation's scope, or null when it does not exist. */
export async function conversationScopeRead(db: Queryable, conversationId: string): Promise<string | null> {
  const { rows } = await db.query<{ scope: string }>('select scope from sourcebound.conversations where id = $1', [conversationId]);
  return rows[0]?.scope ?? null;
}

export interface ConversationState {
  scope: string;
  pairCount: number;
}

/** The conversation's scope and eligible-pair count in one round trip, or null when it does not exist. */
export async function conversationStateRead(db: Queryable, conversationId: string): Promise<ConversationState | null> {
  const { rows } = await db.query<ConversationState>(
    `select c.scope, (select coalesce(max(p.pair_index) + 1, 0)::int from sourcebound.pairs p where p.conversation_id = c.id) as "pairCount"
     from sourcebound.conversations c where c.id = $1`,
    [conversationId],
  );
  return rows[0] ?? null;
}

/** Number of eligible pairs: an index lookup, not a count. */
export async function pairCountRead(db: Queryable, conversationId: string): Promise<number> {
  const { rows } = await db.query<{ n: number }>(
    'select coalesce(max(pair_index) + 1, 0)::int as n from sourcebound.pairs where conversation_id = $1',
    [conversationId],
  );
  return rows[0]!.n;
}

/** The pairs fromPair..toPair with both texts, in pair order (from the one eligibility definition). */
export async function pairsRangeRead(db: Queryable, conversationId: string, fromPair: number, toPair: number): Promise<PairRow[]> {
  const { rows } = await db.query<PairRow>(
    `select pair_index as "pairIndex", run_id as "runId", user_message_id as "userMessageId", user_text as "userText",
            assistant_message_id as "assistantMessageId", assistant_text as "assistantText"
     from sourcebound.eligible_pairs
     where conversation_id = $1 and pair_index between $2 and $3
     order by pair_index`,
    [conversationId, fromPair, toPair],
  );
  return rows;
}

/** Summary records of a conversation, oldest range first (operators' view and planning). */
export async function summariesOfConversationRead(db: Queryable, conversationId: string): Promise<SummaryRow[]> {
  const { rows } = await db.query<SummaryRow>(
    `select ${SUMMARY_COLUMNS} from sourcebound.conversation_summaries where conversation_id = $1 order by from_pair, created_at`,
    [conversationId],
  );
  return rows;
}

export interface SummaryIdentity {
  conversationId: string;
  scope: string;
  fromPair: number;
  toPair: number;
  sourceMessageIds: string[];
  sourceHash: string;
  hashVersion: number;
  model: string;
  promptVersion: string;
}

/** An assistant reply of a claimed range, as the summarizer is given it. */
export interface ReplyRow {
  assistantMessageId: string;
  assistantText: string;
}

/** A mark (sourcebound.compaction_marks): a plannable range that may need work, as a job saw it. */
export interface MarkRow {
  fromPair: number;
  generation: number;
}

/** The marks of a conversation, oldest range first (tests and operators; the job finds them through its claim). */
export async function compactionMarksRead(db: Queryable, conversationId: string): Promise<MarkRow[]> {
  const { rows } = await db.query<MarkRow>(
    `select from_pair as "fromPair", generation::float8 as generation from sourcebound.compaction_marks
     where conversation_id = $1 order by from_pair`,
    [conversationId],
  );
  return rows;
}

export interface ClaimRow {
  kind: 'claimed' | 'done' | 'failed' | 'busy' | 'deferred' | 'gone';
  record: SummaryRow | null;
  attemptId: number | null;
  until: Date | null;
  replies: ReplyRow[];
}

type ClaimColumns = SummaryRow & {
  claimKind: ClaimRow['kind'];
  claimAttemptId: string | null;
  claimUntil: Date | null;
  assistantIds: string[] | null;
  assistantTexts: string[] | null;
};

const CLAIM_COLUMNS = `c.claim_kind as "claimKind", c.claim_attempt_id as "claimAttemptId", c.claim_until as "claimUntil",
  to_json(c.claim_assistant_ids) as "assistantIds", to_json(c.claim_assistant_texts) as "assistantTexts", ${SUMMARY_COLUMNS}`;

function claimRow(row: ClaimColumns): ClaimRow {
  const { claimKind, claimAttemptId, claimUntil, assistantIds, assistantTexts, ...record } = row;
  return {
    kind: claimKind,
    record: record.id === null ? null : record,
    attemptId: claimAttemptId === null ? null : Number(claimAttemptId),
    until: claimUntil,
    replies: (assistantIds ?? []).map((id, i) => ({ assistantMessageId: id, assistantText: assistantTexts![i]! })),
  };
}

export interface ClaimIdentity {
  model: string;
  promptVersion: string;
  workerId: string;
  leaseMs: number;
}

/** One statement: sourcebound.claim_range() of one range. */
export async function rangeClaim(
  db: Queryable,
  request: ClaimIdentity & { conversationId: string; range: { fromPair: number } },
  options?: SendOptions,
): Promise<ClaimRow> {
  const { rows } = await db.query<ClaimColumns>(
    statement(
      'range_claim',
      `select ${CLAIM_COLUMNS}
     from sourcebound.claim_range($1, $2, $3, $4, $5, $6) c cross join lateral (select (c.rec).*) s`,
      [request.conversationId, request.range.fromPair, request.model, request.promptVersion, request.workerId, request.leaseMs],
      options,
    ),
  );
  return claimRow(rows[0]!);
}

/**
 * One statement: sourcebound.claim_range() of the conversation's next mark:
 * the first after `after` that is not in `skip`
 * (from pair -> generation, marks the job left in place), or with `wrap` the
 * first such from the start. `mark` is null when there is none.
 */
export async function rangeNextClaim(
  db: Queryable,
  request: ClaimIdentity & { conversationId: string; after: number; wrap: boolean; skip: ReadonlyMap<number, number> },
  options?: SendOptions,
): Promise<ClaimRow & { mark: MarkRow | null }> {
  const { rows } = await db.query<ClaimColumns & { claimFromPair: number | null; claimGeneration: number | null }>(
    statement(
      'range_next_claim',
      `select c.claim_from_pair as "claimFromPair", c.claim_generation::float8 as "claimGeneration", ${CLAIM_COLUMNS}
     from sourcebound.claim_range($1, $2, $3, $4::int[], $5::bigint[], $6, $7, $8, $9) c cross join lateral (select (c.rec).*) s`,
      [
        request.conversationId,
        request.after,
        request.wrap,
        [...request.skip.keys()],
        [...request.skip.values()],
        request.model,
        request.promptVersion,
        request.workerId,
        request.leaseMs,
      ],
      options,
    ),
  );
  const { claimFromPair, claimGeneration, ...row } = rows[0]!;
  if ((row.claimKind as string) === 'none') return { ...claimRow(row), mark: null };
  return { ...claimRow(row), mark: { fromPair: claimFromPair!, generation: claimGeneration! } };
}

/**
 * One statement: sourcebound.claim_renew(). The claim's new lease expiry, or
 * null when it is no longer the caller's (taken over or settled).
 */
export async function claimRenew(
  db: Queryable,
  claim: { summaryId: string; attemptId: number; workerId: string; leaseMs: number },
): Promise<Date | null> {
  const { rows } = await db.query<{ until: Date | null }>('select sourcebound.claim_renew($1, $2, $3, $4) as until', [
    claim.summaryId,
    claim.attemptId,
    claim.workerId,
    claim.leaseMs,
  ]);
  return rows[0]?.until ?? null;
}

export interface CommitInput {
  summaryId: string;
  attemptId: number;
  workerId: string;
  outcome: 'ok' | 'invalid' | 'unknown' | 'deferred' | 'config';
  summary?: string;
  reason?: string;
  requestId?: string | null;
  usage?: unknown;
  /** ok: unused; invalid/unknown: retry no sooner than this; deferred: wait this long. */
  notBeforeMs?: number | null;
  /** The grounding check made before the commit (src/grounding/index.ts), kept with the attempt. */
  grounding?: Grounding | undefined;
}

/**
 * One statement: sourcebound.commit_summary().
 * `marksRemain`: the conversation still has a mark after it (true when the lease was lost: not looked at).
 */
export async function summaryCommit(
  db: Queryable,
  input: CommitInput,
  options?: SendOptions,
): Promise<{
  kind: 'completed' | 'stale' | 'spent' | 'deferred' | 'config' | 'lease_lost';
  record: SummaryRow | null;
  marksRemain: boolean;
}> {
  const { rows } = await db.query<
    SummaryRow & { commitKind: 'completed' | 'stale' | 'spent' | 'deferred' | 'config' | 'lease_lost'; marksRemain: boolean | null }
  >(
    statement(
      'summary_commit',
      `select c.commit_kind as "commitKind", c.marks_remain as "marksRemain", ${SUMMARY_COLUMNS}
     from sourcebound.commit_summary($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9, $10::text[], $11::text[]) c cross join lateral (select (c.rec).*) s`,
      [
        input.summaryId,
        input.attemptId,
        input.workerId,
        input.outcome,
        input.summary ?? null,
        input.reason ?? null,
        input.requestId ?? null,
        input.usage === undefined || input.usage === null ? null : JSON.stringify(input.usage),
        input.notBeforeMs ?? null,
        input.grounding?.checked ?? null,
        input.grounding?.ungrounded ?? null,
      ],
      options,
    ),
  );
  const { commitKind, marksRemain, ...record } = rows[0]!;
  return { kind: commitKind, record: record.id === null ? null : record, marksRemain: marksRemain ?? true };
}

export interface AttemptRow {
  id: number;
  summaryId: string;
  workerId: string;
  startedAt: Date;
  finishedAt: Date | null;
  outcome: string | null;
  spent: boolean | null;
  reason: string | null;
  requestId: string | null;
  usage: unknown;
  inputChars: number | null;
  /** Facts of the answer checked against its material (`kind:text`), and those not found; null when nothing was checked. */
  groundingChecked: string[] | null;
  groundingUngrounded: string[] | null;
}

/** Every attempt of a conversation's records, in order. */
export async function attemptsOfConversationRead(db: Queryable, conversationId: string): Promise<AttemptRow[]> {
  const { rows } = await db.query<AttemptRow>(
    `select a.id::int as id, a.summary_id as "summaryId", a.worker_id as "workerId", a.started_at as "startedAt",
            a.finished_at as "finishedAt", a.outcome, a.spent, a.reason, a.request_id as "requestId", a.usage, a.input_chars as "inputChars",
            a.grounding_checked as "groundingChecked", a.grounding_ungrounded as "groundingUngrounded"
     from sourcebound.conversation_summary_attempts a
     join sourcebound.conversation_summaries s on s.id = a.summary_id
     where s.conversation_id = $1 order by a.id`,
    [conversationId],
  );
  return rows;
}

/**
 * One attempt and its record, by their ids, in one statement that reads
 * those two rows by primary key (the commit retry's question: did my cut
 * commit land?), however many the conversation has. Null when the attempt
 * is not one of that record's (or either is gone).
 */
export async function summaryAttemptRead(
  db: Queryable,
  summaryId: string,
  attemptId: number,
): Promise<{ record: SummaryRow; attempt: AttemptRow } | null> {
  type Row = SummaryRow & { [K in keyof AttemptRow as `attempt_${K}`]: AttemptRow[K] };
  const { rows } = await db.query<Row>(
    `select ${SUMMARY_COLUMNS}, x.*
     from sourcebound.conversation_summaries
     cross join lateral (
       select a.id::int as "attempt_id", a.summary_id as "attempt_summaryId", a.worker_id as "attempt_workerId", a.started_at as "attempt_startedAt",
              a.finished_at as "attempt_finishedAt", a.outcome as "attempt_outcome", a.spent as "attempt_spent", a.reason as "attempt_reason",
              a.request_id as "attempt_requestId", a.usage as "attempt_usage", a.input_chars as "attempt_inputChars",
              a.grounding_checked as "attempt_groundingChecked", a.grounding_ungrounded as "attempt_groundingUngrounded"
       from sourcebound.conversation_summary_attempts a where a.id = $2 and a.summary_id = $1) x
     where id = $1`,
    [summaryId, attemptId],
  );
  const row = rows[0];
  if (!row) return null;
  const record: Record<string, unknown> = {};
  const attempt: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(row)) {
    if (key.startsWith('attempt_')) attempt[key.slice('attempt_'.length)] = value;
    else record[key] = value;
  }
  return { record: record as unknown as SummaryRow, attempt: attempt as unknown as AttemptRow };
}

/**
 * Schedules the conversation's compaction job at a time (deferral, lease
 * expiry); deduplicated by its job key, as that key's one writer at a time
 * (sourcebound.compaction_key_lock()).
 */
export async function compactionJobAtAdd(db: Queryable, conversationId: string, runAt: Date): Promise<void> {
  await db.query('select sourcebound.compaction_job_at($1, $2)', [conversationId, runAt]);
}

/**
 * Runs the conversation's compaction at a lease's expiry, under a job key of
 * its own: in case the worker holding a range died. Never under the
 * conversation's key, whose preserve_run_at would hold every later enqueue
 * back until then.
 */
export async function compactionLeaseWatchAdd(db: Queryable, conversationId: string, runAt: Date): Promise<void> {
  await db.query(
    `select graphile_worker.add_job('compact_conversation', json_build_object('conversationId', $1::uuid),
       run_at := $2, job_key := 'sourcebound:compact-lease:' || $1, job_key_mode := 'preserve_run_at')`,
    [conversationId, runAt],
  );
}

/** Enqueues marked conversations that have no job waiting, one page from where the last sweep stopped (sourcebound.sweep_compaction()). */
export async function compactionSweepRun(db: Queryable, limit = 1000): Promise<number> {
  const { rows } = await db.query<{ n: number }>('select sourcebound.sweep_compaction($1) as n', [limit]);
  return rows[0]!.n;
}

/**
 * sourcebound.scope_call_admit(): counts one summarizer call for `scope` in
 * this clock hour, or, when `limit` calls were already started, counts nothing
 * and returns when the next hour starts. `limit` 0: no limit.
 */
export async function scopeCallAdmit(db: Queryable, scope: string, limit: number): Promise<Date | null> {
  const { rows } = await db.query<{ until: Date | null }>('select sourcebound.scope_call_admit($1, $2) as until', [scope, limit]);
  return rows[0]?.until ?? null;
}
