/**
 * Run compaction tables (docs/runs.md). Written only
 * through src/run (the recording API and prepareRunRequest); the guard
 * triggers (run_turns_guard, run_model_requests_guard, run_results_guard,
 * run_summary_requests_guard, run_checkpoints_guard) guard what the database can guard.
 *
 * Terminology
 * - Turn: one entry of a Run's ordered history (`seq`, global and monotonic):
 *   the initial user request (revision 0), a later user correction
 *   (revision 1, 2, ...), or a model turn (text and tool proposals).
 * - Tool unit: one tool proposal of a model turn together with its dispatch
 *   and its result: ONE row, so a call can never be separated from its result.
 *   proposed -> dispatched -> settled | failed | unknown (proposed -> failed
 *   when the application refused to run it).
 * - Work group: a model turn and all its tool units.
 * - Result: a versioned, immutable body in the result store (id + version),
 *   rereadable by the model by exact version or byte/line range.
 * - Summary request (receipt): one dispatch of a summary for a candidate
 *   identity, written and committed BEFORE the model call.
 * - Checkpoint: the immutable record of one committed compaction; checkpoints
 *   of a Run form a chain (segment 1, 2, ...) over non-overlapping ranges.
 * - Budget: the Run's requests/tokens, reserved before a summary request and
 *   settled after it.
 */
import { sql } from 'drizzle-orm';
import {
  bigint,
  boolean,
  check,
  foreignKey,
  index,
  integer,
  jsonb,
  primaryKey,
  text,
  timestamp,
  unique,
  uniqueIndex,
  uuid,
  type AnyPgColumn,
} from 'drizzle-orm/pg-core';
import { conversations, runs, sourcebound } from './conversations.ts';

export const RUN_TURN_KINDS = ['request', 'correction', 'model'] as const;
export const TOOL_UNIT_STATUSES = ['proposed', 'dispatched', 'settled', 'failed', 'unknown'] as const;
export const RUN_RESULT_KINDS = ['external', 'tool_result'] as const;
export const SUMMARY_REQUEST_STATUSES = ['dispatched', 'ok', 'invalid', 'deferred', 'unknown', 'config'] as const;

const inList = (column: string, values: readonly string[]) => sql.raw(`${column} in (${values.map((v) => `'${v}'`).join(', ')})`);

const createdAt = () => timestamp('created_at', { withTimezone: true }).notNull().defaultNow();
const sha256Hex = (name: string, column: AnyPgColumn) => check(name, sql`${column} ~ '^[0-9a-f]{64}$'`);

/** Receipts of the application's own model requests (the Run's main requests). */
export const runModelRequests = sourcebound.table(
  'run_model_requests',
  {
    id: bigint('id', { mode: 'number' }).primaryKey().generatedAlwaysAsIdentity(),
    runId: uuid('run_id')
      .notNull()
      .references(() => runs.id, { onDelete: 'cascade' }),
    /** The application's identity of the request (idempotency key). */
    requestKey: text('request_key').notNull(),
    requestBytes: integer('request_bytes').notNull(),
    inputTokens: integer('input_tokens'),
    outputTokens: integer('output_tokens'),
    createdAt: createdAt(),
  },
  (t) => [
    unique('run_model_requests_key').on(t.runId, t.requestKey),
    unique('run_model_requests_run_id_key').on(t.runId, t.id),
    check(
      'run_model_requests_sizes',
      sql`${t.requestBytes} >= 0 and coalesce(${t.inputTokens}, 0) >= 0 and coalesce(${t.outputTokens}, 0) >= 0`,
    ),
  ],
);

export const runTurns = sourcebound.table(
  'run_turns',
  {
    /** Global order of history entries; a Run's entries are ordered by it. */
    seq: bigint('seq', { mode: 'number' }).primaryKey().generatedAlwaysAsIdentity(),
    runId: uuid('run_id')
      .notNull()
      .references(() => runs.id, { onDelete: 'cascade' }),
    kind: text('kind').notNull(),
    /** 0 for the initial request, 1, 2, ... for corrections; null for model turns. */
    revision: integer('revision'),
    text: text('text').notNull(),
    /** The model request that produced a model turn, when the application recorded it. */
    modelRequestId: bigint('model_request_id', { mode: 'number' }),
    /** Thinking blocks of an extended-thinking model turn, verbatim (sent back with its tool use). */
    thinking: jsonb('thinking'),
    createdAt: createdAt(),
  },
  (t) => [
    check('run_turns_kind_known', inList('kind', RUN_TURN_KINDS)),
    check(
      'run_turns_revision_matches_kind',
      sql`case ${t.kind} when 'request' then ${t.revision} = 0 when 'correction' then ${t.revision} >= 1 else ${t.revision} is null end`,
    ),
    check('run_turns_model_request_only_on_model', sql`${t.modelRequestId} is null or ${t.kind} = 'model'`),
    check(
      'run_turns_thinking_only_on_model',
      sql`${t.thinking} is null or (${t.kind} = 'model' and jsonb_typeof(${t.thinking}) = 'array')`,
    ),
    // A request or correction of only whitespace would be an empty text block in every later request,
    // which the Messages API refuses; corrections are immutable, so the Run could never send again.
    // The class is exactly what String.prototype.trim removes (as in the pair eligibility of sourcebound.refresh_pair()).
    check(
      'run_turns_user_text_not_blank',
      sql`${t.kind} = 'model' or ${t.text} ~ '[^\\t\\n\\v\\f\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff]'`,
    ),
    // Target of the tool units' composite key: a unit's turn is always in its own Run.
    unique('run_turns_run_seq_key').on(t.runId, t.seq),
    // One initial request per Run and one correction per revision.
    uniqueIndex('run_turns_revision_key')
      .on(t.runId, t.revision)
      .where(sql`revision is not null`),
    foreignKey({
      name: 'run_turns_model_request_fk',
      columns: [t.runId, t.modelRequestId],
      foreignColumns: [runModelRequests.runId, runModelRequests.id],
    }).onDelete('cascade'),
    // Referencing-side indexes: erasing a Run must not scan other Runs' rows.
    index('run_turns_model_request_idx')
      .on(t.runId, t.modelRequestId)
      .where(sql`model_request_id is not null`),
  ],
);

/** The result store: immutable versions; byte size, line count and hash are computed by the database. */
export const runResults = sourcebound.table(
  'run_results',
  {
    id: uuid('id').notNull(),
    version: integer('version').notNull(),
    runId: uuid('run_id')
      .notNull()
      .references(() => runs.id, { onDelete: 'cascade' }),
    kind: text('kind').notNull(),
    label: text('label'),
    content: text('content').notNull(),
    byteSize: integer('byte_size').notNull(),
    lineCount: integer('line_count').notNull(),
    /** UTF-8 bytes of the content as a JSON string (quotes and escapes included): its exact share of a request. */
    jsonBytes: integer('json_bytes').notNull(),
    sha256: text('sha256').notNull(),
    createdAt: createdAt(),
  },
  (t) => [
    primaryKey({ name: 'run_results_pkey', columns: [t.id, t.version] }),
    check('run_results_kind_known', inList('kind', RUN_RESULT_KINDS)),
    check('run_results_version_positive', sql`${t.version} >= 1`),
    check('run_results_sizes', sql`${t.byteSize} >= 0 and ${t.lineCount} >= 0 and ${t.jsonBytes} >= ${t.byteSize} + 2`),
    sha256Hex('run_results_sha256_hex', t.sha256),
    index('run_results_run_idx').on(t.runId, t.kind),
  ],
);

export const runToolUnits = sourcebound.table(
  'run_tool_units',
  {
    id: bigint('id', { mode: 'number' }).primaryKey().generatedAlwaysAsIdentity(),
    runId: uuid('run_id').notNull(),
    /** The model turn that proposed this call. */
    turnSeq: bigint('turn_seq', { mode: 'number' }).notNull(),
    /** Position among the turn's proposals. */
    position: integer('position').notNull(),
    /** The model's id for the proposal (e.g. Anthropic `tool_use.id`). */
    proposalId: text('proposal_id').notNull(),
    toolName: text('tool_name').notNull(),
    input: jsonb('input').notNull(),
    status: text('status').notNull().default('proposed'),
    /** The application's identity of the dispatch (idempotency key of the tool call). */
    dispatchId: text('dispatch_id'),
    resultId: uuid('result_id'),
    resultVersion: integer('result_version'),
    /** Whether the result body is shown inline (true) or only as a reference to the result store (externalized). */
    resultInline: boolean('result_inline').notNull().default(true),
    error: text('error'),
    dispatchedAt: timestamp('dispatched_at', { withTimezone: true }),
    settledAt: timestamp('settled_at', { withTimezone: true }),
    createdAt: createdAt(),
  },
  (t) => [
    foreignKey({ name: 'run_tool_units_turn_fk', columns: [t.runId, t.turnSeq], foreignColumns: [runTurns.runId, runTurns.seq] }).onDelete(
      'cascade',
    ),
    // Cascade only so that erasing a Run never trips over the order in which its rows go; guards refuse every other delete.
    foreignKey({
      name: 'run_tool_units_result_fk',
      columns: [t.resultId, t.resultVersion],
      foreignColumns: [runResults.id, runResults.version],
    }).onDelete('cascade'),
    check('run_tool_units_status_known', inList('status', TOOL_UNIT_STATUSES)),
    check(
      'run_tool_units_dispatch_matches_status',
      sql`case ${t.status} when 'proposed' then ${t.dispatchId} is null when 'failed' then true else ${t.dispatchId} is not null end`,
    ),
    check(
      'run_tool_units_result_matches_status',
      sql`case ${t.status} when 'settled' then ${t.resultId} is not null when 'proposed' then ${t.resultId} is null when 'dispatched' then ${t.resultId} is null else true end`,
    ),
    check('run_tool_units_settled_at', sql`(${t.status} in ('settled', 'failed', 'unknown')) = (${t.settledAt} is not null)`),
    check('run_tool_units_position', sql`${t.position} >= 0`),
    unique('run_tool_units_proposal_key').on(t.runId, t.proposalId),
    unique('run_tool_units_position_key').on(t.turnSeq, t.position),
    unique('run_tool_units_dispatch_key').on(t.runId, t.dispatchId),
    index('run_tool_units_result_idx')
      .on(t.resultId, t.resultVersion)
      .where(sql`result_id is not null`),
  ],
);

/** One row per Run that has a budget; a missing row means no limit in either dimension. */
export const runBudgets = sourcebound.table(
  'run_budgets',
  {
    runId: uuid('run_id')
      .primaryKey()
      .references(() => runs.id, { onDelete: 'cascade' }),
    /** Model requests the Run may make; null = no limit. */
    requestsLimit: integer('requests_limit'),
    /** Tokens (input + output) the Run may spend; null = no limit. */
    tokensLimit: bigint('tokens_limit', { mode: 'number' }),
    requestsUsed: integer('requests_used').notNull().default(0),
    tokensUsed: bigint('tokens_used', { mode: 'number' }).notNull().default(0),
    requestsReserved: integer('requests_reserved').notNull().default(0),
    tokensReserved: bigint('tokens_reserved', { mode: 'number' }).notNull().default(0),
    updatedAt: timestamp('updated_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [
    check(
      'run_budgets_nonnegative',
      sql`coalesce(${t.requestsLimit}, 0) >= 0 and coalesce(${t.tokensLimit}, 0) >= 0
    and ${t.requestsUsed} >= 0 and ${t.tokensUsed} >= 0 and ${t.requestsReserved} >= 0 and ${t.tokensReserved} >= 0`,
    ),
  ],
);

export const runSummaryRequests = sourcebound.table(
  'run_summary_requests',
  {
    /** The summary request identity (one dispatch). */
    id: uuid('id').primaryKey().defaultRandom(),
    runId: uuid('run_id').notNull(),
    conversationId: uuid('conversation_id').notNull(),
    scope: text('scope').notNull(),
    /** SHA-256 of the candidate identity (run, predecessor, range, source hash, model, prompt version). */
    identityKey: text('identity_key').notNull(),
    /** Dispatch number within the identity (1, 2, ...); only spent ones count against the bound. */
    attempt: integer('attempt').notNull(),
    predecessorId: uuid('predecessor_id').references((): AnyPgColumn => runCheckpoints.id, { onDelete: 'cascade' }),
    fromSeq: bigint('from_seq', { mode: 'number' }).notNull(),
    toSeq: bigint('to_seq', { mode: 'number' }).notNull(),
    compactedSeqs: bigint('compacted_seqs', { mode: 'number' }).array().notNull(),
    sourceHash: text('source_hash').notNull(),
    hashVersion: integer('hash_version').notNull(),
    model: text('model').notNull(),
    promptVersion: text('prompt_version').notNull(),
    maxChars: integer('max_chars').notNull(),
    inputBytes: integer('input_bytes').notNull(),
    status: text('status').notNull().default('dispatched'),
    /** Whether this dispatch counts as an attempt (ok, invalid, unknown); null while in flight. */
    spent: boolean('spent'),
    reason: text('reason'),
    summary: text('summary'),
    /** The model that answered, as the outcome reported it (ok and invalid outcomes). */
    answerModel: text('answer_model'),
    providerRequestId: text('provider_request_id'),
    usage: jsonb('usage'),
    /** The grounding check of the answer (src/grounding/index.ts), as `kind:text`: facts checked, and those not in the material. */
    groundingChecked: text('grounding_checked').array(),
    groundingUngrounded: text('grounding_ungrounded').array(),
    reservedRequests: integer('reserved_requests').notNull(),
    reservedTokens: bigint('reserved_tokens', { mode: 'number' }).notNull(),
    chargedRequests: integer('charged_requests'),
    chargedTokens: bigint('charged_tokens', { mode: 'number' }),
    /** A deferred request is not tried again before this time. */
    notBefore: timestamp('not_before', { withTimezone: true }),
    /** After this, an unsettled dispatch is presumed lost and settled as unknown. */
    leaseExpiresAt: timestamp('lease_expires_at', { withTimezone: true }).notNull(),
    dispatchedAt: timestamp('dispatched_at', { withTimezone: true }).notNull().defaultNow(),
    settledAt: timestamp('settled_at', { withTimezone: true }),
  },
  (t) => [
    foreignKey({
      name: 'run_summary_requests_run_fk',
      columns: [t.runId, t.conversationId],
      foreignColumns: [runs.id, runs.conversationId],
    }).onDelete('cascade'),
    foreignKey({
      name: 'run_summary_requests_scope_fk',
      columns: [t.conversationId, t.scope],
      foreignColumns: [conversations.id, conversations.scope],
    }).onDelete('cascade'),
    check('run_summary_requests_status_known', inList('status', SUMMARY_REQUEST_STATUSES)),
    check(
      'run_summary_requests_settled',
      sql`(${t.status} = 'dispatched') = (${t.settledAt} is null) and (${t.status} = 'dispatched') = (${t.spent} is null)`,
    ),
    check(
      'run_summary_requests_grounding',
      sql`(${t.groundingChecked} is null) = (${t.groundingUngrounded} is null) and ${t.groundingUngrounded} <@ ${t.groundingChecked}`,
    ),
    check('run_summary_requests_ok_has_text', sql`${t.status} <> 'ok' or (${t.summary} is not null and length(${t.summary}) > 0)`),
    check('run_summary_requests_range', sql`${t.fromSeq} <= ${t.toSeq} and cardinality(${t.compactedSeqs}) >= 1`),
    check('run_summary_requests_attempt_positive', sql`${t.attempt} >= 1`),
    sha256Hex('run_summary_requests_identity_hex', t.identityKey),
    sha256Hex('run_summary_requests_source_hash_hex', t.sourceHash),
    unique('run_summary_requests_identity_attempt_key').on(t.identityKey, t.attempt),
    // At most one summary request of a Run in flight: a second preparer waits for its settlement (or lease expiry).
    uniqueIndex('run_summary_requests_in_flight_key')
      .on(t.runId)
      .where(sql`status = 'dispatched'`),
    index('run_summary_requests_run_idx').on(t.runId, t.dispatchedAt),
    index('run_summary_requests_conversation_idx').on(t.conversationId),
    index('run_summary_requests_predecessor_idx')
      .on(t.predecessorId)
      .where(sql`predecessor_id is not null`),
  ],
);

export const runCheckpoints = sourcebound.table(
  'run_checkpoints',
  {
    id: uuid('id').primaryKey().defaultRandom(),
    runId: uuid('run_id').notNull(),
    conversationId: uuid('conversation_id').notNull(),
    scope: text('scope').notNull(),
    /** 1 for a Run's first checkpoint, then predecessor's + 1. */
    segment: integer('segment').notNull(),
    predecessorId: uuid('predecessor_id').references((): AnyPgColumn => runCheckpoints.id, { onDelete: 'cascade' }),
    /** The newest correction revision when the checkpoint was made (0: none). */
    correctionRevision: integer('correction_revision').notNull(),
    /** The model the next request was assembled for. */
    modelRoute: text('model_route').notNull(),
    fromSeq: bigint('from_seq', { mode: 'number' }).notNull(),
    toSeq: bigint('to_seq', { mode: 'number' }).notNull(),
    /** The model turns whose work groups the summary replaces, in order. */
    compactedSeqs: bigint('compacted_seqs', { mode: 'number' }).array().notNull(),
    /** One source hash per compacted work group, aligned with compacted_seqs. */
    sourceHashes: text('source_hashes').array().notNull(),
    sourceHash: text('source_hash').notNull(),
    hashVersion: integer('hash_version').notNull(),
    /** The tool units inside the range: proposal, dispatch, settlement, result id and version. */
    toolResultRefs: jsonb('tool_result_refs').notNull(),
    summaryRequestId: uuid('summary_request_id')
      .notNull()
      .references(() => runSummaryRequests.id, { onDelete: 'cascade' }),
    summaryModel: text('summary_model').notNull(),
    promptVersion: text('prompt_version').notNull(),
    summary: text('summary').notNull(),
    summaryBytes: integer('summary_bytes').notNull(),
    createdAt: createdAt(),
  },
  (t) => [
    foreignKey({
      name: 'run_checkpoints_run_fk',
      columns: [t.runId, t.conversationId],
      foreignColumns: [runs.id, runs.conversationId],
    }).onDelete('cascade'),
    foreignKey({
      name: 'run_checkpoints_scope_fk',
      columns: [t.conversationId, t.scope],
      foreignColumns: [conversations.id, conversations.scope],
    }).onDelete('cascade'),
    unique('run_checkpoints_segment_key').on(t.runId, t.segment),
    unique('run_checkpoints_summary_request_key').on(t.summaryRequestId),
    check('run_checkpoints_chain', sql`(${t.segment} = 1) = (${t.predecessorId} is null) and ${t.segment} >= 1`),
    check('run_checkpoints_range', sql`${t.fromSeq} <= ${t.toSeq}`),
    check(
      'run_checkpoints_sources',
      sql`cardinality(${t.compactedSeqs}) >= 1 and cardinality(${t.compactedSeqs}) = cardinality(${t.sourceHashes})`,
    ),
    check('run_checkpoints_summary', sql`length(${t.summary}) > 0 and ${t.summaryBytes} = octet_length(${t.summary})`),
    check('run_checkpoints_correction_revision', sql`${t.correctionRevision} >= 0`),
    sha256Hex('run_checkpoints_source_hash_hex', t.sourceHash),
    index('run_checkpoints_conversation_idx').on(t.conversationId),
    index('run_checkpoints_predecessor_idx')
      .on(t.predecessorId)
      .where(sql`predecessor_id is not null`),
  ],
);
