/**
 * The conditions the database raises itself (RAISE EXCEPTION 'sourcebound: ...' in migrations/).
 * Each carries its SQLSTATE and, in the error's `constraint` field (node-postgres: error.constraint),
 * a stable name: tell them apart by (code, constraint), never by message text, which is for people.
 * A leaf: no imports. test/schema.test.ts checks this list against the migrations.
 */
export const SOURCEBOUND_CONDITIONS = {
  /** A write the pair index must read for ran outside READ COMMITTED (or pairs_rebuild did). */
  pair_write_isolation: { code: '0A000' },
  /** enqueue_compaction() or pairs_rebuild() was given a conversation that does not exist. */
  conversation_missing: { code: 'P0002' },
  /** A conversation's scope or id was changed, or a run or message moved to a conversation of another scope (scope_fixed). */
  conversation_scope_fixed: { code: '23000' },
  /** enqueue_compaction(scope, id) was given a conversation that is not in that scope (or does not exist: the same answer). */
  conversation_in_scope: { code: 'P0002' },
  /** A message's content is over sourcebound.max_message_bytes (message_size_limit). */
  message_size_limit: { code: '54000' },
  /** commit_summary() met a record whose source hash version the database cannot compute. */
  source_hash_version_unknown: { code: 'P0001' },
  /** commit_summary() was given an outcome other than ok, invalid, unknown, deferred, config. */
  commit_outcome_unknown: { code: 'P0001' },
  /** A summary record was deleted other than with its conversation. */
  summary_record_delete: { code: '23000' },
  /** A completed or failed summary record was updated. */
  summary_record_immutable: { code: '23000' },
  /** An open summary record's identity (conversation, range, source, model, prompt) was changed. */
  summary_record_identity: { code: '23000' },
  /** A summary record's spent attempts were decreased. */
  summary_record_attempts_decrease: { code: '23000' },
  /** A summary attempt was deleted other than with its conversation. */
  summary_attempt_delete: { code: '23000' },
  /** A settled summary attempt was updated. */
  summary_attempt_immutable: { code: '23000' },
  /** A summary attempt's record, worker or start time was changed. */
  summary_attempt_identity: { code: '23000' },
  /** A table of immutable records (summaries, attempts, run history) was truncated. */
  truncate_refused: { code: '23000' },
  /** A run history entry was deleted other than with its run. */
  run_turn_delete: { code: '23000' },
  /** A run history entry (request, correction, model turn) was updated. */
  run_turn_immutable: { code: '23000' },
  /** An initial request was recorded for a run that already has history. */
  run_request_not_first: { code: '23000' },
  /** A correction or model turn was recorded before the run's initial request. */
  run_request_missing: { code: '23000' },
  /** A correction was recorded with a revision other than the next one (two corrections raced: retry with the next). */
  run_correction_revision: { code: '23000' },
  /** A model request receipt was deleted other than with its run. */
  run_model_request_delete: { code: '23000' },
  /** A model request receipt was updated. */
  run_model_request_immutable: { code: '23000' },
  /** A tool unit was deleted other than with its run. */
  run_tool_unit_delete: { code: '23000' },
  /** A tool unit was inserted in a state other than proposed. */
  run_tool_unit_not_proposed: { code: '23000' },
  /** A tool unit was inserted for a turn that is not a model turn of its run. */
  run_tool_unit_turn: { code: '23000' },
  /** A settled, failed or unknown tool unit was updated. */
  run_tool_unit_immutable: { code: '23000' },
  /** A tool unit's identity (turn, position, proposal, tool, input) was changed. */
  run_tool_unit_identity: { code: '23000' },
  /** A dispatched tool unit's dispatch id was changed. */
  run_tool_unit_dispatch_identity: { code: '23000' },
  /** A tool unit was moved backwards (to proposed, or dispatched again). */
  run_tool_unit_transition: { code: '23000' },
  /** A tool unit was settled with a result of another run. */
  run_tool_unit_result_run: { code: '23000' },
  /** A stored result version was deleted other than with its run. */
  run_result_delete: { code: '23000' },
  /** A stored result version was updated (store a new version). */
  run_result_immutable: { code: '23000' },
  /** A result version was stored without the previous version of the same run and kind. */
  run_result_version_gap: { code: '23000' },
  /** A summary request receipt was deleted other than with its run. */
  run_summary_request_delete: { code: '23000' },
  /** A summary request receipt was inserted in a state other than dispatched. */
  run_summary_request_not_dispatched: { code: '23000' },
  /** A third dispatch that spends or may spend an attempt was recorded for one summary identity. */
  run_summary_attempts_spent: { code: '23000' },
  /** A settled summary request receipt was updated. */
  run_summary_request_immutable: { code: '23000' },
  /** A dispatched summary request receipt was updated without being settled. */
  run_summary_request_settle_only: { code: '23000' },
  /** A summary request receipt's identity was changed. */
  run_summary_request_identity: { code: '23000' },
  /** A checkpoint was deleted other than with its run. */
  run_checkpoint_delete: { code: '23000' },
  /** A checkpoint was updated. */
  run_checkpoint_immutable: { code: '23000' },
  /** A checkpoint was inserted that does not follow the run's newest checkpoint. */
  run_checkpoint_chain: { code: '23000' },
  /** A run's first checkpoint had a segment other than 1 or a predecessor. */
  run_checkpoint_first: { code: '23000' },
  /** A checkpoint range overlaps the range before it. */
  run_checkpoint_overlap: { code: '23000' },
  /** A checkpoint's compacted turns do not increase strictly from from_seq to to_seq. */
  run_checkpoint_turn_order: { code: '23000' },
  /** A checkpoint's compacted turns are not every model turn of its range. */
  run_checkpoint_turns: { code: '23000' },
  /** A checkpoint would compact a tool unit that is not settled, failed or unknown. */
  run_checkpoint_unsettled_tool: { code: '23000' },
  /** A checkpoint is not bound to an ok summary request of the same run, range and source. */
  run_checkpoint_summary: { code: '23000' },
  /** A run summary request was settled or committed with a scope it is not in (or it does not exist: the same answer). */
  run_summary_request_in_scope: { code: 'P0002' },
  /** run_summary_settle() was given a status other than ok, invalid, deferred, unknown, config. */
  run_summary_outcome_unknown: { code: 'P0001' },
  /** A run summary request was settled or committed `ok` without its answer or its grounding verdict. */
  run_summary_ok_verdict: { code: 'P0001' },
  /** run_summary_settle() was given an `ok` with no reason: an accepted answer is settled with its checkpoint (run_checkpoint_commit). */
  run_summary_ok_refused_only: { code: 'P0001' },
  /** run_checkpoint_commit() met a request whose source hash version the database cannot compute. */
  run_source_hash_version_unknown: { code: 'P0001' },
  /** run_checkpoint_commit() was given work-group hashes that do not hash to the request's source hash. */
  run_checkpoint_source_hashes: { code: 'P0001' },
  /** A run summary request was inserted under an identity key that is not its columns' (run_summary_requests_identity). */
  run_summary_request_identity_key: { code: 'P0001' },
  /** run_checkpoint_commit() was given a correction revision the run does not have. */
  run_checkpoint_revision: { code: 'P0001' },
} as const;

export type SourceboundCondition = keyof typeof SOURCEBOUND_CONDITIONS;

/** True when `error` is the database's condition `name` (by SQLSTATE and constraint name). */
export function isCondition(error: unknown, name: SourceboundCondition): boolean {
  const e = error as { code?: unknown; constraint?: unknown } | null;
  return typeof e === 'object' && e !== null && e.code === SOURCEBOUND_CONDITIONS[name].code && e.constraint === name;
}
