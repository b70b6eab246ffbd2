/**
 * The sourcebound schema, as drizzle sees it. Applications write
 * `conversations`, `runs` and `messages` directly (SQL or drizzle): their
 * column names are a public contract. Everything else is written by
 * sourcebound. Triggers and functions live in hand-written migrations
 * (migrations/*_*.sql), each headed by the invariant it guards.
 *
 * Terminology
 * - Conversation: a durable thread a user can reopen, in one scope (tenant).
 * - Run: the execution of one request in a Conversation; `seq` orders runs.
 * - Message: a user or assistant text of one Run.
 * - Pair: the user message and completed assistant message of one eligible
 *   Run; `pairs` is their trigger-maintained index (sourcebound.refresh_pair(), called by the messages and runs triggers).
 * - Summary record: one attempt-bounded, immutable-once-completed summary of
 *   exactly ten pairs, bound to their ids and a source hash.
 */
import { sql } from 'drizzle-orm';
import {
  bigint,
  boolean,
  check,
  doublePrecision,
  foreignKey,
  index,
  integer,
  jsonb,
  pgSchema,
  primaryKey,
  text,
  timestamp,
  unique,
  uniqueIndex,
  uuid,
} from 'drizzle-orm/pg-core';

export const sourcebound = pgSchema('sourcebound');

export const RUN_STATUSES = ['queued', 'running', 'completed', 'partial', 'clarify_pending', 'failed', 'cancelled'] as const;
export const MESSAGE_ROLES = ['user', 'assistant'] as const;
export const MESSAGE_STATUSES = ['streaming', 'completed', 'failed'] as const;
export const SUMMARY_STATUSES = ['running', 'pending', 'completed', 'failed', 'stale'] as const;
export const ATTEMPT_OUTCOMES = ['ok', 'invalid', 'deferred', 'unknown', 'config', 'stale', 'lease_expired'] as const;

const inList = (column: string, values: readonly string[]) => sql.raw(`${column} in (${values.map((v) => `'${v}'`).join(', ')})`);

const createdAt = () => timestamp('created_at', { withTimezone: true }).notNull().defaultNow();

export const conversations = sourcebound.table(
  'conversations',
  {
    id: uuid('id').primaryKey().defaultRandom(),
    scope: text('scope').notNull(),
    createdAt: createdAt(),
  },
  (t) => [
    check('conversations_scope_not_empty', sql`length(${t.scope}) > 0`),
    // Target of the composite foreign keys that keep summaries in their conversation's scope.
    unique('conversations_id_scope_key').on(t.id, t.scope),
  ],
);

export const runs = sourcebound.table(
  'runs',
  {
    id: uuid('id').primaryKey().defaultRandom(),
    conversationId: uuid('conversation_id')
      .notNull()
      .references(() => conversations.id, { onDelete: 'cascade' }),
    status: text('status').notNull(),
    // Pair order is the order runs were inserted: a global, monotonic sequence.
    seq: bigint('seq', { mode: 'number' }).notNull().generatedAlwaysAsIdentity(),
    createdAt: createdAt(),
  },
  (t) => [
    check('runs_status_known', inList('status', RUN_STATUSES)),
    // Lets messages reference (run, conversation) together, so a message can never
    // belong to a run of another conversation.
    unique('runs_id_conversation_key').on(t.id, t.conversationId),
    index('runs_conversation_seq_idx').on(t.conversationId, t.seq),
    // Runs not settled yet, for the projection's `problems` (one stuck past a threshold hides its pair): small, as most runs settle.
    index('runs_open_idx')
      .on(t.conversationId, t.createdAt)
      .where(sql`status in ('queued', 'running')`),
  ],
);

export const messages = sourcebound.table(
  'messages',
  {
    id: uuid('id').primaryKey().defaultRandom(),
    conversationId: uuid('conversation_id')
      .notNull()
      .references(() => conversations.id, { onDelete: 'cascade' }),
    runId: uuid('run_id'),
    role: text('role').notNull(),
    content: text('content').notNull().default(''),
    status: text('status').notNull().default('completed'),
    createdAt: createdAt(),
    // When the content of the completed message last changed (an edit), set by the messages_note_edit trigger; null if never.
    editedAt: timestamp('edited_at', { withTimezone: true }),
  },
  (t) => [
    check('messages_role_known', inList('role', MESSAGE_ROLES)),
    check('messages_status_known', inList('status', MESSAGE_STATUSES)),
    foreignKey({
      name: 'messages_run_same_conversation_fk',
      columns: [t.runId, t.conversationId],
      foreignColumns: [runs.id, runs.conversationId],
    }).onDelete('cascade'),
    // At most one user and one assistant message per run.
    uniqueIndex('messages_run_role_key')
      .on(t.runId, t.role)
      .where(sql`run_id is not null`),
    index('messages_conversation_idx').on(t.conversationId),
    // Messages no pair can take (no run) and replies still streaming, for the projection's `problems`: rare rows, so cheap to keep.
    index('messages_without_run_idx')
      .on(t.conversationId)
      .where(sql`run_id is null`),
    index('messages_streaming_idx')
      .on(t.conversationId)
      .where(sql`status = 'streaming'`),
  ],
);

/**
 * Derived, trigger-maintained: one row per eligible pair, with its zero-based
 * index among the conversation's eligible pairs. Written only by
 * sourcebound.refresh_pair(); applications read it through sourcebound.eligible_pairs.
 */
export const pairs = sourcebound.table(
  'pairs',
  {
    runId: uuid('run_id').primaryKey(),
    conversationId: uuid('conversation_id')
      .notNull()
      .references(() => conversations.id, { onDelete: 'cascade' }),
    runSeq: bigint('run_seq', { mode: 'number' }).notNull(),
    pairIndex: integer('pair_index').notNull(),
    userMessageId: uuid('user_message_id').notNull(),
    assistantMessageId: uuid('assistant_message_id').notNull(),
  },
  (t) => [
    check('pairs_index_nonnegative', sql`${t.pairIndex} >= 0`),
    uniqueIndex('pairs_conversation_seq_key').on(t.conversationId, t.runSeq),
  ],
);

export const conversationSummaries = sourcebound.table(
  'conversation_summaries',
  {
    id: uuid('id').primaryKey().defaultRandom(),
    conversationId: uuid('conversation_id').notNull(),
    scope: text('scope').notNull(),
    fromPair: integer('from_pair').notNull(),
    toPair: integer('to_pair').notNull(),
    sourceMessageIds: uuid('source_message_ids').array().notNull(),
    sourceHash: text('source_hash').notNull(),
    hashVersion: integer('hash_version').notNull(),
    model: text('model').notNull(),
    promptVersion: text('prompt_version').notNull(),
    status: text('status').notNull(),
    summary: text('summary'),
    attemptsSpent: integer('attempts_spent').notNull().default(0),
    leaseOwner: text('lease_owner'),
    leaseExpiresAt: timestamp('lease_expires_at', { withTimezone: true }),
    notBefore: timestamp('not_before', { withTimezone: true }),
    failureReason: text('failure_reason'),
    createdAt: createdAt(),
    updatedAt: timestamp('updated_at', { withTimezone: true }).notNull().defaultNow(),
    completedAt: timestamp('completed_at', { withTimezone: true }),
  },
  (t) => [
    foreignKey({
      name: 'conversation_summaries_conversation_fk',
      columns: [t.conversationId, t.scope],
      foreignColumns: [conversations.id, conversations.scope],
    }).onDelete('cascade'),
    // The identity of a summary. This constraint, not the advisory lock, is the final arbiter.
    unique('conversation_summaries_identity_key').on(t.conversationId, t.fromPair, t.toPair, t.sourceHash, t.model, t.promptVersion),
    check('conversation_summaries_status_known', inList('status', SUMMARY_STATUSES)),
    check('conversation_summaries_range_aligned', sql`${t.fromPair} >= 0 and ${t.fromPair} % 10 = 0 and ${t.toPair} = ${t.fromPair} + 9`),
    check('conversation_summaries_twenty_sources', sql`cardinality(${t.sourceMessageIds}) = 20`),
    check('conversation_summaries_hash_hex', sql`${t.sourceHash} ~ '^[0-9a-f]{64}$'`),
    check('conversation_summaries_attempts_bounded', sql`${t.attemptsSpent} between 0 and 2`),
    check(
      'conversation_summaries_completed_has_text',
      sql`${t.status} <> 'completed' or (${t.summary} is not null and length(${t.summary}) > 0 and ${t.completedAt} is not null)`,
    ),
    check(
      'conversation_summaries_running_has_lease',
      sql`${t.status} <> 'running' or (${t.leaseOwner} is not null and ${t.leaseExpiresAt} is not null)`,
    ),
    index('conversation_summaries_conversation_idx').on(t.conversationId, t.fromPair),
    index('conversation_summaries_open_idx')
      .on(t.status)
      .where(sql`status in ('running', 'pending')`),
  ],
);

/**
 * Derived, trigger-maintained: one row per plannable range that may need
 * work (gained, or its source changed), written by sourcebound.pairs_changed()
 * in the transaction of the change and removed only when a completed or
 * failed record binds the range's source as it is then. A job starts from
 * these rows, and the sweep reads nothing else, so the cost of both is
 * proportional to what needs work, not to history. `generation` grows on
 * every change, so a removal that raced an edit is refused.
 */
export const compactionMarks = sourcebound.table(
  'compaction_marks',
  {
    conversationId: uuid('conversation_id')
      .notNull()
      .references(() => conversations.id, { onDelete: 'cascade' }),
    fromPair: integer('from_pair').notNull(),
    generation: bigint('generation', { mode: 'number' }).notNull().default(1),
    markedAt: timestamp('marked_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [
    primaryKey({ name: 'compaction_marks_pkey', columns: [t.conversationId, t.fromPair] }),
    check('compaction_marks_range_aligned', sql`${t.fromPair} >= 0 and ${t.fromPair} % 10 = 0`),
  ],
);

/**
 * Summarizer calls started per scope (tenant) per clock hour, across the fleet:
 * the per-scope limit (SOURCEBOUND_SCOPE_CALLS_PER_HOUR) counts here, through
 * sourcebound.scope_call_admit(), one row per scope and hour.
 */
export const scopeCallWindows = sourcebound.table(
  'scope_call_windows',
  {
    scope: text('scope').notNull(),
    hourStart: timestamp('hour_start', { withTimezone: true }).notNull(),
    calls: integer('calls').notNull(),
  },
  (t) => [
    primaryKey({ name: 'scope_call_windows_pkey', columns: [t.scope, t.hourStart] }),
    check('scope_call_windows_calls_positive', sql`${t.calls} > 0`),
  ],
);

/** Where the sweep stopped: it pages through the marked conversations instead of taking the same first ones every run. */
export const compactionSweepCursor = sourcebound.table(
  'compaction_sweep_cursor',
  {
    singleton: boolean('singleton').primaryKey().default(true),
    afterConversationId: uuid('after_conversation_id'),
  },
  (t) => [check('compaction_sweep_cursor_one_row', sql`${t.singleton}`)],
);

/** Every dispatch of a summary identity, kept: not only the last. */
export const conversationSummaryAttempts = sourcebound.table(
  'conversation_summary_attempts',
  {
    id: bigint('id', { mode: 'number' }).primaryKey().generatedAlwaysAsIdentity(),
    summaryId: uuid('summary_id')
      .notNull()
      .references(() => conversationSummaries.id, { onDelete: 'cascade' }),
    workerId: text('worker_id').notNull(),
    startedAt: timestamp('started_at', { withTimezone: true }).notNull().defaultNow(),
    finishedAt: timestamp('finished_at', { withTimezone: true }),
    outcome: text('outcome'),
    // Whether this dispatch counts against the two attempts of its identity.
    spent: boolean('spent'),
    reason: text('reason'),
    requestId: text('request_id'),
    usage: jsonb('usage'),
    inputChars: integer('input_chars'),
    // The grounding check of the answer (src/grounding/index.ts), as `kind:text`: every fact checked, and
    // those its material does not contain. Null when no answer text was checked.
    groundingChecked: text('grounding_checked').array(),
    groundingUngrounded: text('grounding_ungrounded').array(),
  },
  (t) => [
    check('conversation_summary_attempts_outcome_known', sql`outcome is null or ${inList('outcome', ATTEMPT_OUTCOMES)}`),
    check('conversation_summary_attempts_settled', sql`(outcome is null) = (finished_at is null) and (outcome is null) = (spent is null)`),
    check(
      'conversation_summary_attempts_grounding',
      sql`(${t.groundingChecked} is null) = (${t.groundingUngrounded} is null) and ${t.groundingUngrounded} <@ ${t.groundingChecked}`,
    ),
    index('conversation_summary_attempts_summary_idx').on(t.summaryId),
  ],
);

/**
 * The cache-stable layout of a conversation's projection at one budget
 * (src/projection/layout.ts): where the projected history starts, which
 * summaries it shows, up to which pair it was laid out, and the SHA-256 of the
 * messages it produced. Written by the projection only when it rewrites the
 * layout; between rewrites the history only grows at its end. A hint, never a
 * source of truth: every use re-checks each summary's binding and the hash of
 * the rebuilt prefix, and a missing or stale row only means a rewrite.
 * With it, the projection's ledger (src/projection/cache.ts): what its
 * requests at this budget saved against sending the whole history, up to the
 * rewrite that made the row, and how many bytes of the whole history the
 * layout leaves out (each request that extends it saves reading them). A
 * rewrite that is not forced is taken only while the ledger stays in credit.
 */
export const projectionLayouts = sourcebound.table(
  'projection_layouts',
  {
    conversationId: uuid('conversation_id')
      .notNull()
      .references(() => conversations.id, { onDelete: 'cascade' }),
    budgetBytes: integer('budget_bytes').notNull(),
    // Pairs startPair..endPair-1 are laid out; pairs before startPair are omitted.
    startPair: integer('start_pair').notNull(),
    endPair: integer('end_pair').notNull(),
    // [{ fromPair, recordId }] of the summarized ranges, oldest first.
    summaries: jsonb('summaries').notNull(),
    // [{ fromPair, toPair, reason? }] spans left out between startPair and endPair (reason 'too_large' for a pair left
    // out alone; else the gap after the summaries); every other laid-out pair is raw.
    gaps: jsonb('gaps').notNull().default([]),
    prefixSha256: text('prefix_sha256').notNull(),
    prefixBytes: integer('prefix_bytes').notNull(),
    // SHA-256 of the summaries at the start alone (the head, cached up to its breakpoint); null without one.
    headSha256: text('head_sha256'),
    // Saved against the whole history, cached, in uncached-byte prices, up to and with the request that made this layout.
    savedCost: doublePrecision('saved_cost').notNull().default(0),
    // A lower bound on the whole history's bytes less this layout's, when it was made.
    savesBytes: bigint('saves_bytes', { mode: 'number' }).notNull().default(0),
    rewrittenAt: timestamp('rewritten_at', { withTimezone: true }).notNull().defaultNow(),
    // When a request last sent this layout (the app's clock): past the prompt cache's lifetime it is laid out afresh.
    usedAt: timestamp('used_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [
    primaryKey({ name: 'projection_layouts_pkey', columns: [t.conversationId, t.budgetBytes] }),
    check('projection_layouts_span', sql`${t.budgetBytes} >= 0 and 0 <= ${t.startPair} and ${t.startPair} <= ${t.endPair}`),
    check('projection_layouts_hash_hex', sql`${t.prefixSha256} ~ '^[0-9a-f]{64}$'`),
    check('projection_layouts_head_hash_hex', sql`${t.headSha256} is null or ${t.headSha256} ~ '^[0-9a-f]{64}$'`),
    // Finite (PostgreSQL orders NaN above Infinity), and no layout saves a negative number of bytes.
    check('projection_layouts_ledger', sql`${t.savedCost} > '-Infinity' and ${t.savedCost} < 'Infinity' and ${t.savesBytes} >= 0`),
  ],
);
