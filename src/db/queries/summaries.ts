/**
 * SQL of conversation compaction (System 1), named noun-first. Every query
 * takes the client it runs on, so callers decide the transaction.
 */
import type pg from 'pg';
import type { Grounding } from '../../grounding.ts';
import { LOCK_NS } from '../locks.ts';

export type Queryable = Pick<pg.ClientBase, 'query'>;

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

const SUMMARY_COLUMNS = `id, conversation_id as "conversationId", scope, from_pair as "fromPair", to_pair as "toPair",
  source_message_ids::text[] as "sourceMessageIds", source_hash as "sourceHash", hash_version as "hashVersion",
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

/**
 * Takes the claim lock of one range for this transaction and, in the same
 * round trip, reads the conversation's state. `locked` false: another worker
 * holds the range. `state` null: the conversation is gone.
 */
export async function rangeClaimLockTry(db: Queryable, conversationId: string, fromPair: number): Promise<{ locked: boolean; state: ConversationState | null }> {
  const { rows } = await db.query<{ locked: boolean; scope: string | null; pairCount: number | null }>(
    `select l.locked, c.scope,
            (select coalesce(max(p.pair_index) + 1, 0)::int from sourcebound.pairs p where p.conversation_id = c.id) as "pairCount"
     from (select pg_try_advisory_xact_lock($1, hashtext($2)) as locked) l
     left join sourcebound.conversations c on l.locked and c.id = $3`,
    [LOCK_NS.summaryClaim, `${conversationId}:${fromPair}`, conversationId],
  );
  const row = rows[0]!;
  return { locked: row.locked, state: row.scope === null ? null : { scope: row.scope, pairCount: row.pairCount! } };
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

/** The record of an identity, locked for this transaction. */
export async function summaryByIdentityLock(db: Queryable, id: SummaryIdentity): Promise<SummaryRow | null> {
  const { rows } = await db.query<SummaryRow>(
    `select ${SUMMARY_COLUMNS} from sourcebound.conversation_summaries
     where conversation_id = $1 and from_pair = $2 and to_pair = $3 and source_hash = $4 and model = $5 and prompt_version = $6
     for update`,
    [id.conversationId, id.fromPair, id.toPair, id.sourceHash, id.model, id.promptVersion],
  );
  return rows[0] ?? null;
}

/**
 * A record by id, locked for this transaction, with whether one of its
 * attempts is still open (not settled by its own commit nor by a takeover).
 */
export async function summaryByIdLock(db: Queryable, summaryId: string, attemptId: number): Promise<(SummaryRow & { attemptOpen: boolean }) | null> {
  const { rows } = await db.query<SummaryRow & { attemptOpen: boolean }>(
    `select ${SUMMARY_COLUMNS},
            exists (select 1 from sourcebound.conversation_summary_attempts a where a.id = $2 and a.summary_id = s.id and a.outcome is null) as "attemptOpen"
     from sourcebound.conversation_summaries s where id = $1 for update`,
    [summaryId, attemptId],
  );
  return rows[0] ?? null;
}

export interface Claimed {
  record: SummaryRow;
  attemptId: number;
}

const LEASE_UNTIL = "now() + make_interval(secs => $LEASE::double precision / 1000)";

/** A new record for an identity, claimed (running) under a lease, with its first attempt opened: one statement. */
export async function summaryClaimedInsert(db: Queryable, id: SummaryIdentity, workerId: string, leaseMs: number, inputChars: number): Promise<Claimed> {
  const { rows } = await db.query<SummaryRow & { attemptId: string }>(
    `with s as (
       insert into sourcebound.conversation_summaries
         (conversation_id, scope, from_pair, to_pair, source_message_ids, source_hash, hash_version, model, prompt_version,
          status, lease_owner, lease_expires_at)
       values ($1, $2, $3, $4, $5::uuid[], $6, $7, $8, $9, 'running', $10, ${LEASE_UNTIL.replace('$LEASE', '$11')})
       returning *
     ), a as (
       insert into sourcebound.conversation_summary_attempts (summary_id, worker_id, input_chars)
       select id, $10, $12 from s returning id
     )
     select ${SUMMARY_COLUMNS}, (select id from a) as "attemptId" from s`,
    [id.conversationId, id.scope, id.fromPair, id.toPair, id.sourceMessageIds, id.sourceHash, id.hashVersion, id.model, id.promptVersion, workerId, leaseMs, inputChars],
  );
  const { attemptId, ...record } = rows[0]!;
  return { record, attemptId: Number(attemptId) };
}

/** Re-claims an open (pending, stale or lease-expired) record under a new lease and opens its next attempt: one statement. */
export async function summaryReclaimUpdate(db: Queryable, summaryId: string, workerId: string, leaseMs: number, inputChars: number): Promise<Claimed> {
  const { rows } = await db.query<SummaryRow & { attemptId: string }>(
    `with s as (
       update sourcebound.conversation_summaries
       set status = 'running', lease_owner = $2, lease_expires_at = ${LEASE_UNTIL.replace('$LEASE', '$3')}, not_before = null
       where id = $1 returning *
     ), a as (
       insert into sourcebound.conversation_summary_attempts (summary_id, worker_id, input_chars)
       select id, $2, $4 from s returning id
     )
     select ${SUMMARY_COLUMNS}, (select id from a) as "attemptId" from s`,
    [summaryId, workerId, leaseMs, inputChars],
  );
  const { attemptId, ...record } = rows[0]!;
  return { record, attemptId: Number(attemptId) };
}

/** Settles a record after an attempt: spends it or not, and moves it to its next status. */
export async function summarySettleUpdate(
  db: Queryable,
  summaryId: string,
  change: { status: SummaryRow['status']; spend: boolean; failureReason?: string | null; /** Retry no sooner than this many ms from the database's now. */ notBeforeMs?: number | null; summary?: string },
): Promise<SummaryRow> {
  const { rows } = await db.query<SummaryRow>(
    `update sourcebound.conversation_summaries
     set status = $2,
         attempts_spent = attempts_spent + (case when $3 then 1 else 0 end),
         failure_reason = coalesce($4, failure_reason),
         not_before = case when $5::double precision is null then null else now() + make_interval(secs => $5::double precision / 1000) end,
         summary = coalesce($6, summary),
         completed_at = case when $2 = 'completed' then now() else completed_at end,
         lease_owner = case when $2 = 'running' then lease_owner else null end,
         lease_expires_at = case when $2 = 'running' then lease_expires_at else null end
     where id = $1 returning ${SUMMARY_COLUMNS}`,
    [summaryId, change.status, change.spend, change.failureReason ?? null, change.notBeforeMs ?? null, change.summary ?? null],
  );
  return rows[0]!;
}

/** Settles every open attempt of a record (normally one) with an outcome. */
export async function attemptsSettleUpdate(
  db: Queryable,
  summaryId: string,
  settle: { outcome: string; spent: boolean; reason: string | null; requestId?: string | null; usage?: unknown; grounding?: Grounding | undefined },
  onlyAttemptId?: number,
): Promise<number> {
  const { rowCount } = await db.query(
    `update sourcebound.conversation_summary_attempts
     set outcome = $2, spent = $3, reason = $4, request_id = $5, usage = $6::jsonb, finished_at = now(),
         grounding_checked = $8::text[], grounding_ungrounded = $9::text[]
     where summary_id = $1 and outcome is null and ($7::bigint is null or id = $7)`,
    [summaryId, settle.outcome, settle.spent, settle.reason, settle.requestId ?? null, settle.usage === undefined ? null : JSON.stringify(settle.usage), onlyAttemptId ?? null,
      settle.grounding?.checked ?? null, settle.grounding?.ungrounded ?? null],
  );
  return rowCount ?? 0;
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

/** Schedules the conversation's compaction job at a time (deferral, lease expiry); deduplicated by its job key. */
export async function compactionJobAtAdd(db: Queryable, conversationId: string, runAt: Date): Promise<void> {
  await db.query(
    `select graphile_worker.add_job('compact_conversation', json_build_object('conversationId', $1::uuid),
       run_at := $2, job_key := 'sourcebound:compact:' || $1, job_key_mode := 'preserve_run_at')`,
    [conversationId, runAt],
  );
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

/** Re-enqueues conversations with a plannable range that has no completed, failed or live record (0005_sweep.sql). */
export async function compactionSweepRun(db: Queryable, limit = 1000): Promise<number> {
  const { rows } = await db.query<{ n: number }>('select sourcebound.sweep_compaction($1) as n', [limit]);
  return rows[0]!.n;
}
