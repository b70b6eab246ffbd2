/**
 * Summary request receipts of run compaction: written before the summary call (the app's
 * INSERT names the identity only), settled once through the database's functions
 * (migrations/0011_run_commit_path.sql; guard: the run_summary_requests_guard trigger).
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
  reason: string | null;
  summary: string | null;
  answerModel: string | null;
  providerRequestId: string | null;
  usage: unknown;
  chargedRequests: number;
  chargedTokens: number;
  notBefore: Date | null;
  /** The answer's grounding check (src/grounding/index.ts), when one was made; an `ok` answer always carries one. */
  grounding?: { checked: string[]; ungrounded: string[] } | null;
}

/**
 * Settles a receipt still `dispatched` and moves its reservation to the
 * budget's used amounts (sourcebound.run_summary_settle(), which alone may
 * settle it; whether the attempt is spent follows from the status there).
 * An `ok` settled here is an answer that was refused, with its reason: an
 * accepted one is settled with its checkpoint (runCheckpointCommit). False
 * when it was already settled (e.g. presumed lost after its lease by another
 * preparer): then nothing changes.
 */
export async function runSummaryRequestSettle(db: Queryable, scope: string, id: string, s: ReceiptSettlement): Promise<boolean> {
  const { rows } = await db.query<{ settled: boolean }>(
    `select sourcebound.run_summary_settle($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12::text[], $13::text[]) as settled`,
    [
      scope,
      id,
      s.status,
      s.reason,
      s.summary,
      s.answerModel,
      s.providerRequestId,
      usageJson(s.usage),
      s.chargedRequests,
      s.chargedTokens,
      s.notBefore,
      s.grounding?.checked ?? null,
      s.grounding?.ungrounded ?? null,
    ],
  );
  return rows[0]!.settled;
}

export function usageJson(usage: unknown): string | null {
  return usage === null || usage === undefined ? null : JSON.stringify(usage);
}

/**
 * Settles as `unknown` every receipt of the Run still in flight after its
 * lease (`now`): the process that sent it is presumed lost. The reservation
 * is charged in full: the request may have been processed
 * (sourcebound.run_summary_expire(); a Run of another scope has none).
 */
export async function runSummaryRequestsExpire(db: Queryable, scope: string, runId: string, now: Date): Promise<string[]> {
  const { rows } = await db.query<{ id: string }>('select id from sourcebound.run_summary_expire($1, $2, $3) as id', [scope, runId, now]);
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
