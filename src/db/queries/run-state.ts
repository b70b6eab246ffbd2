/**
 * The Run's whole projection input, read in one snapshot: history, tool units with their result
 * sizes, checkpoints, the result catalog, the budget and the receipts that matter now.
 */
import type { BudgetRow } from './run-budget.ts';
import type { CheckpointRow } from './run-checkpoints.ts';
import type { Queryable } from '../queryable.ts';
import type { RunRow, TurnRow, UnitRow } from './run-history.ts';
import type { ReceiptRow } from './run-receipts.ts';
import type { CatalogRow } from './run-results.ts';

export interface RunState {
  run: RunRow;
  turns: TurnRow[];
  units: UnitRow[];
  checkpoints: CheckpointRow[];
  catalog: CatalogRow[];
  budget: BudgetRow | null;
  /** Receipts in flight, and every receipt made on top of the newest checkpoint. */
  receipts: ReceiptRow[];
  /**
   * The first `excerptChars` characters of every inline body over that size in
   * the newest `recentGroups` model turns, keyed `id:version` (what the request
   * may show of a body of the newest groups it does not show whole).
   */
  excerpts: Map<string, string>;
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
       'summaryRequestId', k.summary_request_id, 'correctionRevision', k.correction_revision,
       -- The receipt holds the grounding check of the answer the checkpoint was made of (settled once, immutable).
       'ungrounded', coalesce((select s.grounding_ungrounded from sourcebound.run_summary_requests s where s.id = k.summary_request_id), '{}'))
     order by k.segment), '[]')
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
       'ungrounded', coalesce(s.grounding_ungrounded, '{}'),
       'checkpointId', (select k.id from cp k where k.summary_request_id = s.id)) order by s.dispatched_at, s.attempt), '[]')
     from sourcebound.run_summary_requests s
     where s.run_id = (select id from r)
       and (s.status = 'dispatched' or s.predecessor_id is not distinct from (select id from last_cp))) as receipts,
  (select coalesce(json_agg(json_build_array(x.id || ':' || x.version, left(x.content, $3))), '[]')
     from sourcebound.run_tool_units u
     join sourcebound.run_results x on x.id = u.result_id and x.version = u.result_version
     where u.run_id = (select id from r) and u.result_inline and x.byte_size > $3
       -- Only the newest groups show excerpts: detoasting every large body on every call would cost
       -- more than the rest of the load.
       and u.turn_seq in (select t.seq from sourcebound.run_turns t where t.run_id = (select id from r) and t.kind = 'model' and t.seq <= $4
                          order by t.seq desc limit $5)) as excerpts`;

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
export async function runStateLoad(
  db: Queryable,
  runId: string,
  scope: string,
  excerptChars: number,
  recentGroups: number,
): Promise<RunState | null> {
  const { rows: turns } = await db.query<TurnRow>(
    `select t.seq::float8 as seq, t.kind, t.revision, t.text, t.thinking
     from sourcebound.run_turns t
     where t.run_id = $1 and exists (
       select 1 from sourcebound.runs r join sourcebound.conversations c on c.id = r.conversation_id
       where r.id = $1 and c.scope = $2)
     order by t.seq`,
    [runId, scope],
  );
  const { rows } = await db.query<{
    run: RunRow | null;
    units: UnitRow[];
    checkpoints: CheckpointRow[];
    catalog: CatalogRow[];
    budget: BudgetRow | null;
    receipts: ReceiptRow[];
    excerpts: [string, string][];
  }>(STATE_SQL, [runId, scope, excerptChars, turns.at(-1)?.seq ?? 0, recentGroups]);
  const row = rows[0];
  if (!row || !row.run) return null;
  const newest = turns.at(-1)?.seq ?? 0;
  for (const t of turns) if (t.thinking === null) delete t.thinking;
  return {
    run: row.run,
    turns,
    units: row.units.filter((u) => u.turnSeq <= newest),
    checkpoints: row.checkpoints.filter((c) => c.toSeq <= newest),
    catalog: row.catalog,
    budget: row.budget,
    receipts: row.receipts,
    excerpts: new Map(row.excerpts),
  };
}
