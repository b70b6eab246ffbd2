/**
 * Summary request receipts of run compaction: written before the summary call, settled once
 * (guard: the run_summary_requests_guard trigger).
 */
import type { Queryable } from '../queryable.ts';

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
  /** The answer's ungrounded facts (empty when none, or no check was made). */
  ungrounded: string[];
}

/** Everything a projection needs, read in one statement (one snapshot). */

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
    [
      r.runId,
      r.conversationId,
      r.scope,
      r.identityKey,
      r.predecessorId,
      r.fromSeq,
      r.toSeq,
      r.compactedSeqs,
      r.sourceHash,
      r.hashVersion,
      r.model,
      r.promptVersion,
      r.maxChars,
      r.inputBytes,
      r.reservedRequests,
      r.reservedTokens,
      r.leaseExpiresAt,
    ],
  );
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
  /** The answer's grounding check (src/grounding/index.ts), when one was made. */
  grounding?: { checked: string[]; ungrounded: string[] } | null;
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
           charged_requests = $9, charged_tokens = $10, not_before = $11, settled_at = now(),
           grounding_checked = $12::text[], grounding_ungrounded = $13::text[]
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
    [
      id,
      s.status,
      s.spent,
      s.reason,
      s.summary,
      s.answerModel,
      s.providerRequestId,
      s.usage === null || s.usage === undefined ? null : JSON.stringify(s.usage),
      s.chargedRequests,
      s.chargedTokens,
      s.notBefore,
      s.grounding?.checked ?? null,
      s.grounding?.ungrounded ?? null,
    ],
  );
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
     select id from e order by id`,
    [runId, now],
  );
  return rows.map((r) => r.id);
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
     where s.run_id = $1 order by s.dispatched_at, s.attempt`,
    [runId],
  );
  return rows;
}
