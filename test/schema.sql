-- Schema sourcebound: written by `npm run db:dump` (test/schema.test.ts); do not edit.

-- table compaction_marks
  column conversation_id uuid not null
  column from_pair integer not null
  column generation bigint not null default 1
  column marked_at timestamp with time zone not null default now()
  constraint compaction_marks_conversation_id_conversations_id_fk: FOREIGN KEY (conversation_id) REFERENCES sourcebound.conversations(id) ON DELETE CASCADE
  constraint compaction_marks_pkey: PRIMARY KEY (conversation_id, from_pair)
  constraint compaction_marks_range_aligned: CHECK (from_pair >= 0 AND (from_pair % 10) = 0)

-- table compaction_sweep_cursor
  column singleton boolean not null default true
  column after_conversation_id uuid
  constraint compaction_sweep_cursor_one_row: CHECK (singleton)
  constraint compaction_sweep_cursor_pkey: PRIMARY KEY (singleton)

-- table conversation_summaries
  column id uuid not null default gen_random_uuid()
  column conversation_id uuid not null
  column scope text not null
  column from_pair integer not null
  column to_pair integer not null
  column source_message_ids uuid[] not null
  column source_hash text not null
  column hash_version integer not null
  column model text not null
  column prompt_version text not null
  column status text not null
  column summary text
  column attempts_spent integer not null default 0
  column lease_owner text
  column lease_expires_at timestamp with time zone
  column not_before timestamp with time zone
  column failure_reason text
  column created_at timestamp with time zone not null default now()
  column updated_at timestamp with time zone not null default now()
  column completed_at timestamp with time zone
  constraint conversation_summaries_attempts_bounded: CHECK (attempts_spent >= 0 AND attempts_spent <= 2)
  constraint conversation_summaries_completed_has_text: CHECK (status <> 'completed'::text OR summary IS NOT NULL AND length(summary) > 0 AND completed_at IS NOT NULL)
  constraint conversation_summaries_conversation_fk: FOREIGN KEY (conversation_id, scope) REFERENCES sourcebound.conversations(id, scope) ON DELETE CASCADE
  constraint conversation_summaries_hash_hex: CHECK (source_hash ~ '^[0-9a-f]{64}$'::text)
  constraint conversation_summaries_identity_key: UNIQUE (conversation_id, from_pair, to_pair, source_hash, model, prompt_version)
  constraint conversation_summaries_pkey: PRIMARY KEY (id)
  constraint conversation_summaries_range_aligned: CHECK (from_pair >= 0 AND (from_pair % 10) = 0 AND to_pair = (from_pair + 9))
  constraint conversation_summaries_running_has_lease: CHECK (status <> 'running'::text OR lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL)
  constraint conversation_summaries_status_known: CHECK (status = ANY (ARRAY['running'::text, 'pending'::text, 'completed'::text, 'failed'::text, 'stale'::text]))
  constraint conversation_summaries_twenty_sources: CHECK (cardinality(source_message_ids) = 20)
  CREATE INDEX conversation_summaries_conversation_idx ON sourcebound.conversation_summaries USING btree (conversation_id, from_pair)
  CREATE INDEX conversation_summaries_open_idx ON sourcebound.conversation_summaries USING btree (status) WHERE (status = ANY (ARRAY['running'::text, 'pending'::text]))
  CREATE TRIGGER conversation_summaries_guard_delete BEFORE DELETE ON sourcebound.conversation_summaries FOR EACH ROW EXECUTE FUNCTION sourcebound.conversation_summaries_guard()
  CREATE TRIGGER conversation_summaries_guard_update BEFORE UPDATE ON sourcebound.conversation_summaries FOR EACH ROW WHEN ((old.status = ANY (ARRAY['completed'::text, 'failed'::text])) OR new.conversation_id IS DISTINCT FROM old.conversation_id OR new.scope IS DISTINCT FROM old.scope OR new.from_pair IS DISTINCT FROM old.from_pair OR new.to_pair IS DISTINCT FROM old.to_pair OR new.source_message_ids IS DISTINCT FROM old.source_message_ids OR new.source_hash IS DISTINCT FROM old.source_hash OR new.hash_version IS DISTINCT FROM old.hash_version OR new.model IS DISTINCT FROM old.model OR new.prompt_version IS DISTINCT FROM old.prompt_version OR new.attempts_spent < old.attempts_spent OR new.updated_at IS DISTINCT FROM now()) EXECUTE FUNCTION sourcebound.conversation_summaries_guard()
  CREATE TRIGGER conversation_summaries_no_truncate BEFORE TRUNCATE ON sourcebound.conversation_summaries FOR EACH STATEMENT EXECUTE FUNCTION sourcebound.refuse_truncate()
  policy app_scope for all to public using ((scope = sourcebound.current_scope()))
  policy reader_all for all to sourcebound_reader using (true)
  policy worker_all for all to sourcebound_worker using (true)

-- table conversation_summary_attempts
  column id bigint not null generated always as identity
  column summary_id uuid not null
  column worker_id text not null
  column started_at timestamp with time zone not null default now()
  column finished_at timestamp with time zone
  column outcome text
  column spent boolean
  column reason text
  column request_id text
  column usage jsonb
  column input_chars integer
  column grounding_checked text[]
  column grounding_ungrounded text[]
  constraint conversation_summary_attempts_grounding: CHECK ((grounding_checked IS NULL) = (grounding_ungrounded IS NULL) AND grounding_ungrounded <@ grounding_checked)
  constraint conversation_summary_attempts_outcome_known: CHECK (outcome IS NULL OR (outcome = ANY (ARRAY['ok'::text, 'invalid'::text, 'deferred'::text, 'unknown'::text, 'config'::text, 'stale'::text, 'lease_expired'::text])))
  constraint conversation_summary_attempts_pkey: PRIMARY KEY (id)
  constraint conversation_summary_attempts_settled: CHECK ((outcome IS NULL) = (finished_at IS NULL) AND (outcome IS NULL) = (spent IS NULL))
  constraint conversation_summary_attempts_summary_id_conversation_summaries: FOREIGN KEY (summary_id) REFERENCES sourcebound.conversation_summaries(id) ON DELETE CASCADE
  CREATE INDEX conversation_summary_attempts_summary_idx ON sourcebound.conversation_summary_attempts USING btree (summary_id)
  CREATE TRIGGER conversation_summary_attempts_guard_delete BEFORE DELETE ON sourcebound.conversation_summary_attempts FOR EACH ROW EXECUTE FUNCTION sourcebound.conversation_summary_attempts_guard()
  CREATE TRIGGER conversation_summary_attempts_guard_update BEFORE UPDATE ON sourcebound.conversation_summary_attempts FOR EACH ROW WHEN (old.outcome IS NOT NULL OR new.summary_id IS DISTINCT FROM old.summary_id OR new.worker_id IS DISTINCT FROM old.worker_id OR new.started_at IS DISTINCT FROM old.started_at) EXECUTE FUNCTION sourcebound.conversation_summary_attempts_guard()
  CREATE TRIGGER conversation_summary_attempts_no_truncate BEFORE TRUNCATE ON sourcebound.conversation_summary_attempts FOR EACH STATEMENT EXECUTE FUNCTION sourcebound.refuse_truncate()
  policy app_scope for all to public using (( SELECT (s.scope = sourcebound.current_scope()) FROM sourcebound.conversation_summaries s WHERE (s.id = conversation_summary_attempts.summary_id)))
  policy reader_all for all to sourcebound_reader using (true)
  policy worker_all for all to sourcebound_worker using (true)

-- sequence conversation_summary_attempts_id_seq (owned by sourcebound.conversation_summary_attempts.id)

-- table conversations
  column id uuid not null default gen_random_uuid()
  column scope text not null
  column created_at timestamp with time zone not null default now()
  constraint conversations_id_scope_key: UNIQUE (id, scope)
  constraint conversations_pkey: PRIMARY KEY (id)
  constraint conversations_scope_not_empty: CHECK (length(scope) > 0)
  CREATE TRIGGER conversations_scope_fixed BEFORE UPDATE OF id, scope ON sourcebound.conversations FOR EACH ROW WHEN (new.scope IS DISTINCT FROM old.scope OR new.id IS DISTINCT FROM old.id) EXECUTE FUNCTION sourcebound.scope_fixed()
  policy app_scope for all to public using ((scope = sourcebound.current_scope())) with check ((scope = sourcebound.current_scope()))
  policy reader_all for all to sourcebound_reader using (true)
  policy worker_all for all to sourcebound_worker using (true)

-- view eligible_pairs
SELECT p.conversation_id,
    p.pair_index,
    p.run_id,
    p.run_seq,
    p.user_message_id,
    u.content AS user_text,
    p.assistant_message_id,
    a.content AS assistant_text
   FROM sourcebound.pairs p
     JOIN sourcebound.messages u ON u.id = p.user_message_id AND u.run_id = p.run_id AND u.conversation_id = p.conversation_id AND u.role = 'user'::text
     JOIN sourcebound.messages a ON a.id = p.assistant_message_id AND a.run_id = p.run_id AND a.conversation_id = p.conversation_id AND a.role = 'assistant'::text;

-- table messages
  column id uuid not null default gen_random_uuid()
  column conversation_id uuid not null
  column run_id uuid
  column role text not null
  column content text not null default ''::text
  column status text not null default 'completed'::text
  column created_at timestamp with time zone not null default now()
  column edited_at timestamp with time zone
  constraint messages_conversation_id_conversations_id_fk: FOREIGN KEY (conversation_id) REFERENCES sourcebound.conversations(id) ON DELETE CASCADE
  constraint messages_pkey: PRIMARY KEY (id)
  constraint messages_role_known: CHECK (role = ANY (ARRAY['user'::text, 'assistant'::text]))
  constraint messages_run_same_conversation_fk: FOREIGN KEY (run_id, conversation_id) REFERENCES sourcebound.runs(id, conversation_id) ON DELETE CASCADE
  constraint messages_status_known: CHECK (status = ANY (ARRAY['streaming'::text, 'completed'::text, 'failed'::text]))
  CREATE INDEX messages_conversation_idx ON sourcebound.messages USING btree (conversation_id)
  CREATE UNIQUE INDEX messages_run_role_key ON sourcebound.messages USING btree (run_id, role) WHERE (run_id IS NOT NULL)
  CREATE INDEX messages_streaming_idx ON sourcebound.messages USING btree (conversation_id) WHERE (status = 'streaming'::text)
  CREATE INDEX messages_without_run_idx ON sourcebound.messages USING btree (conversation_id) WHERE (run_id IS NULL)
  CREATE TRIGGER messages_note_edit BEFORE UPDATE OF content ON sourcebound.messages FOR EACH ROW WHEN (old.status = 'completed'::text AND new.content IS DISTINCT FROM old.content) EXECUTE FUNCTION sourcebound.messages_note_edit()
  CREATE TRIGGER messages_refresh_pair_del AFTER DELETE ON sourcebound.messages FOR EACH ROW WHEN (old.run_id IS NOT NULL) EXECUTE FUNCTION sourcebound.messages_refresh_pair()
  CREATE TRIGGER messages_refresh_pair_ins AFTER INSERT ON sourcebound.messages FOR EACH ROW WHEN (ARRAY[new.role, new.status] && '{user,completed}'::text[]) EXECUTE FUNCTION sourcebound.messages_refresh_pair()
  CREATE TRIGGER messages_refresh_pair_upd AFTER UPDATE ON sourcebound.messages FOR EACH ROW WHEN (ARRAY[old.role, old.status, new.role, new.status] && '{user,completed}'::text[]) EXECUTE FUNCTION sourcebound.messages_refresh_pair()
  CREATE TRIGGER messages_scope_fixed BEFORE UPDATE OF conversation_id ON sourcebound.messages FOR EACH ROW WHEN (new.conversation_id IS DISTINCT FROM old.conversation_id) EXECUTE FUNCTION sourcebound.scope_fixed()
  CREATE TRIGGER messages_size_limit BEFORE INSERT OR UPDATE OF content ON sourcebound.messages FOR EACH ROW WHEN (octet_length(new.content) > 65536) EXECUTE FUNCTION sourcebound.message_size_limit()
  CREATE TRIGGER messages_truncate_pairs AFTER TRUNCATE ON sourcebound.messages FOR EACH STATEMENT EXECUTE FUNCTION sourcebound.pairs_truncated()
  policy app_scope for all to public using (sourcebound.in_current_scope(conversation_id)) with check (sourcebound.in_current_scope(conversation_id))
  policy reader_all for all to sourcebound_reader using (true)
  policy worker_all for all to sourcebound_worker using (true)

-- table pairs
  column run_id uuid not null
  column conversation_id uuid not null
  column run_seq bigint not null
  column pair_index integer not null
  column user_message_id uuid not null
  column assistant_message_id uuid not null
  constraint pairs_conversation_id_conversations_id_fk: FOREIGN KEY (conversation_id) REFERENCES sourcebound.conversations(id) ON DELETE CASCADE
  constraint pairs_conversation_index_key: UNIQUE (conversation_id, pair_index) DEFERRABLE
  constraint pairs_index_nonnegative: CHECK (pair_index >= 0)
  constraint pairs_pkey: PRIMARY KEY (run_id)
  CREATE UNIQUE INDEX pairs_conversation_seq_key ON sourcebound.pairs USING btree (conversation_id, run_seq)
  policy app_scope for all to public using (sourcebound.in_current_scope(conversation_id)) with check (sourcebound.in_current_scope(conversation_id))
  policy reader_all for all to sourcebound_reader using (true)
  policy worker_all for all to sourcebound_worker using (true)

-- table projection_layouts
  column conversation_id uuid not null
  column budget_bytes integer not null
  column start_pair integer not null
  column end_pair integer not null
  column summaries jsonb not null
  column gaps jsonb not null default '[]'::jsonb
  column prefix_sha256 text not null
  column prefix_bytes integer not null
  column rewritten_at timestamp with time zone not null default now()
  column saved_cost double precision not null default 0
  column saves_bytes bigint not null default 0
  column head_sha256 text
  column used_at timestamp with time zone not null default now()
  constraint projection_layouts_conversation_id_conversations_id_fk: FOREIGN KEY (conversation_id) REFERENCES sourcebound.conversations(id) ON DELETE CASCADE
  constraint projection_layouts_hash_hex: CHECK (prefix_sha256 ~ '^[0-9a-f]{64}$'::text)
  constraint projection_layouts_head_hash_hex: CHECK (head_sha256 IS NULL OR head_sha256 ~ '^[0-9a-f]{64}$'::text)
  constraint projection_layouts_ledger: CHECK (saved_cost > '-Infinity'::double precision AND saved_cost < 'Infinity'::double precision AND saves_bytes >= 0)
  constraint projection_layouts_pkey: PRIMARY KEY (conversation_id, budget_bytes)
  constraint projection_layouts_span: CHECK (budget_bytes >= 0 AND 0 <= start_pair AND start_pair <= end_pair)
  policy app_scope for all to public using (sourcebound.in_current_scope(conversation_id)) with check (sourcebound.in_current_scope(conversation_id))
  policy reader_all for all to sourcebound_reader using (true)
  policy worker_all for all to sourcebound_worker using (true)

-- table run_budgets
  column run_id uuid not null
  column requests_limit integer
  column tokens_limit bigint
  column requests_used integer not null default 0
  column tokens_used bigint not null default 0
  column requests_reserved integer not null default 0
  column tokens_reserved bigint not null default 0
  column updated_at timestamp with time zone not null default now()
  constraint run_budgets_nonnegative: CHECK (COALESCE(requests_limit, 0) >= 0 AND COALESCE(tokens_limit, 0::bigint) >= 0 AND requests_used >= 0 AND tokens_used >= 0 AND requests_reserved >= 0 AND tokens_reserved >= 0)
  constraint run_budgets_pkey: PRIMARY KEY (run_id)
  constraint run_budgets_run_id_runs_id_fk: FOREIGN KEY (run_id) REFERENCES sourcebound.runs(id) ON DELETE CASCADE
  policy app_scope for all to public using (sourcebound.run_in_current_scope(run_id)) with check (sourcebound.run_in_current_scope(run_id))
  policy reader_all for all to sourcebound_reader using (true)
  policy worker_all for all to sourcebound_worker using (true)

-- table run_checkpoints
  column id uuid not null default gen_random_uuid()
  column run_id uuid not null
  column conversation_id uuid not null
  column scope text not null
  column segment integer not null
  column predecessor_id uuid
  column correction_revision integer not null
  column model_route text not null
  column from_seq bigint not null
  column to_seq bigint not null
  column compacted_seqs bigint[] not null
  column source_hashes text[] not null
  column source_hash text not null
  column hash_version integer not null
  column tool_result_refs jsonb not null
  column summary_request_id uuid not null
  column summary_model text not null
  column prompt_version text not null
  column summary text not null
  column summary_bytes integer not null
  column created_at timestamp with time zone not null default now()
  constraint run_checkpoints_chain: CHECK ((segment = 1) = (predecessor_id IS NULL) AND segment >= 1)
  constraint run_checkpoints_correction_revision: CHECK (correction_revision >= 0)
  constraint run_checkpoints_pkey: PRIMARY KEY (id)
  constraint run_checkpoints_predecessor_id_run_checkpoints_id_fk: FOREIGN KEY (predecessor_id) REFERENCES sourcebound.run_checkpoints(id) ON DELETE CASCADE
  constraint run_checkpoints_range: CHECK (from_seq <= to_seq)
  constraint run_checkpoints_run_fk: FOREIGN KEY (run_id, conversation_id) REFERENCES sourcebound.runs(id, conversation_id) ON DELETE CASCADE
  constraint run_checkpoints_scope_fk: FOREIGN KEY (conversation_id, scope) REFERENCES sourcebound.conversations(id, scope) ON DELETE CASCADE
  constraint run_checkpoints_segment_key: UNIQUE (run_id, segment)
  constraint run_checkpoints_source_hash_hex: CHECK (source_hash ~ '^[0-9a-f]{64}$'::text)
  constraint run_checkpoints_sources: CHECK (cardinality(compacted_seqs) >= 1 AND cardinality(compacted_seqs) = cardinality(source_hashes))
  constraint run_checkpoints_summary: CHECK (length(summary) > 0 AND summary_bytes = octet_length(summary))
  constraint run_checkpoints_summary_request_id_run_summary_requests_id_fk: FOREIGN KEY (summary_request_id) REFERENCES sourcebound.run_summary_requests(id) ON DELETE CASCADE
  constraint run_checkpoints_summary_request_key: UNIQUE (summary_request_id)
  CREATE INDEX run_checkpoints_conversation_idx ON sourcebound.run_checkpoints USING btree (conversation_id)
  CREATE INDEX run_checkpoints_predecessor_idx ON sourcebound.run_checkpoints USING btree (predecessor_id) WHERE (predecessor_id IS NOT NULL)
  CREATE TRIGGER run_checkpoints_guard BEFORE INSERT OR DELETE OR UPDATE ON sourcebound.run_checkpoints FOR EACH ROW EXECUTE FUNCTION sourcebound.run_checkpoints_guard()
  CREATE TRIGGER run_checkpoints_no_truncate BEFORE TRUNCATE ON sourcebound.run_checkpoints FOR EACH STATEMENT EXECUTE FUNCTION sourcebound.refuse_truncate()
  policy app_scope for all to public using ((scope = sourcebound.current_scope())) with check ((scope = sourcebound.current_scope()))
  policy reader_all for all to sourcebound_reader using (true)
  policy worker_all for all to sourcebound_worker using (true)

-- table run_model_requests
  column id bigint not null generated always as identity
  column run_id uuid not null
  column request_key text not null
  column request_bytes integer not null
  column input_tokens integer
  column output_tokens integer
  column created_at timestamp with time zone not null default now()
  constraint run_model_requests_key: UNIQUE (run_id, request_key)
  constraint run_model_requests_pkey: PRIMARY KEY (id)
  constraint run_model_requests_run_id_key: UNIQUE (run_id, id)
  constraint run_model_requests_run_id_runs_id_fk: FOREIGN KEY (run_id) REFERENCES sourcebound.runs(id) ON DELETE CASCADE
  constraint run_model_requests_sizes: CHECK (request_bytes >= 0 AND COALESCE(input_tokens, 0) >= 0 AND COALESCE(output_tokens, 0) >= 0)
  CREATE TRIGGER run_model_requests_guard BEFORE DELETE OR UPDATE ON sourcebound.run_model_requests FOR EACH ROW EXECUTE FUNCTION sourcebound.run_model_requests_guard()
  policy app_scope for all to public using (sourcebound.run_in_current_scope(run_id)) with check (sourcebound.run_in_current_scope(run_id))
  policy reader_all for all to sourcebound_reader using (true)
  policy worker_all for all to sourcebound_worker using (true)

-- sequence run_model_requests_id_seq (owned by sourcebound.run_model_requests.id)

-- table run_results
  column id uuid not null
  column version integer not null
  column run_id uuid not null
  column kind text not null
  column label text
  column content text not null
  column byte_size integer not null
  column line_count integer not null
  column json_bytes integer not null
  column sha256 text not null
  column created_at timestamp with time zone not null default now()
  constraint run_results_kind_known: CHECK (kind = ANY (ARRAY['external'::text, 'tool_result'::text]))
  constraint run_results_pkey: PRIMARY KEY (id, version)
  constraint run_results_run_id_runs_id_fk: FOREIGN KEY (run_id) REFERENCES sourcebound.runs(id) ON DELETE CASCADE
  constraint run_results_sha256_hex: CHECK (sha256 ~ '^[0-9a-f]{64}$'::text)
  constraint run_results_sizes: CHECK (byte_size >= 0 AND line_count >= 0 AND json_bytes >= (byte_size + 2))
  constraint run_results_version_positive: CHECK (version >= 1)
  CREATE INDEX run_results_run_idx ON sourcebound.run_results USING btree (run_id, kind)
  CREATE TRIGGER run_results_guard BEFORE INSERT OR DELETE OR UPDATE ON sourcebound.run_results FOR EACH ROW EXECUTE FUNCTION sourcebound.run_results_guard()
  CREATE TRIGGER run_results_no_truncate BEFORE TRUNCATE ON sourcebound.run_results FOR EACH STATEMENT EXECUTE FUNCTION sourcebound.refuse_truncate()
  policy app_scope for all to public using (sourcebound.run_in_current_scope(run_id)) with check (sourcebound.run_in_current_scope(run_id))
  policy reader_all for all to sourcebound_reader using (true)
  policy worker_all for all to sourcebound_worker using (true)

-- table run_summary_requests
  column id uuid not null default gen_random_uuid()
  column run_id uuid not null
  column conversation_id uuid not null
  column scope text not null
  column identity_key text not null
  column attempt integer not null
  column predecessor_id uuid
  column from_seq bigint not null
  column to_seq bigint not null
  column compacted_seqs bigint[] not null
  column source_hash text not null
  column hash_version integer not null
  column model text not null
  column prompt_version text not null
  column max_chars integer not null
  column input_bytes integer not null
  column status text not null default 'dispatched'::text
  column spent boolean
  column reason text
  column summary text
  column answer_model text
  column provider_request_id text
  column usage jsonb
  column reserved_requests integer not null
  column reserved_tokens bigint not null
  column charged_requests integer
  column charged_tokens bigint
  column not_before timestamp with time zone
  column lease_expires_at timestamp with time zone not null
  column dispatched_at timestamp with time zone not null default now()
  column settled_at timestamp with time zone
  column grounding_checked text[]
  column grounding_ungrounded text[]
  constraint run_summary_requests_attempt_positive: CHECK (attempt >= 1)
  constraint run_summary_requests_grounding: CHECK ((grounding_checked IS NULL) = (grounding_ungrounded IS NULL) AND grounding_ungrounded <@ grounding_checked)
  constraint run_summary_requests_identity_attempt_key: UNIQUE (identity_key, attempt)
  constraint run_summary_requests_identity_hex: CHECK (identity_key ~ '^[0-9a-f]{64}$'::text)
  constraint run_summary_requests_ok_has_text: CHECK (status <> 'ok'::text OR summary IS NOT NULL AND length(summary) > 0)
  constraint run_summary_requests_pkey: PRIMARY KEY (id)
  constraint run_summary_requests_predecessor_id_run_checkpoints_id_fk: FOREIGN KEY (predecessor_id) REFERENCES sourcebound.run_checkpoints(id) ON DELETE CASCADE
  constraint run_summary_requests_range: CHECK (from_seq <= to_seq AND cardinality(compacted_seqs) >= 1)
  constraint run_summary_requests_run_fk: FOREIGN KEY (run_id, conversation_id) REFERENCES sourcebound.runs(id, conversation_id) ON DELETE CASCADE
  constraint run_summary_requests_scope_fk: FOREIGN KEY (conversation_id, scope) REFERENCES sourcebound.conversations(id, scope) ON DELETE CASCADE
  constraint run_summary_requests_settled: CHECK ((status = 'dispatched'::text) = (settled_at IS NULL) AND (status = 'dispatched'::text) = (spent IS NULL))
  constraint run_summary_requests_source_hash_hex: CHECK (source_hash ~ '^[0-9a-f]{64}$'::text)
  constraint run_summary_requests_status_known: CHECK (status = ANY (ARRAY['dispatched'::text, 'ok'::text, 'invalid'::text, 'deferred'::text, 'unknown'::text, 'config'::text]))
  CREATE INDEX run_summary_requests_conversation_idx ON sourcebound.run_summary_requests USING btree (conversation_id)
  CREATE UNIQUE INDEX run_summary_requests_in_flight_key ON sourcebound.run_summary_requests USING btree (run_id) WHERE (status = 'dispatched'::text)
  CREATE INDEX run_summary_requests_predecessor_idx ON sourcebound.run_summary_requests USING btree (predecessor_id) WHERE (predecessor_id IS NOT NULL)
  CREATE INDEX run_summary_requests_run_idx ON sourcebound.run_summary_requests USING btree (run_id, dispatched_at)
  CREATE TRIGGER run_summary_requests_guard BEFORE INSERT OR DELETE OR UPDATE ON sourcebound.run_summary_requests FOR EACH ROW EXECUTE FUNCTION sourcebound.run_summary_requests_guard()
  CREATE TRIGGER run_summary_requests_identity BEFORE INSERT ON sourcebound.run_summary_requests FOR EACH ROW EXECUTE FUNCTION sourcebound.run_summary_requests_identity()
  CREATE TRIGGER run_summary_requests_no_truncate BEFORE TRUNCATE ON sourcebound.run_summary_requests FOR EACH STATEMENT EXECUTE FUNCTION sourcebound.refuse_truncate()
  policy app_scope for all to public using ((scope = sourcebound.current_scope())) with check ((scope = sourcebound.current_scope()))
  policy reader_all for all to sourcebound_reader using (true)
  policy worker_all for all to sourcebound_worker using (true)

-- table run_tool_units
  column id bigint not null generated always as identity
  column run_id uuid not null
  column turn_seq bigint not null
  column position integer not null
  column proposal_id text not null
  column tool_name text not null
  column input jsonb not null
  column status text not null default 'proposed'::text
  column dispatch_id text
  column result_id uuid
  column result_version integer
  column result_inline boolean not null default true
  column error text
  column dispatched_at timestamp with time zone
  column settled_at timestamp with time zone
  column created_at timestamp with time zone not null default now()
  constraint run_tool_units_dispatch_key: UNIQUE (run_id, dispatch_id)
  constraint run_tool_units_dispatch_matches_status: CHECK (
CASE status
    WHEN 'proposed'::text THEN dispatch_id IS NULL
    WHEN 'failed'::text THEN true
    ELSE dispatch_id IS NOT NULL
END)
  constraint run_tool_units_pkey: PRIMARY KEY (id)
  constraint run_tool_units_position: CHECK ("position" >= 0)
  constraint run_tool_units_position_key: UNIQUE (turn_seq, "position")
  constraint run_tool_units_proposal_key: UNIQUE (run_id, proposal_id)
  constraint run_tool_units_result_fk: FOREIGN KEY (result_id, result_version) REFERENCES sourcebound.run_results(id, version) ON DELETE CASCADE
  constraint run_tool_units_result_matches_status: CHECK (
CASE status
    WHEN 'settled'::text THEN result_id IS NOT NULL
    WHEN 'proposed'::text THEN result_id IS NULL
    WHEN 'dispatched'::text THEN result_id IS NULL
    ELSE true
END)
  constraint run_tool_units_settled_at: CHECK ((status = ANY (ARRAY['settled'::text, 'failed'::text, 'unknown'::text])) = (settled_at IS NOT NULL))
  constraint run_tool_units_status_known: CHECK (status = ANY (ARRAY['proposed'::text, 'dispatched'::text, 'settled'::text, 'failed'::text, 'unknown'::text]))
  constraint run_tool_units_turn_fk: FOREIGN KEY (run_id, turn_seq) REFERENCES sourcebound.run_turns(run_id, seq) ON DELETE CASCADE
  CREATE INDEX run_tool_units_result_idx ON sourcebound.run_tool_units USING btree (result_id, result_version) WHERE (result_id IS NOT NULL)
  CREATE TRIGGER run_tool_units_guard BEFORE INSERT OR DELETE OR UPDATE ON sourcebound.run_tool_units FOR EACH ROW EXECUTE FUNCTION sourcebound.run_tool_units_guard()
  CREATE TRIGGER run_tool_units_no_truncate BEFORE TRUNCATE ON sourcebound.run_tool_units FOR EACH STATEMENT EXECUTE FUNCTION sourcebound.refuse_truncate()
  policy app_scope for all to public using (sourcebound.run_in_current_scope(run_id)) with check (sourcebound.run_in_current_scope(run_id))
  policy reader_all for all to sourcebound_reader using (true)
  policy worker_all for all to sourcebound_worker using (true)

-- sequence run_tool_units_id_seq (owned by sourcebound.run_tool_units.id)

-- table run_turns
  column seq bigint not null generated always as identity
  column run_id uuid not null
  column kind text not null
  column revision integer
  column text text not null
  column model_request_id bigint
  column created_at timestamp with time zone not null default now()
  column thinking jsonb
  constraint run_turns_kind_known: CHECK (kind = ANY (ARRAY['request'::text, 'correction'::text, 'model'::text]))
  constraint run_turns_model_request_fk: FOREIGN KEY (run_id, model_request_id) REFERENCES sourcebound.run_model_requests(run_id, id) ON DELETE CASCADE
  constraint run_turns_model_request_only_on_model: CHECK (model_request_id IS NULL OR kind = 'model'::text)
  constraint run_turns_pkey: PRIMARY KEY (seq)
  constraint run_turns_revision_matches_kind: CHECK (
CASE kind
    WHEN 'request'::text THEN revision = 0
    WHEN 'correction'::text THEN revision >= 1
    ELSE revision IS NULL
END)
  constraint run_turns_run_id_runs_id_fk: FOREIGN KEY (run_id) REFERENCES sourcebound.runs(id) ON DELETE CASCADE
  constraint run_turns_run_seq_key: UNIQUE (run_id, seq)
  constraint run_turns_thinking_only_on_model: CHECK (thinking IS NULL OR kind = 'model'::text AND jsonb_typeof(thinking) = 'array'::text)
  constraint run_turns_user_text_not_blank: CHECK (kind = 'model'::text OR text ~ '[^\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]'::text)
  CREATE INDEX run_turns_model_request_idx ON sourcebound.run_turns USING btree (run_id, model_request_id) WHERE (model_request_id IS NOT NULL)
  CREATE UNIQUE INDEX run_turns_revision_key ON sourcebound.run_turns USING btree (run_id, revision) WHERE (revision IS NOT NULL)
  CREATE TRIGGER run_turns_guard BEFORE INSERT OR DELETE OR UPDATE ON sourcebound.run_turns FOR EACH ROW EXECUTE FUNCTION sourcebound.run_turns_guard()
  CREATE TRIGGER run_turns_no_truncate BEFORE TRUNCATE ON sourcebound.run_turns FOR EACH STATEMENT EXECUTE FUNCTION sourcebound.refuse_truncate()
  policy app_scope for all to public using (sourcebound.run_in_current_scope(run_id)) with check (sourcebound.run_in_current_scope(run_id))
  policy reader_all for all to sourcebound_reader using (true)
  policy worker_all for all to sourcebound_worker using (true)

-- sequence run_turns_seq_seq (owned by sourcebound.run_turns.seq)

-- table runs
  column id uuid not null default gen_random_uuid()
  column conversation_id uuid not null
  column status text not null
  column seq bigint not null generated always as identity
  column created_at timestamp with time zone not null default now()
  constraint runs_conversation_id_conversations_id_fk: FOREIGN KEY (conversation_id) REFERENCES sourcebound.conversations(id) ON DELETE CASCADE
  constraint runs_id_conversation_key: UNIQUE (id, conversation_id)
  constraint runs_pkey: PRIMARY KEY (id)
  constraint runs_status_known: CHECK (status = ANY (ARRAY['queued'::text, 'running'::text, 'completed'::text, 'partial'::text, 'clarify_pending'::text, 'failed'::text, 'cancelled'::text]))
  CREATE INDEX runs_conversation_seq_idx ON sourcebound.runs USING btree (conversation_id, seq)
  CREATE INDEX runs_open_idx ON sourcebound.runs USING btree (conversation_id, created_at) WHERE (status = ANY (ARRAY['queued'::text, 'running'::text]))
  CREATE TRIGGER runs_refresh_pair_del AFTER DELETE ON sourcebound.runs FOR EACH ROW EXECUTE FUNCTION sourcebound.runs_refresh_pair()
  CREATE TRIGGER runs_refresh_pair_upd AFTER UPDATE ON sourcebound.runs FOR EACH ROW EXECUTE FUNCTION sourcebound.runs_refresh_pair()
  CREATE TRIGGER runs_scope_fixed BEFORE UPDATE OF conversation_id ON sourcebound.runs FOR EACH ROW WHEN (new.conversation_id IS DISTINCT FROM old.conversation_id) EXECUTE FUNCTION sourcebound.scope_fixed()
  policy app_scope for all to public using (sourcebound.in_current_scope(conversation_id)) with check (sourcebound.in_current_scope(conversation_id))
  policy reader_all for all to sourcebound_reader using (true)
  policy worker_all for all to sourcebound_worker using (true)

-- sequence runs_seq_seq (owned by sourcebound.runs.seq)

-- table scope_call_windows
  column scope text not null
  column hour_start timestamp with time zone not null
  column calls integer not null
  constraint scope_call_windows_calls_positive: CHECK (calls > 0)
  constraint scope_call_windows_pkey: PRIMARY KEY (scope, hour_start)

-- table workers
  column worker_id text not null
  column graphile_worker_ids text[] not null default '{}'::text[]
  column started_at timestamp with time zone not null default now()
  column beat_at timestamp with time zone not null default now()
  constraint workers_id_not_blank: CHECK (btrim(worker_id) <> ''::text)
  constraint workers_pkey: PRIMARY KEY (worker_id)

-- function sourcebound.claim_range(uuid,integer,boolean,integer[],bigint[],text,text,text,double precision)
CREATE OR REPLACE FUNCTION sourcebound.claim_range(p_conversation_id uuid, p_after integer, p_wrap boolean, p_skip_from integer[], p_skip_generation bigint[], p_model text, p_prompt_version text, p_worker_id text, p_lease_ms double precision)
 RETURNS TABLE(claim_kind text, claim_from_pair integer, claim_generation bigint, rec sourcebound.conversation_summaries, claim_attempt_id bigint, claim_until timestamp with time zone, claim_assistant_ids uuid[], claim_assistant_texts text[])
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
DECLARE
  v_from integer;
  v_generation bigint;
BEGIN
  SELECT m.from_pair, m.generation INTO v_from, v_generation
  FROM sourcebound.compaction_marks m
  WHERE m.conversation_id = p_conversation_id AND m.from_pair > p_after
    AND NOT EXISTS (SELECT 1 FROM unnest(p_skip_from, p_skip_generation) AS s(f, g) WHERE s.f = m.from_pair AND s.g = m.generation)
  ORDER BY m.from_pair LIMIT 1;
  IF v_from IS NULL AND p_wrap THEN
    SELECT m.from_pair, m.generation INTO v_from, v_generation
    FROM sourcebound.compaction_marks m
    WHERE m.conversation_id = p_conversation_id AND m.from_pair <= p_after
      AND NOT EXISTS (SELECT 1 FROM unnest(p_skip_from, p_skip_generation) AS s(f, g) WHERE s.f = m.from_pair AND s.g = m.generation)
    ORDER BY m.from_pair LIMIT 1;
  END IF;
  IF v_from IS NULL THEN
    claim_kind := 'none';
    RETURN NEXT;
    RETURN;
  END IF;
  RETURN QUERY
    SELECT c.claim_kind, v_from, v_generation, c.rec, c.claim_attempt_id, c.claim_until, c.claim_assistant_ids, c.claim_assistant_texts
    FROM sourcebound.claim_range(p_conversation_id, v_from, p_model, p_prompt_version, p_worker_id, p_lease_ms) c;
END
$function$

-- function sourcebound.claim_range(uuid,integer,text,text,text,double precision)
CREATE OR REPLACE FUNCTION sourcebound.claim_range(p_conversation_id uuid, p_from_pair integer, p_model text, p_prompt_version text, p_worker_id text, p_lease_ms double precision)
 RETURNS TABLE(claim_kind text, rec sourcebound.conversation_summaries, claim_attempt_id bigint, claim_until timestamp with time zone, claim_assistant_ids uuid[], claim_assistant_texts text[])
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
DECLARE
  v_generation bigint;
  v_scope text;
  v_count integer;
  v_src record;
  v_rec sourcebound.conversation_summaries;
  v_expired boolean := false;
BEGIN
  IF NOT pg_try_advisory_xact_lock(74202, hashtext(p_conversation_id::text || ':' || p_from_pair::text)) THEN
    claim_kind := 'busy';
    RETURN NEXT;
    RETURN;
  END IF;
  -- The generation is read before the source (this statement comes first):
  -- an edit committed after it moves the generation, so clearing the mark
  -- below fails and the range is visited again.
  SELECT c.scope,
         (SELECT m.generation FROM sourcebound.compaction_marks m WHERE m.conversation_id = c.id AND m.from_pair = p_from_pair),
         (SELECT coalesce(max(p.pair_index) + 1, 0) FROM sourcebound.pairs p WHERE p.conversation_id = c.id)
  INTO v_scope, v_generation, v_count
  FROM sourcebound.conversations c WHERE c.id = p_conversation_id;
  IF NOT FOUND THEN
    claim_kind := 'gone';
    RETURN NEXT;
    RETURN;
  END IF;
  IF p_from_pair % 10 <> 0 OR p_from_pair + 9 >= 10 * sourcebound.plannable_range_count(v_count) THEN
    DELETE FROM sourcebound.compaction_marks WHERE conversation_id = p_conversation_id AND from_pair = p_from_pair AND generation = v_generation;
    claim_kind := 'gone';
    RETURN NEXT;
    RETURN;
  END IF;
  SELECT * INTO v_src FROM sourcebound.range_source(p_conversation_id, p_from_pair);
  IF v_src.pairs <> 10 THEN
    -- The index disagrees with itself (drift): nothing can be bound; the mark stays for after a repair.
    claim_kind := 'gone';
    RETURN NEXT;
    RETURN;
  END IF;

  SELECT * INTO v_rec FROM sourcebound.conversation_summaries s
  WHERE s.conversation_id = p_conversation_id AND s.from_pair = p_from_pair AND s.to_pair = p_from_pair + 9
    AND s.source_hash = v_src.source_hash AND s.model = p_model AND s.prompt_version = p_prompt_version
  FOR UPDATE;

  IF NOT FOUND THEN
    INSERT INTO sourcebound.conversation_summaries
      (conversation_id, scope, from_pair, to_pair, source_message_ids, source_hash, hash_version, model, prompt_version,
       status, lease_owner, lease_expires_at)
    VALUES (p_conversation_id, v_scope, p_from_pair, p_from_pair + 9, v_src.source_message_ids, v_src.source_hash, 1, p_model, p_prompt_version,
       'running', p_worker_id, now() + make_interval(secs => p_lease_ms / 1000))
    RETURNING * INTO v_rec;
  ELSE
    IF v_rec.status IN ('completed', 'failed') THEN
      DELETE FROM sourcebound.compaction_marks WHERE conversation_id = p_conversation_id AND from_pair = p_from_pair AND generation = v_generation;
      claim_kind := CASE WHEN v_rec.status = 'completed' THEN 'done' ELSE 'failed' END;
      rec := v_rec;
      RETURN NEXT;
      RETURN;
    END IF;
    IF v_rec.status = 'running' THEN
      IF v_rec.lease_expires_at > now() THEN
        claim_kind := 'busy';
        claim_until := v_rec.lease_expires_at;
        RETURN NEXT;
        RETURN;
      END IF;
      -- The holder died mid-call: its attempt may have reached the model, so it counts.
      UPDATE sourcebound.conversation_summary_attempts
      SET outcome = 'unknown', spent = true, reason = 'lease_expired: the worker holding the claim stopped before settling', finished_at = now()
      WHERE summary_id = v_rec.id AND outcome IS NULL;
      IF v_rec.attempts_spent + 1 >= 2 THEN
        UPDATE sourcebound.conversation_summaries
        SET updated_at = now(), status = 'failed', attempts_spent = attempts_spent + 1, failure_reason = 'two attempts spent (the last: lease expired)',
            lease_owner = NULL, lease_expires_at = NULL, not_before = NULL
        WHERE id = v_rec.id RETURNING * INTO v_rec;
        DELETE FROM sourcebound.compaction_marks WHERE conversation_id = p_conversation_id AND from_pair = p_from_pair AND generation = v_generation;
        claim_kind := 'failed';
        rec := v_rec;
        RETURN NEXT;
        RETURN;
      END IF;
      v_expired := true;
    ELSIF v_rec.not_before IS NOT NULL AND v_rec.not_before > now() THEN
      claim_kind := 'deferred';
      claim_until := v_rec.not_before;
      rec := v_rec;
      RETURN NEXT;
      RETURN;
    END IF;
    UPDATE sourcebound.conversation_summaries
    SET updated_at = now(), status = 'running', lease_owner = p_worker_id, lease_expires_at = now() + make_interval(secs => p_lease_ms / 1000), not_before = NULL,
        attempts_spent = attempts_spent + CASE WHEN v_expired THEN 1 ELSE 0 END,
        failure_reason = CASE WHEN v_expired THEN 'lease expired' ELSE failure_reason END
    WHERE id = v_rec.id RETURNING * INTO v_rec;
  END IF;

  INSERT INTO sourcebound.conversation_summary_attempts (summary_id, worker_id, input_chars)
  VALUES (v_rec.id, p_worker_id, v_src.input_chars)
  RETURNING id INTO claim_attempt_id;
  claim_kind := 'claimed';
  rec := v_rec;
  claim_assistant_ids := v_src.assistant_ids;
  claim_assistant_texts := v_src.assistant_texts;
  RETURN NEXT;
END
$function$

-- function sourcebound.claim_renew(uuid,bigint,text,double precision)
CREATE OR REPLACE FUNCTION sourcebound.claim_renew(p_summary_id uuid, p_attempt_id bigint, p_worker_id text, p_lease_ms double precision)
 RETURNS timestamp with time zone
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
  UPDATE sourcebound.conversation_summaries s
  SET lease_expires_at = greatest(s.lease_expires_at, now() + make_interval(secs => p_lease_ms / 1000))
  WHERE s.id = p_summary_id AND s.status = 'running' AND s.lease_owner = p_worker_id
    AND EXISTS (SELECT 1 FROM sourcebound.conversation_summary_attempts a
                WHERE a.id = p_attempt_id AND a.summary_id = p_summary_id AND a.outcome IS NULL)
  RETURNING s.lease_expires_at
$function$

-- function sourcebound.claims_hand_back(text,uuid[])
CREATE OR REPLACE FUNCTION sourcebound.claims_hand_back(p_lease_owner text, p_except uuid[])
 RETURNS SETOF uuid
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
DECLARE
  v_conversations uuid[];
BEGIN
  WITH released AS (
    UPDATE sourcebound.conversation_summaries SET lease_expires_at = now()
    WHERE status = 'running' AND lease_owner = p_lease_owner AND lease_expires_at > now() AND NOT (conversation_id = ANY (p_except))
    RETURNING conversation_id
  ), undeferred AS (
    UPDATE sourcebound.conversation_summaries s SET not_before = now()
    WHERE s.status = 'pending' AND s.not_before > now() AND NOT (s.conversation_id = ANY (p_except))
      AND (SELECT a.worker_id = p_lease_owner AND a.outcome = 'deferred' AND a.reason IN ('admission_timeout', 'aborted_before_send')
           FROM sourcebound.conversation_summary_attempts a
           WHERE a.summary_id = s.id ORDER BY a.id DESC LIMIT 1)
    RETURNING conversation_id
  )
  SELECT coalesce(array_agg(DISTINCT c), '{}') INTO v_conversations
  FROM (SELECT conversation_id AS c FROM released UNION ALL SELECT conversation_id FROM undeferred) changed;
  PERFORM sourcebound.compaction_resume(v_conversations);
  RETURN QUERY SELECT unnest(v_conversations);
END
$function$

-- function sourcebound.commit_summary(uuid,bigint,text,text,text,text,text,jsonb,double precision,text[],text[])
CREATE OR REPLACE FUNCTION sourcebound.commit_summary(p_summary_id uuid, p_attempt_id bigint, p_worker_id text, p_outcome text, p_summary text, p_reason text, p_request_id text, p_usage jsonb, p_not_before_ms double precision, p_grounding_checked text[], p_grounding_ungrounded text[])
 RETURNS TABLE(commit_kind text, rec sourcebound.conversation_summaries, marks_remain boolean)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
DECLARE
  v_rec sourcebound.conversation_summaries;
  v_generation bigint;
  v_src record;
  v_final boolean;
BEGIN
  SELECT * INTO v_rec FROM sourcebound.conversation_summaries WHERE id = p_summary_id FOR UPDATE;
  -- Gone with its conversation, or taken over after our lease expired (that
  -- worker already counted our attempt as spent). The lease owner is the
  -- worker process, shared by its jobs: a takeover by another job of the same
  -- process settles our attempt, so the attempt must still be open too.
  IF NOT FOUND OR v_rec.status <> 'running' OR v_rec.lease_owner IS DISTINCT FROM p_worker_id
     OR NOT EXISTS (SELECT 1 FROM sourcebound.conversation_summary_attempts a
                    WHERE a.id = p_attempt_id AND a.summary_id = p_summary_id AND a.outcome IS NULL) THEN
    commit_kind := 'lease_lost';
    RETURN NEXT;
    RETURN;
  END IF;
  v_final := v_rec.attempts_spent + 1 >= 2;

  IF p_outcome = 'ok' THEN
    IF v_rec.hash_version <> 1 THEN
      RAISE EXCEPTION 'sourcebound: source hash version % cannot be computed here', v_rec.hash_version USING CONSTRAINT = 'source_hash_version_unknown';
    END IF;
    SELECT generation INTO v_generation FROM sourcebound.compaction_marks
    WHERE conversation_id = v_rec.conversation_id AND from_pair = v_rec.from_pair;
    -- Only what is compared: the planner then drops range_source()'s other
    -- aggregates (the replies' ids, texts and length), about a third of its cost.
    SELECT s.pairs, s.source_message_ids, s.source_hash INTO v_src FROM sourcebound.range_source(v_rec.conversation_id, v_rec.from_pair) s;
    IF v_src.pairs = 10 AND v_src.source_message_ids = v_rec.source_message_ids AND v_src.source_hash = v_rec.source_hash THEN
      UPDATE sourcebound.conversation_summary_attempts
      SET outcome = 'ok', spent = true, reason = NULL, request_id = p_request_id, usage = p_usage, finished_at = now(),
          grounding_checked = p_grounding_checked, grounding_ungrounded = p_grounding_ungrounded
      WHERE id = p_attempt_id;
      UPDATE sourcebound.conversation_summaries
      SET updated_at = now(), status = 'completed', attempts_spent = attempts_spent + 1, summary = p_summary, completed_at = now(),
          lease_owner = NULL, lease_expires_at = NULL, not_before = NULL
      WHERE id = p_summary_id RETURNING * INTO v_rec;
      DELETE FROM sourcebound.compaction_marks WHERE conversation_id = v_rec.conversation_id AND from_pair = v_rec.from_pair AND generation = v_generation;
      commit_kind := 'completed';
    ELSE
      UPDATE sourcebound.conversation_summary_attempts
      SET outcome = 'stale', spent = true, reason = 'the source changed while the summary was being made',
          request_id = p_request_id, usage = p_usage, finished_at = now(),
          grounding_checked = p_grounding_checked, grounding_ungrounded = p_grounding_ungrounded
      WHERE id = p_attempt_id;
      UPDATE sourcebound.conversation_summaries
      SET updated_at = now(), status = CASE WHEN v_final THEN 'failed' ELSE 'stale' END, attempts_spent = attempts_spent + 1,
          failure_reason = CASE WHEN v_final THEN 'two attempts spent (the last: source changed before commit)' ELSE 'source changed before commit' END,
          lease_owner = NULL, lease_expires_at = NULL, not_before = NULL
      WHERE id = p_summary_id RETURNING * INTO v_rec;
      commit_kind := 'stale';
    END IF;
  ELSIF p_outcome IN ('invalid', 'unknown') THEN
    UPDATE sourcebound.conversation_summary_attempts
    SET outcome = p_outcome, spent = true, reason = p_reason, request_id = p_request_id, usage = p_usage, finished_at = now(),
        grounding_checked = p_grounding_checked, grounding_ungrounded = p_grounding_ungrounded
    WHERE id = p_attempt_id;
    UPDATE sourcebound.conversation_summaries
    SET updated_at = now(), status = CASE WHEN v_final THEN 'failed' ELSE 'pending' END, attempts_spent = attempts_spent + 1,
        failure_reason = p_outcome || ': ' || p_reason,
        not_before = CASE WHEN v_final OR p_not_before_ms IS NULL THEN NULL ELSE now() + make_interval(secs => p_not_before_ms / 1000) END,
        lease_owner = NULL, lease_expires_at = NULL
    WHERE id = p_summary_id RETURNING * INTO v_rec;
    commit_kind := 'spent';
  ELSIF p_outcome IN ('deferred', 'config') THEN
    UPDATE sourcebound.conversation_summary_attempts
    SET outcome = p_outcome, spent = false, reason = p_reason, request_id = NULL, usage = NULL, finished_at = now()
    WHERE id = p_attempt_id;
    UPDATE sourcebound.conversation_summaries
    SET updated_at = now(), status = 'pending', failure_reason = p_outcome || ': ' || p_reason,
        not_before = CASE WHEN p_outcome = 'deferred' THEN now() + make_interval(secs => coalesce(p_not_before_ms, 0) / 1000) END,
        lease_owner = NULL, lease_expires_at = NULL
    WHERE id = p_summary_id RETURNING * INTO v_rec;
    IF p_outcome = 'deferred' THEN
      -- The provider asked us to wait: the conversation's job runs then, and
      -- preserve_run_at keeps later enqueues from asking earlier.
      PERFORM sourcebound.compaction_job_at(v_rec.conversation_id, v_rec.not_before);
    END IF;
    commit_kind := p_outcome;
  ELSE
    RAISE EXCEPTION 'sourcebound: unknown outcome %', p_outcome USING CONSTRAINT = 'commit_outcome_unknown';
  END IF;
  rec := v_rec;
  marks_remain := EXISTS (SELECT 1 FROM sourcebound.compaction_marks m WHERE m.conversation_id = v_rec.conversation_id);
  RETURN NEXT;
END
$function$

-- function sourcebound.compaction_enqueue_if_lost(uuid)
CREATE OR REPLACE FUNCTION sourcebound.compaction_enqueue_if_lost(p_conversation_id uuid)
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
BEGIN
  IF EXISTS (
    SELECT 1 FROM graphile_worker._private_jobs j
    WHERE j.key = 'sourcebound:compact:' || p_conversation_id::text
      AND j.locked_at IS NULL AND j.attempts = 0) THEN
    RETURN 0;
  END IF;
  IF NOT pg_try_advisory_xact_lock(74201, hashtext(p_conversation_id::text))
     OR NOT pg_try_advisory_xact_lock(74203, hashtext('sourcebound:compact:' || p_conversation_id::text)) THEN
    RETURN 0;
  END IF;
  PERFORM sourcebound.enqueue_compaction(p_conversation_id);
  RETURN 1;
END
$function$

-- function sourcebound.compaction_job_at(uuid,timestamp with time zone)
CREATE OR REPLACE FUNCTION sourcebound.compaction_job_at(p_conversation_id uuid, p_run_at timestamp with time zone)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
BEGIN
  PERFORM sourcebound.compaction_key_lock(p_conversation_id);
  PERFORM graphile_worker.add_job('compact_conversation', json_build_object('conversationId', p_conversation_id),
    run_at := p_run_at, job_key := 'sourcebound:compact:' || p_conversation_id::text, job_key_mode := 'preserve_run_at');
END
$function$

-- function sourcebound.compaction_key_lock(uuid)
CREATE OR REPLACE FUNCTION sourcebound.compaction_key_lock(p_conversation_id uuid)
 RETURNS void
 LANGUAGE sql
AS $function$
  SELECT pg_advisory_xact_lock(74203, hashtext('sourcebound:compact:' || p_conversation_id::text))
$function$

-- function sourcebound.compaction_resume(uuid[])
CREATE OR REPLACE FUNCTION sourcebound.compaction_resume(p_conversation_ids uuid[])
 RETURNS void
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
  SELECT graphile_worker.add_job('compact_conversation', json_build_object('conversationId', c),
           run_at := now(), job_key := 'sourcebound:compact-resume:' || c, job_key_mode := 'replace')
  FROM unnest(p_conversation_ids) AS c;
$function$

-- function sourcebound.conversation_summaries_guard()
CREATE OR REPLACE FUNCTION sourcebound.conversation_summaries_guard()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
BEGIN
  IF TG_OP = 'DELETE' THEN
    -- During the cascade from DELETE FROM conversations the parent row is
    -- already gone; any other delete finds it and is refused.
    IF EXISTS (SELECT 1 FROM sourcebound.conversations WHERE id = OLD.conversation_id) THEN
      RAISE EXCEPTION 'sourcebound: summary record % cannot be deleted; delete its conversation to erase it', OLD.id
        USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'summary_record_delete';
    END IF;
    RETURN OLD;
  END IF;
  IF OLD.status IN ('completed', 'failed') THEN
    RAISE EXCEPTION 'sourcebound: summary record % is % and immutable', OLD.id, OLD.status
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'summary_record_immutable';
  END IF;
  -- The identity and the spent attempts of an open record never go back.
  IF NEW.conversation_id <> OLD.conversation_id OR NEW.scope <> OLD.scope
     OR NEW.from_pair <> OLD.from_pair OR NEW.to_pair <> OLD.to_pair
     OR NEW.source_message_ids <> OLD.source_message_ids OR NEW.source_hash <> OLD.source_hash
     OR NEW.hash_version <> OLD.hash_version OR NEW.model <> OLD.model
     OR NEW.prompt_version <> OLD.prompt_version THEN
    RAISE EXCEPTION 'sourcebound: the identity of summary record % cannot change', OLD.id
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'summary_record_identity';
  END IF;
  IF NEW.attempts_spent < OLD.attempts_spent THEN
    RAISE EXCEPTION 'sourcebound: spent attempts of summary record % cannot decrease', OLD.id
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'summary_record_attempts_decrease';
  END IF;
  NEW.updated_at := now();
  RETURN NEW;
END
$function$

-- function sourcebound.conversation_summary_attempts_guard()
CREATE OR REPLACE FUNCTION sourcebound.conversation_summary_attempts_guard()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
BEGIN
  IF TG_OP = 'DELETE' THEN
    IF EXISTS (SELECT 1 FROM sourcebound.conversation_summaries WHERE id = OLD.summary_id) THEN
      RAISE EXCEPTION 'sourcebound: attempt % cannot be deleted', OLD.id
        USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'summary_attempt_delete';
    END IF;
    RETURN OLD;
  END IF;
  IF OLD.outcome IS NOT NULL THEN
    RAISE EXCEPTION 'sourcebound: attempt % is settled (%) and immutable', OLD.id, OLD.outcome
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'summary_attempt_immutable';
  END IF;
  IF NEW.summary_id <> OLD.summary_id OR NEW.worker_id <> OLD.worker_id OR NEW.started_at <> OLD.started_at THEN
    RAISE EXCEPTION 'sourcebound: attempt % cannot change its identity', OLD.id
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'summary_attempt_identity';
  END IF;
  RETURN NEW;
END
$function$

-- function sourcebound.current_scope()
CREATE OR REPLACE FUNCTION sourcebound.current_scope()
 RETURNS text
 LANGUAGE sql
 STABLE
AS $function$ SELECT nullif(current_setting('sourcebound.scope', true), '') $function$

-- function sourcebound.enqueue_compaction(text,uuid)
CREATE OR REPLACE FUNCTION sourcebound.enqueue_compaction(p_scope text, p_conversation_id uuid)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM sourcebound.conversations WHERE id = p_conversation_id AND scope = p_scope) THEN
    RAISE EXCEPTION 'sourcebound: no conversation % in scope %', p_conversation_id, p_scope
      USING ERRCODE = 'no_data_found', CONSTRAINT = 'conversation_in_scope';
  END IF;
  PERFORM sourcebound.enqueue_compaction(p_conversation_id);
END
$function$

-- function sourcebound.enqueue_compaction(uuid)
CREATE OR REPLACE FUNCTION sourcebound.enqueue_compaction(p_conversation_id uuid)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
DECLARE
  v_key text := 'sourcebound:compact:' || p_conversation_id::text;
  v_job graphile_worker._private_jobs;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM sourcebound.conversations WHERE id = p_conversation_id) THEN
    RAISE EXCEPTION 'sourcebound: conversation % does not exist', p_conversation_id
      USING ERRCODE = 'no_data_found', CONSTRAINT = 'conversation_missing';
  END IF;
  PERFORM pg_advisory_xact_lock(74201, hashtext(p_conversation_id::text));
  PERFORM sourcebound.compaction_key_lock(p_conversation_id);
  -- A fresh job waiting: what preserve_run_at would leave it as. Its
  -- row lock keeps a worker from starting it before our changes are visible.
  PERFORM 1 FROM graphile_worker._private_jobs j
  WHERE j.key = v_key AND j.locked_at IS NULL AND j.attempts = 0
  FOR KEY SHARE;
  IF FOUND THEN
    RETURN;
  END IF;
  v_job := graphile_worker.add_job(
    'compact_conversation',
    json_build_object('conversationId', p_conversation_id),
    job_key := v_key,
    job_key_mode := 'unsafe_dedupe'
  );
  IF v_job.revision > 0 THEN
    PERFORM graphile_worker.add_job(
      'compact_conversation',
      json_build_object('conversationId', p_conversation_id),
      job_key := v_key,
      job_key_mode := 'preserve_run_at'
    );
  END IF;
END
$function$

-- function sourcebound.grant_runtime_roles()
CREATE OR REPLACE FUNCTION sourcebound.grant_runtime_roles()
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_have text[] := ARRAY(SELECT rolname::text FROM pg_roles
                         WHERE rolname IN ('sourcebound_app', 'sourcebound_worker', 'sourcebound_reader'));
  v_fn text;
  v_role text;
  -- The functions that only read: the reader's, and (less the two that read whole ranges) the app's.
  v_reads text[] := ARRAY['projection_read(uuid,text,integer,integer,integer,integer,bigint)', 'projection_layout(uuid,text,integer)', 'projection_pair_count(uuid,text)',
        'projection_pairs_page(uuid,text,integer,integer,bigint)', 'projection_summaries(uuid,text,integer,integer)',
        'plannable_range_count(integer)', 'range_needs_work(uuid,integer)', 'ranges_needing_work(uuid)',
        'range_source(uuid,integer)', 'pairs_drift(uuid)', 'pair_of_run(uuid)', 'run_parent_alive(uuid)',
        'source_hash_v1(uuid[],text[],uuid[],text[])', 'source_hash_v1_field(text)', 'source_hash_v1_of(integer,bytea)',
        'source_hash_v1_pair(uuid,text,uuid,text)', 'current_scope()', 'in_current_scope(uuid)', 'run_in_current_scope(uuid)'];
  -- System 2's settle and commit path: the app's only.
  v_run_commit text[] := ARRAY[
        'run_summary_settle(text,uuid,text,text,text,text,text,jsonb,integer,bigint,timestamp with time zone,text[],text[])',
        'run_checkpoint_commit(text,uuid,uuid,text,text,text,jsonb,integer,bigint,text[],text[],text[],integer,text)',
        'run_summary_expire(text,uuid,timestamp with time zone)',
        'run_summary_request_in_scope(text,uuid)', 'run_summary_ok_verdict(text,text[],text[])',
        'run_budget_charge(uuid,integer,bigint,integer,bigint)'];
BEGIN
  -- What 0007 granted and no runtime role keeps: writing a summary request's
  -- settlement or a checkpoint (a role granted these by hand loses them too).
  -- Revoked first: revoking INSERT on the table revokes the app's column
  -- grant too, which is given again below.
  FOREACH v_role IN ARRAY v_have LOOP
    EXECUTE format('REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON sourcebound.run_checkpoints, sourcebound.run_summary_requests FROM %I', v_role);
  END LOOP;

  IF 'sourcebound_reader' = ANY (v_have) THEN
    GRANT USAGE ON SCHEMA sourcebound TO sourcebound_reader;
    GRANT SELECT ON ALL TABLES IN SCHEMA sourcebound TO sourcebound_reader;
    FOREACH v_fn IN ARRAY v_reads LOOP
      EXECUTE format('GRANT EXECUTE ON FUNCTION sourcebound.%s TO sourcebound_reader', v_fn);
    END LOOP;
  END IF;

  IF 'sourcebound_app' = ANY (v_have) THEN
    GRANT USAGE ON SCHEMA sourcebound TO sourcebound_app;
    GRANT SELECT, INSERT, UPDATE, DELETE ON sourcebound.conversations, sourcebound.runs, sourcebound.messages,
      sourcebound.projection_layouts, sourcebound.run_budgets, sourcebound.run_model_requests,
      sourcebound.run_results, sourcebound.run_tool_units, sourcebound.run_turns
      TO sourcebound_app;
    GRANT SELECT ON sourcebound.conversation_summaries, sourcebound.conversation_summary_attempts, sourcebound.pairs,
      sourcebound.eligible_pairs, sourcebound.run_checkpoints, sourcebound.run_summary_requests TO sourcebound_app;
    -- A request is written before its call, as `dispatched`: its identity, never its settlement.
    GRANT INSERT (run_id, conversation_id, scope, identity_key, attempt, predecessor_id, from_seq, to_seq, compacted_seqs,
      source_hash, hash_version, model, prompt_version, max_chars, input_bytes, reserved_requests, reserved_tokens,
      lease_expires_at) ON sourcebound.run_summary_requests TO sourcebound_app;
    GRANT USAGE ON ALL SEQUENCES IN SCHEMA sourcebound TO sourcebound_app;
    -- The reads, and enqueue by scope (range_source and pairs_drift read whole ranges: the reader's only).
    FOREACH v_fn IN ARRAY array_remove(array_remove(v_reads, 'range_source(uuid,integer)'), 'pairs_drift(uuid)') || 'enqueue_compaction(text,uuid)'::text LOOP
      EXECUTE format('GRANT EXECUTE ON FUNCTION sourcebound.%s TO sourcebound_app', v_fn);
    END LOOP;
    FOREACH v_fn IN ARRAY v_run_commit[1:3] LOOP
      EXECUTE format('GRANT EXECUTE ON FUNCTION sourcebound.%s TO sourcebound_app', v_fn);
    END LOOP;
  END IF;

  IF 'sourcebound_worker' = ANY (v_have) THEN
    GRANT USAGE ON SCHEMA sourcebound TO sourcebound_worker;
    GRANT SELECT ON ALL TABLES IN SCHEMA sourcebound TO sourcebound_worker;
    GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA sourcebound TO sourcebound_worker;
    REVOKE EXECUTE ON FUNCTION sourcebound.row_security(boolean), sourcebound.grant_runtime_roles() FROM sourcebound_worker;
    FOREACH v_fn IN ARRAY v_run_commit LOOP
      EXECUTE format('REVOKE EXECUTE ON FUNCTION sourcebound.%s FROM sourcebound_worker', v_fn);
    END LOOP;
    -- graphile-worker's queue: the worker runs jobs; graphile-worker's own
    -- migrations are the owner's (sourcebound migrate).
    IF EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'graphile_worker') THEN
      GRANT USAGE ON SCHEMA graphile_worker TO sourcebound_worker;
      GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA graphile_worker TO sourcebound_worker;
      GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA graphile_worker TO sourcebound_worker;
      GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA graphile_worker TO sourcebound_worker;
      -- graphile-worker turns row security on for its private tables (no
      -- policy: only their owner reaches them); the worker role is let in.
      FOR v_fn IN SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                  WHERE n.nspname = 'graphile_worker' AND c.relkind = 'r' AND c.relrowsecurity
                    AND NOT EXISTS (SELECT 1 FROM pg_policies p WHERE p.schemaname = 'graphile_worker'
                                    AND p.tablename = c.relname AND p.policyname = 'sourcebound_worker_all') LOOP
        EXECUTE format('CREATE POLICY sourcebound_worker_all ON graphile_worker.%I TO sourcebound_worker USING (true) WITH CHECK (true)', v_fn);
      END LOOP;
    END IF;
  END IF;

  -- With row security on, the worker and reader see every row.
  FOR v_fn IN SELECT sourcebound.row_security_tables() LOOP
    IF 'sourcebound_worker' = ANY (v_have) AND NOT EXISTS (SELECT 1 FROM pg_policies
         WHERE schemaname = 'sourcebound' AND tablename = v_fn AND policyname = 'worker_all') THEN
      EXECUTE format('CREATE POLICY worker_all ON sourcebound.%I TO sourcebound_worker USING (true)', v_fn);
    END IF;
    IF 'sourcebound_reader' = ANY (v_have) AND NOT EXISTS (SELECT 1 FROM pg_policies
         WHERE schemaname = 'sourcebound' AND tablename = v_fn AND policyname = 'reader_all') THEN
      EXECUTE format('CREATE POLICY reader_all ON sourcebound.%I TO sourcebound_reader USING (true)', v_fn);
    END IF;
  END LOOP;
END
$function$

-- function sourcebound.in_current_scope(uuid)
CREATE OR REPLACE FUNCTION sourcebound.in_current_scope(p_conversation_id uuid)
 RETURNS boolean
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
  RETURN (SELECT c.scope = sourcebound.current_scope() FROM sourcebound.conversations c WHERE c.id = p_conversation_id);
END
$function$

-- function sourcebound.message_size_limit()
CREATE OR REPLACE FUNCTION sourcebound.message_size_limit()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
DECLARE
  v_limit bigint := greatest(65536, coalesce(nullif(current_setting('sourcebound.max_message_bytes', true), '')::bigint, 1048576));
  v_bytes bigint := octet_length(NEW.content);
BEGIN
  IF v_bytes > v_limit THEN
    RAISE EXCEPTION 'sourcebound: % message of % bytes is over the limit of % bytes (sourcebound.max_message_bytes)',
      CASE NEW.role WHEN 'assistant' THEN 'an assistant' ELSE 'a ' || NEW.role END, v_bytes, v_limit
      USING ERRCODE = 'program_limit_exceeded', CONSTRAINT = 'message_size_limit';
  END IF;
  RETURN NEW;
END
$function$

-- function sourcebound.messages_note_edit()
CREATE OR REPLACE FUNCTION sourcebound.messages_note_edit()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
BEGIN
  NEW.edited_at := now();
  RETURN NEW;
END
$function$

-- function sourcebound.messages_refresh_pair()
CREATE OR REPLACE FUNCTION sourcebound.messages_refresh_pair()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
DECLARE
  v_conversation uuid;
  v_eligible boolean;
BEGIN
  IF TG_OP = 'INSERT' AND NEW.run_id IS NULL THEN
    RETURN NULL;
  END IF;
  -- A message of a run: what follows reads other rows (see pair_write_refused). Erasing a
  -- conversation (its messages go by cascade) reads nothing that matters.
  -- Two IFs: the outer test alone is a simple expression, which PL/pgSQL
  -- evaluates without the executor; with the EXISTS in the same expression
  -- every message write paid an executor run (4-5% of a write).
  IF current_setting('transaction_isolation') IN ('repeatable read', 'serializable') THEN
    IF TG_OP = 'INSERT'
       OR TG_OP = 'UPDATE' AND (OLD.run_id IS NOT NULL OR NEW.run_id IS NOT NULL)
       OR TG_OP = 'DELETE' AND EXISTS (SELECT 1 FROM sourcebound.conversations WHERE id = OLD.conversation_id) THEN
      PERFORM sourcebound.pair_write_refused();
    END IF;
  END IF;
  IF TG_OP = 'INSERT'
     OR (TG_OP = 'UPDATE' AND NEW.run_id IS NOT DISTINCT FROM OLD.run_id AND NEW.conversation_id IS NOT DISTINCT FROM OLD.conversation_id) THEN
    PERFORM pg_advisory_xact_lock(74201, hashtext(NEW.conversation_id::text));
    SELECT r.conversation_id, r.status IN ('completed', 'partial', 'clarify_pending')
    INTO v_conversation, v_eligible
    FROM sourcebound.runs r WHERE r.id = NEW.run_id;
    -- Its run is here and not eligible: no pair to make, change or remove.
    IF v_conversation = NEW.conversation_id AND NOT v_eligible THEN
      RETURN NULL;
    END IF;
  END IF;
  IF TG_OP = 'UPDATE' AND OLD.conversation_id IS DISTINCT FROM NEW.conversation_id THEN
    -- Its run moves with it (foreign key): both conversations, in lock order.
    PERFORM sourcebound.pairs_lock(OLD.conversation_id, NEW.conversation_id);
  END IF;
  IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.run_id IS NOT NULL THEN
    PERFORM sourcebound.refresh_pair(OLD.conversation_id, OLD.run_id,
      TG_OP = 'UPDATE' AND OLD.content IS DISTINCT FROM NEW.content);
  END IF;
  IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.run_id IS NOT NULL
     AND (TG_OP = 'INSERT' OR NEW.run_id IS DISTINCT FROM OLD.run_id) THEN
    PERFORM sourcebound.refresh_pair(NEW.conversation_id, NEW.run_id, false);
  END IF;
  RETURN NULL;
END
$function$

-- function sourcebound.no_claim_will_come(uuid,integer,text,uuid[])
CREATE OR REPLACE FUNCTION sourcebound.no_claim_will_come(p_conversation_id uuid, p_from_pair integer, p_source_hash text, p_source_message_ids uuid[])
 RETURNS text
 LANGUAGE sql
 STABLE
AS $function$
  SELECT CASE
    WHEN NOT EXISTS (
      SELECT 1 FROM sourcebound.range_source(p_conversation_id, p_from_pair) src
      WHERE src.pairs = 10 AND src.source_hash = p_source_hash AND src.source_message_ids = p_source_message_ids)
      THEN 'the source changed since'
    WHEN p_from_pair + 9 >= 10 * sourcebound.plannable_range_count(
      (SELECT coalesce(max(p.pair_index) + 1, 0) FROM sourcebound.pairs p WHERE p.conversation_id = p_conversation_id))
      THEN 'the range is no longer plannable'
    WHEN NOT EXISTS (SELECT 1 FROM sourcebound.compaction_marks m WHERE m.conversation_id = p_conversation_id AND m.from_pair = p_from_pair)
      THEN 'its range is no longer marked (a record of another model or prompt version binds its source)'
  END
$function$

-- function sourcebound.outage_deferrals_release(text)
CREATE OR REPLACE FUNCTION sourcebound.outage_deferrals_release(p_worker_id text)
 RETURNS SETOF uuid
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
DECLARE
  v_conversations uuid[];
BEGIN
  WITH undeferred AS (
    UPDATE sourcebound.conversation_summaries s SET not_before = now()
    WHERE s.status = 'pending' AND s.not_before > now()
      AND (SELECT (a.worker_id = p_worker_id OR starts_with(a.worker_id, p_worker_id || '/r')) AND a.outcome = 'deferred'
                  AND a.reason IN ('admission_timeout', 'aborted_before_send') AND a.finished_at > now() - interval '2 minutes'
           FROM sourcebound.conversation_summary_attempts a
           WHERE a.summary_id = s.id ORDER BY a.id DESC LIMIT 1)
    RETURNING conversation_id
  )
  SELECT coalesce(array_agg(DISTINCT conversation_id), '{}') INTO v_conversations FROM undeferred;
  PERFORM sourcebound.compaction_resume(v_conversations);
  RETURN QUERY SELECT unnest(v_conversations);
END
$function$

-- function sourcebound.pair_of_run(uuid)
CREATE OR REPLACE FUNCTION sourcebound.pair_of_run(p_run_id uuid)
 RETURNS TABLE(conversation_id uuid, run_id uuid, run_seq bigint, user_message_id uuid, assistant_message_id uuid)
 LANGUAGE sql
 STABLE
AS $function$
  SELECT r.conversation_id, r.id, r.seq, u.id, a.id
  FROM sourcebound.runs r
  JOIN sourcebound.messages u
    ON u.run_id = r.id AND u.role = 'user' AND u.conversation_id = r.conversation_id
  JOIN sourcebound.messages a
    ON a.run_id = r.id AND a.role = 'assistant' AND a.conversation_id = r.conversation_id
  WHERE r.id = p_run_id
    AND r.status IN ('completed', 'partial', 'clarify_pending')
    AND a.status = 'completed'
    AND u.content ~ '[^\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]'
    AND a.content ~ '[^\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]'
$function$

-- function sourcebound.pair_write_refused()
CREATE OR REPLACE FUNCTION sourcebound.pair_write_refused()
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
BEGIN
  RAISE EXCEPTION 'sourcebound: the runs and messages of a conversation are written under READ COMMITTED, not %', upper(current_setting('transaction_isolation'))
    USING ERRCODE = 'feature_not_supported', CONSTRAINT = 'pair_write_isolation',
          DETAIL = 'The pair index is computed from the latest committed rows; a transaction snapshot (REPEATABLE READ, SERIALIZABLE) misses what another writer committed after it was taken.',
          HINT = 'Write them in a READ COMMITTED transaction (PostgreSQL''s default).';
END
$function$

-- function sourcebound.pairs_changed(uuid,integer,integer,integer)
CREATE OR REPLACE FUNCTION sourcebound.pairs_changed(p_conversation_id uuid, p_old_count integer, p_new_count integer, p_changed_at integer)
 RETURNS void
 LANGUAGE sql
AS $function$
  SELECT sourcebound.pairs_changed(p_conversation_id, p_old_count, p_new_count, p_changed_at, NULL::integer)
$function$

-- function sourcebound.pairs_changed(uuid,integer,integer,integer,integer)
CREATE OR REPLACE FUNCTION sourcebound.pairs_changed(p_conversation_id uuid, p_old_count integer, p_new_count integer, p_changed_at integer, p_changed_to integer)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_old_ranges integer := sourcebound.plannable_range_count(p_old_count);
  v_new_ranges integer := sourcebound.plannable_range_count(p_new_count);
  v_first integer := NULL;
  v_last integer := NULL;
  v_marked integer := 0;
BEGIN
  IF v_new_ranges < v_old_ranges THEN
    DELETE FROM sourcebound.compaction_marks
    WHERE conversation_id = p_conversation_id AND from_pair >= 10 * v_new_ranges;
  END IF;
  IF p_changed_at IS NOT NULL AND p_changed_at < 10 * v_new_ranges THEN
    v_first := p_changed_at / 10;
    v_last := CASE WHEN p_changed_to IS NULL THEN v_new_ranges - 1 ELSE least(p_changed_to / 10, v_new_ranges - 1) END;
  END IF;
  IF v_new_ranges > v_old_ranges OR v_first IS NOT NULL THEN
    INSERT INTO sourcebound.compaction_marks AS m (conversation_id, from_pair)
    SELECT p_conversation_id, 10 * k
    FROM (
      SELECT generate_series(v_old_ranges, v_new_ranges - 1) AS k
      UNION
      SELECT generate_series(v_first, v_last)
    ) ranges
    ON CONFLICT (conversation_id, from_pair) DO UPDATE SET generation = m.generation + 1, marked_at = now();
    GET DIAGNOSTICS v_marked = ROW_COUNT;
  END IF;
  IF v_marked > 0 THEN
    -- Its job key dedupes, preserve_run_at keeps a deferral's backoff; a
    -- fresh job costs one insert (enqueue_compaction).
    PERFORM sourcebound.enqueue_compaction(p_conversation_id);
  END IF;
END
$function$

-- function sourcebound.pairs_drift(uuid)
CREATE OR REPLACE FUNCTION sourcebound.pairs_drift(p_conversation_id uuid)
 RETURNS TABLE(run_id uuid, expected_index bigint, actual_index integer, problem text)
 LANGUAGE sql
 STABLE
AS $function$
  WITH expected AS (
    SELECT d.run_id, d.user_message_id, d.assistant_message_id,
           row_number() OVER (ORDER BY d.run_seq) - 1 AS pair_index
    FROM sourcebound.runs r
    CROSS JOIN LATERAL sourcebound.pair_of_run(r.id) d
    WHERE r.conversation_id = p_conversation_id
  ), actual AS (
    SELECT * FROM sourcebound.pairs WHERE conversation_id = p_conversation_id
  )
  SELECT coalesce(e.run_id, a.run_id), e.pair_index, a.pair_index,
         CASE WHEN a.run_id IS NULL THEN 'missing'
              WHEN e.run_id IS NULL THEN 'extra'
              WHEN e.pair_index <> a.pair_index THEN 'wrong_index'
              ELSE 'wrong_messages' END
  FROM expected e FULL JOIN actual a ON a.run_id = e.run_id
  WHERE e.run_id IS NULL OR a.run_id IS NULL OR e.pair_index <> a.pair_index
     OR e.user_message_id <> a.user_message_id OR e.assistant_message_id <> a.assistant_message_id
$function$

-- function sourcebound.pairs_lock(uuid,uuid)
CREATE OR REPLACE FUNCTION sourcebound.pairs_lock(p_a uuid, p_b uuid)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
DECLARE
  v_a integer := hashtext(p_a::text);
  v_b integer := hashtext(p_b::text);
BEGIN
  IF v_a IS NULL OR v_b IS NULL OR v_a = v_b THEN
    IF v_a IS NOT NULL THEN PERFORM pg_advisory_xact_lock(74201, v_a); END IF;
    IF v_b IS NOT NULL AND v_b IS DISTINCT FROM v_a THEN PERFORM pg_advisory_xact_lock(74201, v_b); END IF;
  ELSIF v_a < v_b THEN
    PERFORM pg_advisory_xact_lock(74201, v_a);
    PERFORM pg_advisory_xact_lock(74201, v_b);
  ELSE
    PERFORM pg_advisory_xact_lock(74201, v_b);
    PERFORM pg_advisory_xact_lock(74201, v_a);
  END IF;
END
$function$

-- function sourcebound.pairs_rebuild(uuid)
CREATE OR REPLACE FUNCTION sourcebound.pairs_rebuild(p_conversation_id uuid)
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
DECLARE
  v_others uuid[];
  v_other uuid;
  v_key integer;
  v_wrong integer;
  v_changed integer;
  v_old integer;
  v_new integer;
BEGIN
  IF current_setting('transaction_isolation') IN ('repeatable read', 'serializable') THEN
    PERFORM sourcebound.pair_write_refused();
  END IF;
  IF NOT EXISTS (SELECT 1 FROM sourcebound.conversations WHERE id = p_conversation_id) THEN
    RAISE EXCEPTION 'sourcebound: conversation % does not exist', p_conversation_id USING ERRCODE = 'no_data_found', CONSTRAINT = 'conversation_missing';
  END IF;
  -- Conversations whose index holds a run of this one, and conversations
  -- owning a run this one's index holds.
  SELECT array_agg(DISTINCT o) INTO v_others FROM (
    SELECT p.conversation_id AS o
    FROM sourcebound.pairs p JOIN sourcebound.runs r ON r.id = p.run_id
    WHERE r.conversation_id = p_conversation_id AND p.conversation_id <> p_conversation_id
    UNION
    SELECT r.conversation_id
    FROM sourcebound.pairs p JOIN sourcebound.runs r ON r.id = p.run_id
    WHERE p.conversation_id = p_conversation_id AND r.conversation_id <> p_conversation_id
  ) s;
  FOR v_key IN
    SELECT DISTINCT hashtext(c::text) FROM unnest(ARRAY[p_conversation_id] || coalesce(v_others, '{}')) c ORDER BY 1
  LOOP
    PERFORM pg_advisory_xact_lock(74201, v_key);
  END LOOP;

  SELECT count(*), min(least(expected_index, actual_index)) INTO v_wrong, v_changed
  FROM sourcebound.pairs_drift(p_conversation_id);
  IF v_wrong > 0 THEN
    SELECT coalesce(max(pair_index) + 1, 0) INTO v_old FROM sourcebound.pairs WHERE conversation_id = p_conversation_id;
    DELETE FROM sourcebound.pairs
    WHERE conversation_id = p_conversation_id
       OR run_id IN (SELECT id FROM sourcebound.runs WHERE conversation_id = p_conversation_id);
    INSERT INTO sourcebound.pairs (run_id, conversation_id, run_seq, pair_index, user_message_id, assistant_message_id)
    SELECT d.run_id, d.conversation_id, d.run_seq, row_number() OVER (ORDER BY d.run_seq) - 1, d.user_message_id, d.assistant_message_id
    FROM sourcebound.runs r CROSS JOIN LATERAL sourcebound.pair_of_run(r.id) d
    WHERE r.conversation_id = p_conversation_id;
    SELECT coalesce(max(pair_index) + 1, 0) INTO v_new FROM sourcebound.pairs WHERE conversation_id = p_conversation_id;
    PERFORM sourcebound.pairs_changed(p_conversation_id, v_old, v_new, coalesce(v_changed, 0));
  END IF;
  -- The other side of the drift, rebuilt the same way (their locks are held).
  FOREACH v_other IN ARRAY coalesce(v_others, '{}') LOOP
    v_wrong := v_wrong + sourcebound.pairs_rebuild(v_other);
  END LOOP;
  RETURN v_wrong;
END
$function$

-- function sourcebound.pairs_truncated()
CREATE OR REPLACE FUNCTION sourcebound.pairs_truncated()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
BEGIN
  -- TRUNCATE holds the messages exclusively: no pair write can
  -- interleave. DELETE, not TRUNCATE: a claim or a projection holding the
  -- pairs while it waits for the messages would deadlock with an exclusive lock.
  DELETE FROM sourcebound.pairs;
  DELETE FROM sourcebound.compaction_marks;
  RETURN NULL;
END
$function$

-- function sourcebound.plannable_range_count(integer)
CREATE OR REPLACE FUNCTION sourcebound.plannable_range_count(p_pair_count integer)
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE
AS $function$
  SELECT CASE WHEN p_pair_count < 30 THEN 0 ELSE (p_pair_count - 30) / 10 + 1 END
$function$

-- function sourcebound.projection_layout(uuid,text,integer)
CREATE OR REPLACE FUNCTION sourcebound.projection_layout(p_conversation_id uuid, p_scope text, p_budget_bytes integer)
 RETURNS TABLE("startPair" integer, "endPair" integer, summaries jsonb, gaps jsonb, "prefixSha256" text, "prefixBytes" integer, "savedCost" double precision, "savesBytes" double precision, "headSha256" text, "usedAt" timestamp with time zone)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
#variable_conflict use_column
BEGIN
  RETURN QUERY
  SELECT l.start_pair, l.end_pair, l.summaries, l.gaps, l.prefix_sha256, l.prefix_bytes, l.saved_cost, l.saves_bytes::float8, l.head_sha256,
         l.used_at
  FROM sourcebound.projection_layouts l
  JOIN sourcebound.conversations c ON c.id = l.conversation_id AND c.scope = p_scope
  WHERE l.conversation_id = p_conversation_id AND l.budget_bytes = p_budget_bytes;
END
$function$

-- function sourcebound.projection_pair_count(uuid,text)
CREATE OR REPLACE FUNCTION sourcebound.projection_pair_count(p_conversation_id uuid, p_scope text)
 RETURNS integer
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
DECLARE
  v_count integer;
BEGIN
  SELECT (SELECT coalesce(max(p.pair_index) + 1, 0) FROM sourcebound.pairs p WHERE p.conversation_id = c.id)::int
  INTO v_count
  FROM sourcebound.conversations c WHERE c.id = p_conversation_id AND c.scope = p_scope;
  RETURN v_count;
END
$function$

-- function sourcebound.projection_pairs_page(uuid,text,integer,integer,bigint)
CREATE OR REPLACE FUNCTION sourcebound.projection_pairs_page(p_conversation_id uuid, p_scope text, p_from_pair integer, p_to_pair integer, p_max_text_bytes bigint)
 RETURNS TABLE("pairIndex" integer, "runId" uuid, "userMessageId" uuid, "assistantMessageId" uuid, "userText" text, "assistantText" text)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
BEGIN
  RETURN QUERY
  SELECT e.pair_index, e.run_id, e.user_message_id, e.assistant_message_id,
         CASE WHEN p_max_text_bytes IS NULL OR octet_length(e.user_text)::bigint + octet_length(e.assistant_text) <= p_max_text_bytes
              THEN e.user_text END,
         CASE WHEN p_max_text_bytes IS NULL OR octet_length(e.user_text)::bigint + octet_length(e.assistant_text) <= p_max_text_bytes
              THEN e.assistant_text END
  FROM sourcebound.eligible_pairs e
  JOIN sourcebound.conversations c ON c.id = e.conversation_id AND c.scope = p_scope
  WHERE e.conversation_id = p_conversation_id AND e.pair_index BETWEEN p_from_pair AND p_to_pair
  ORDER BY e.pair_index;
END
$function$

-- function sourcebound.projection_read(uuid,text,integer,integer,integer,integer,bigint)
CREATE OR REPLACE FUNCTION sourcebound.projection_read(p_conversation_id uuid, p_scope text, p_layout_budget integer, p_near_low integer, p_near_high integer, p_first_page integer, p_max_text_bytes bigint)
 RETURNS TABLE("pairIndex" integer, "runId" uuid, "userMessageId" uuid, "assistantMessageId" uuid, "userText" text, "assistantText" text, read json)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
  v_count integer;
  v_layout json;
  v_layout_budget integer;
  v_start integer;
  v_summaries jsonb;
  v_ranges integer[];
  v_from integer;
  v_records json := '[]'::json;
BEGIN
  -- The pair count (no row: no such conversation in this scope) and the layout stored at this very budget.
  SELECT (SELECT coalesce(max(p.pair_index) + 1, 0) FROM sourcebound.pairs p WHERE p.conversation_id = c.id)::int,
         CASE WHEN l.conversation_id IS NOT NULL THEN json_build_object(
           'startPair', l.start_pair, 'endPair', l.end_pair, 'summaries', l.summaries, 'gaps', l.gaps,
           'prefixSha256', l.prefix_sha256, 'prefixBytes', l.prefix_bytes, 'savedCost', l.saved_cost,
           'savesBytes', l.saves_bytes::float8, 'headSha256', l.head_sha256, 'usedAt', l.used_at) END,
         l.budget_bytes, l.start_pair, l.summaries
  INTO v_count, v_layout, v_layout_budget, v_start, v_summaries
  FROM sourcebound.conversations c
  LEFT JOIN sourcebound.projection_layouts l ON l.conversation_id = c.id AND l.budget_bytes = p_layout_budget
  WHERE c.id = p_conversation_id AND c.scope = p_scope;
  IF NOT FOUND THEN
    RETURN;
  END IF;

  IF v_layout IS NULL AND p_layout_budget IS NOT NULL THEN
    -- None at this budget: the nearest larger one up to p_near_high, else the nearest smaller one down to p_near_low.
    SELECT json_build_object(
             'startPair', l.start_pair, 'endPair', l.end_pair, 'summaries', l.summaries, 'gaps', l.gaps,
             'prefixSha256', l.prefix_sha256, 'prefixBytes', l.prefix_bytes, 'savedCost', l.saved_cost,
             'savesBytes', l.saves_bytes::float8, 'headSha256', l.head_sha256, 'usedAt', l.used_at),
           l.budget_bytes, l.start_pair, l.summaries
    INTO v_layout, v_layout_budget, v_start, v_summaries
    FROM sourcebound.projection_layouts l
    WHERE l.conversation_id = p_conversation_id AND l.budget_bytes BETWEEN p_near_low AND p_near_high
    ORDER BY l.budget_bytes < p_layout_budget, abs(l.budget_bytes - p_layout_budget)
    LIMIT 1;
  END IF;

  -- The pairs a kept layout shows (from its start), or the newest page.
  v_from := CASE WHEN v_start IS NOT NULL AND v_start BETWEEN 0 AND v_count THEN v_start ELSE greatest(0, v_count - p_first_page) END;
  -- The records of the ranges the layout shows as summaries; without a layout, of the ranges of the pairs read.
  -- (Ranges by number k: pairs 10k..10k+9; a record belongs to the range its from_pair lies in, aligned or not.)
  IF v_layout IS NULL THEN
    v_ranges := ARRAY(SELECT g FROM generate_series(v_from / 10, (v_count - 1) / 10) g WHERE v_count > 0);
  ELSIF jsonb_array_length(v_summaries) = 0 THEN
    v_ranges := '{}';
  ELSE
    v_ranges := ARRAY(SELECT DISTINCT floor((e ->> 'fromPair')::numeric / 10)::int FROM jsonb_array_elements(v_summaries) e ORDER BY 1);
  END IF;
  IF cardinality(v_ranges) > 0 THEN
  SELECT coalesce(json_agg(json_build_object(
           'id', s.id, 'fromPair', s.from_pair, 'toPair', s.to_pair, 'sourceMessageIds', to_json(s.source_message_ids),
           'sourceHash', s.source_hash, 'hashVersion', s.hash_version, 'model', s.model, 'promptVersion', s.prompt_version,
           'status', s.status, 'summary', s.summary, 'completedAt', s.completed_at, 'createdAt', s.created_at,
           'ungrounded', to_json((SELECT a.grounding_ungrounded FROM sourcebound.conversation_summary_attempts a
                                  WHERE a.summary_id = s.id AND a.outcome = 'ok' ORDER BY a.id DESC LIMIT 1)))
         ORDER BY s.from_pair, s.completed_at DESC NULLS LAST, s.created_at DESC, s.id), '[]'::json)
  INTO v_records
  FROM sourcebound.conversation_summaries s
  WHERE s.conversation_id = p_conversation_id AND s.scope = p_scope
    AND s.from_pair BETWEEN 10 * v_ranges[1] AND 10 * v_ranges[cardinality(v_ranges)] + 9
    AND floor(s.from_pair::numeric / 10)::int = ANY (v_ranges)
    AND s.status IN ('completed', 'failed');
  END IF;

  RETURN QUERY SELECT NULL::int, NULL::uuid, NULL::uuid, NULL::uuid, NULL::text, NULL::text,
    json_build_object('count', v_count, 'layout', v_layout, 'layoutBudget', v_layout_budget, 'fromPair', v_from,
                      'recordRanges', to_json(v_ranges), 'records', v_records,
                      -- What keeps history out of every pair, silently: messages with no run, replies still
                      -- streaming, runs not settled after ten minutes. Each count reads a partial index that
                      -- holds only such rows (0008_projection_problems), so it costs nothing when there are none.
                      'withoutRun', (SELECT count(*) FROM sourcebound.messages m WHERE m.conversation_id = p_conversation_id AND m.run_id IS NULL),
                      'streaming', (SELECT count(*) FROM sourcebound.messages m WHERE m.conversation_id = p_conversation_id AND m.status = 'streaming'),
                      'unsettledRuns', (SELECT count(*) FROM sourcebound.runs r
                                        WHERE r.conversation_id = p_conversation_id AND r.status IN ('queued', 'running')
                                          AND r.created_at < now() - interval '10 minutes'));
  RETURN QUERY
  SELECT e.pair_index, e.run_id, e.user_message_id, e.assistant_message_id,
         CASE WHEN p_max_text_bytes IS NULL OR octet_length(e.user_text)::bigint + octet_length(e.assistant_text) <= p_max_text_bytes
              THEN e.user_text END,
         CASE WHEN p_max_text_bytes IS NULL OR octet_length(e.user_text)::bigint + octet_length(e.assistant_text) <= p_max_text_bytes
              THEN e.assistant_text END,
         NULL::json
  FROM sourcebound.eligible_pairs e
  WHERE e.conversation_id = p_conversation_id AND e.pair_index >= v_from AND e.pair_index < v_count
  ORDER BY e.pair_index;
END
$function$

-- function sourcebound.projection_summaries(uuid,text,integer,integer)
CREATE OR REPLACE FUNCTION sourcebound.projection_summaries(p_conversation_id uuid, p_scope text, p_from_pair integer, p_to_pair integer)
 RETURNS TABLE(id uuid, "fromPair" integer, "toPair" integer, "sourceMessageIds" json, "sourceHash" text, "hashVersion" integer, model text, "promptVersion" text, status text, summary text, "completedAt" timestamp with time zone, "createdAt" timestamp with time zone, ungrounded json)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
#variable_conflict use_column
BEGIN
  RETURN QUERY
  SELECT s.id, s.from_pair, s.to_pair, to_json(s.source_message_ids), s.source_hash, s.hash_version, s.model, s.prompt_version,
         s.status, s.summary, s.completed_at, s.created_at,
         to_json((SELECT a.grounding_ungrounded FROM sourcebound.conversation_summary_attempts a
                  WHERE a.summary_id = s.id AND a.outcome = 'ok' ORDER BY a.id DESC LIMIT 1))
  FROM sourcebound.conversation_summaries s
  WHERE s.conversation_id = p_conversation_id AND s.scope = p_scope
    AND s.from_pair BETWEEN p_from_pair AND p_to_pair
    AND s.status IN ('completed', 'failed')
  ORDER BY s.from_pair, s.completed_at DESC NULLS LAST, s.created_at DESC, s.id;
END
$function$

-- function sourcebound.range_needs_work(uuid,integer)
CREATE OR REPLACE FUNCTION sourcebound.range_needs_work(p_conversation_id uuid, p_from_pair integer)
 RETURNS boolean
 LANGUAGE sql
 STABLE
AS $function$
  SELECT NOT EXISTS (
    SELECT 1
    FROM sourcebound.range_source(p_conversation_id, p_from_pair) src
    JOIN sourcebound.conversation_summaries s
      ON s.conversation_id = p_conversation_id AND s.from_pair = p_from_pair
     AND s.status IN ('completed', 'failed') AND s.hash_version = 1
     AND s.source_hash = src.source_hash AND s.source_message_ids = src.source_message_ids
    WHERE src.pairs = 10
  )
$function$

-- function sourcebound.range_source(uuid,integer)
CREATE OR REPLACE FUNCTION sourcebound.range_source(p_conversation_id uuid, p_from_pair integer)
 RETURNS TABLE(pairs integer, source_message_ids uuid[], source_hash text, assistant_ids uuid[], assistant_texts text[], input_chars integer)
 LANGUAGE sql
 STABLE
AS $function$
  SELECT count(*)::int,
         -- 10 x 2 (user, assistant) flattened in row order: u0, a0, u1, a1...
         ARRAY(SELECT unnest(array_agg(ARRAY[p.user_message_id, p.assistant_message_id] ORDER BY p.pair_index))),
         sourcebound.source_hash_v1_of(count(*)::int,
           string_agg(sourcebound.source_hash_v1_pair(p.user_message_id, u.content, p.assistant_message_id, a.content), ''::bytea ORDER BY p.pair_index)),
         array_agg(p.assistant_message_id ORDER BY p.pair_index),
         array_agg(a.content ORDER BY p.pair_index),
         coalesce(sum(char_length(a.content)), 0)::int
  FROM sourcebound.pairs p
  JOIN sourcebound.messages u ON u.id = p.user_message_id
  JOIN sourcebound.messages a ON a.id = p.assistant_message_id
  WHERE p.conversation_id = p_conversation_id AND p.pair_index BETWEEN p_from_pair AND p_from_pair + 9
    AND u.run_id IS NOT DISTINCT FROM p.run_id AND u.conversation_id IS NOT DISTINCT FROM p.conversation_id AND u.role IS NOT DISTINCT FROM 'user'
    AND a.run_id IS NOT DISTINCT FROM p.run_id AND a.conversation_id IS NOT DISTINCT FROM p.conversation_id AND a.role IS NOT DISTINCT FROM 'assistant'
$function$

-- function sourcebound.ranges_needing_work(uuid)
CREATE OR REPLACE FUNCTION sourcebound.ranges_needing_work(p_conversation_id uuid)
 RETURNS SETOF integer
 LANGUAGE sql
 STABLE
AS $function$
  SELECT 10 * k
  FROM generate_series(0, sourcebound.plannable_range_count(
         (SELECT coalesce(max(pair_index) + 1, 0)::int FROM sourcebound.pairs WHERE conversation_id = p_conversation_id)) - 1) k
  WHERE sourcebound.range_needs_work(p_conversation_id, 10 * k)
$function$

-- function sourcebound.refresh_pair(uuid,uuid,boolean)
CREATE OR REPLACE FUNCTION sourcebound.refresh_pair(p_conversation_id uuid, p_run_id uuid, p_content_changed boolean)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
DECLARE
  v_locked uuid[] := ARRAY[p_conversation_id];
  v_run_conversation uuid;
  v_run_status text;
  v_cur_conversation uuid;
  v_cur_index integer;
  v_cur_seq bigint;
  v_cur_user uuid;
  v_cur_assistant uuid;
  v_new_conversation uuid;
  v_new_seq bigint;
  v_new_user uuid;
  v_new_assistant uuid;
  v_count integer;
  v_index integer;
  v_same_place boolean;
  v_new_count integer;
  v_new_index integer;
  v_gone integer;
  v_next integer; -- later pairs (of the next eight) no longer in their place
  v_batched boolean := false;
BEGIN
  PERFORM pg_advisory_xact_lock(74201, hashtext(p_conversation_id::text));

  LOOP
    -- One read: the run, its pair as indexed, and its pair as defined.
    SELECT r.conversation_id, r.status,
           p.conversation_id, p.pair_index, p.run_seq, p.user_message_id, p.assistant_message_id,
           d.conversation_id, d.run_seq, d.user_message_id, d.assistant_message_id,
           -- Where a new pair would go (before the first pair with a later run, else at the end).
           (SELECT coalesce(max(x.pair_index) + 1, 0) FROM sourcebound.pairs x WHERE x.conversation_id = d.conversation_id),
           (SELECT x.pair_index FROM sourcebound.pairs x WHERE x.conversation_id = d.conversation_id AND x.run_seq > d.run_seq
            ORDER BY x.run_seq LIMIT 1)
    INTO v_run_conversation, v_run_status,
         v_cur_conversation, v_cur_index, v_cur_seq, v_cur_user, v_cur_assistant,
         v_new_conversation, v_new_seq, v_new_user, v_new_assistant,
         v_new_count, v_new_index
    FROM (SELECT p_run_id AS id) k
    LEFT JOIN sourcebound.runs r ON r.id = k.id
    LEFT JOIN sourcebound.pairs p ON p.run_id = k.id
    LEFT JOIN LATERAL sourcebound.pair_of_run(k.id) d ON true;

    -- Not indexed and not a pair: nothing to do (a run in progress, the common case).
    IF v_cur_conversation IS NULL AND v_new_conversation IS NULL THEN
      RETURN;
    END IF;
    -- Everything involved is under our locks: go on. Otherwise (a move under
    -- way whose own trigger has not run yet, or an index that drifted) take
    -- the other conversations' locks too and read again.
    EXIT WHEN (v_cur_conversation IS NULL OR v_cur_conversation = ANY (v_locked))
          AND (v_new_conversation IS NULL OR v_new_conversation = ANY (v_locked));
    PERFORM sourcebound.pairs_lock(v_cur_conversation, v_new_conversation);
    v_locked := v_locked || v_cur_conversation || v_new_conversation;
  END LOOP;

  v_same_place := v_cur_conversation IS NOT NULL AND v_new_conversation IS NOT NULL
    AND v_cur_conversation = v_new_conversation AND v_cur_seq = v_new_seq;

  IF v_same_place THEN
    IF v_cur_user = v_new_user AND v_cur_assistant = v_new_assistant THEN
      -- Same pair; only its text may have changed.
      IF NOT p_content_changed THEN
        RETURN;
      END IF;
    ELSE
      -- A message id changed: same place, new identity.
      UPDATE sourcebound.pairs SET user_message_id = v_new_user, assistant_message_id = v_new_assistant
      WHERE run_id = p_run_id;
    END IF;
    SELECT coalesce(max(pair_index) + 1, 0) INTO v_count FROM sourcebound.pairs WHERE conversation_id = v_cur_conversation;
    -- One pair changed in place: only its range.
    PERFORM sourcebound.pairs_changed(v_cur_conversation, v_count, v_count, v_cur_index, v_cur_index);
    RETURN;
  END IF;

  IF v_cur_conversation IS NOT NULL THEN
    IF NOT EXISTS (SELECT 1 FROM sourcebound.conversations WHERE id = v_cur_conversation) THEN
      -- A conversation being deleted takes its pairs with it by cascade: no
      -- shifting (quadratic) and nothing to report.
      DELETE FROM sourcebound.pairs WHERE run_id = p_run_id;
    ELSE
      SELECT coalesce(max(pair_index) + 1, 0) INTO v_count FROM sourcebound.pairs WHERE conversation_id = v_cur_conversation;
      -- Row triggers run once the whole statement has changed its rows.
      -- When one of the next eight pairs has left its place too (gone, moved
      -- to another conversation or to a new seq), the statement is taking
      -- several: every later pair of the conversation no longer in its place
      -- leaves now and the rest is renumbered once. Their own triggers find
      -- them unindexed and index them where they now belong, if anywhere.
      -- The usual removal or move of one pair costs eight probes more.
      SELECT count(*) INTO v_next
      FROM (SELECT p.run_id, p.conversation_id, p.run_seq FROM sourcebound.pairs p
            WHERE p.conversation_id = v_cur_conversation AND p.pair_index > v_cur_index
            ORDER BY p.pair_index LIMIT 8) p
      WHERE NOT EXISTS (SELECT 1 FROM sourcebound.pair_of_run(p.run_id) d WHERE d.conversation_id = p.conversation_id AND d.run_seq = p.run_seq);
      IF v_next = 0 THEN
        DELETE FROM sourcebound.pairs WHERE run_id = p_run_id;
        UPDATE sourcebound.pairs SET pair_index = pair_index - 1
        WHERE conversation_id = v_cur_conversation AND pair_index > v_cur_index;
        v_gone := 1;
      ELSE
        WITH gone AS (
          DELETE FROM sourcebound.pairs p
          WHERE p.conversation_id = v_cur_conversation AND p.pair_index >= v_cur_index
            AND (p.run_id = p_run_id OR NOT EXISTS (
              SELECT 1 FROM sourcebound.pair_of_run(p.run_id) d WHERE d.conversation_id = p.conversation_id AND d.run_seq = p.run_seq))
          RETURNING 1)
        SELECT count(*) INTO v_gone FROM gone;
        UPDATE sourcebound.pairs p SET pair_index = n.pair_index
        FROM (SELECT x.run_id, v_cur_index - 1 + row_number() OVER (ORDER BY x.pair_index) AS pair_index
              FROM sourcebound.pairs x WHERE x.conversation_id = v_cur_conversation AND x.pair_index > v_cur_index) n
        WHERE p.run_id = n.run_id;
        v_batched := true;
      END IF;
      IF v_batched OR v_new_conversation IS DISTINCT FROM v_cur_conversation THEN
        PERFORM sourcebound.pairs_changed(v_cur_conversation, v_count, v_count - v_gone, v_cur_index);
      END IF;
    END IF;
  END IF;

  IF v_new_conversation IS NOT NULL THEN
    IF v_new_conversation IS NOT DISTINCT FROM v_cur_conversation THEN
      -- It moved within the conversation (a new seq): its place is read again after the removal.
      SELECT (SELECT coalesce(max(pair_index) + 1, 0) FROM sourcebound.pairs WHERE conversation_id = v_new_conversation),
             (SELECT pair_index FROM sourcebound.pairs WHERE conversation_id = v_new_conversation AND run_seq > v_new_seq
              ORDER BY run_seq LIMIT 1)
      INTO v_count, v_index;
    ELSE
      -- Usually the newest run: it goes at the end and nothing shifts.
      v_count := v_new_count;
      v_index := v_new_index;
    END IF;
    IF v_index IS NULL THEN
      v_index := v_count;
    ELSE
      UPDATE sourcebound.pairs SET pair_index = pair_index + 1
      WHERE conversation_id = v_new_conversation AND pair_index >= v_index;
    END IF;
    INSERT INTO sourcebound.pairs (run_id, conversation_id, run_seq, pair_index, user_message_id, assistant_message_id)
    VALUES (p_run_id, v_new_conversation, v_new_seq, v_index, v_new_user, v_new_assistant);
    IF v_new_conversation IS NOT DISTINCT FROM v_cur_conversation AND NOT v_batched THEN
      -- Moved within the conversation (a new seq): the count is unchanged.
      -- Only the pairs between its old and its new place shifted.
      PERFORM sourcebound.pairs_changed(v_new_conversation, v_count + 1, v_count + 1, least(v_cur_index, v_index), greatest(v_cur_index, v_index));
    ELSE
      -- Into another conversation, or back after a removal of several (reported above).
      PERFORM sourcebound.pairs_changed(v_new_conversation, v_count, v_count + 1, v_index);
    END IF;
  END IF;
END
$function$

-- function sourcebound.refuse_truncate()
CREATE OR REPLACE FUNCTION sourcebound.refuse_truncate()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
BEGIN
  RAISE EXCEPTION 'sourcebound: % keeps immutable records and cannot be truncated; delete conversations to erase them', TG_TABLE_NAME
    USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'truncate_refused';
END
$function$

-- function sourcebound.row_security(boolean)
CREATE OR REPLACE FUNCTION sourcebound.row_security(p_on boolean)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_table text;
BEGIN
  FOR v_table IN SELECT sourcebound.row_security_tables() LOOP
    EXECUTE format('ALTER TABLE sourcebound.%I %s ROW LEVEL SECURITY', v_table, CASE WHEN p_on THEN 'ENABLE' ELSE 'DISABLE' END);
  END LOOP;
END
$function$

-- function sourcebound.row_security_tables()
CREATE OR REPLACE FUNCTION sourcebound.row_security_tables()
 RETURNS SETOF text
 LANGUAGE sql
 IMMUTABLE
AS $function$
  SELECT unnest(ARRAY['conversations', 'conversation_summaries', 'conversation_summary_attempts', 'runs', 'messages', 'pairs', 'projection_layouts',
                      'run_budgets', 'run_checkpoints', 'run_model_requests', 'run_results', 'run_summary_requests',
                      'run_tool_units', 'run_turns'])
$function$

-- function sourcebound.run_budget_charge(uuid,integer,bigint,integer,bigint)
CREATE OR REPLACE FUNCTION sourcebound.run_budget_charge(p_run_id uuid, p_reserved_requests integer, p_reserved_tokens bigint, p_charged_requests integer, p_charged_tokens bigint)
 RETURNS void
 LANGUAGE sql
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
  UPDATE sourcebound.run_budgets b
  SET requests_reserved = b.requests_reserved - p_reserved_requests, tokens_reserved = b.tokens_reserved - p_reserved_tokens,
      requests_used = b.requests_used + p_charged_requests, tokens_used = b.tokens_used + p_charged_tokens, updated_at = now()
  WHERE b.run_id = p_run_id
$function$

-- function sourcebound.run_checkpoint_commit(text,uuid,uuid,text,text,text,jsonb,integer,bigint,text[],text[],text[],integer,text)
CREATE OR REPLACE FUNCTION sourcebound.run_checkpoint_commit(p_scope text, p_request_id uuid, p_checkpoint_id uuid, p_summary text, p_answer_model text, p_provider_request_id text, p_usage jsonb, p_charged_requests integer, p_charged_tokens bigint, p_grounding_checked text[], p_grounding_ungrounded text[], p_source_hashes text[], p_correction_revision integer, p_model_route text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
DECLARE
  v_req sourcebound.run_summary_requests := sourcebound.run_summary_request_in_scope(p_scope, p_request_id);
BEGIN
  PERFORM sourcebound.run_summary_ok_verdict(p_summary, p_grounding_checked, p_grounding_ungrounded);
  IF v_req.status <> 'dispatched' THEN
    RETURN false;
  END IF;
  IF v_req.hash_version <> 1 THEN
    RAISE EXCEPTION 'sourcebound: run source hash version % cannot be computed here', v_req.hash_version
      USING CONSTRAINT = 'run_source_hash_version_unknown';
  END IF;
  IF cardinality(p_source_hashes) IS DISTINCT FROM cardinality(v_req.compacted_seqs)
     OR sourcebound.run_source_hash_v1(p_source_hashes) <> v_req.source_hash THEN
    RAISE EXCEPTION 'sourcebound: the work groups'' hashes of summary request % are not its source', v_req.id
      USING CONSTRAINT = 'run_checkpoint_source_hashes';
  END IF;
  IF NOT EXISTS (SELECT 1 FROM sourcebound.run_turns
                 WHERE run_id = v_req.run_id AND revision = p_correction_revision) THEN
    RAISE EXCEPTION 'sourcebound: run % has no revision %', v_req.run_id, p_correction_revision
      USING CONSTRAINT = 'run_checkpoint_revision';
  END IF;

  UPDATE sourcebound.run_summary_requests
  SET status = 'ok', spent = true, reason = NULL, summary = p_summary, answer_model = p_answer_model,
      provider_request_id = p_provider_request_id, usage = p_usage,
      charged_requests = p_charged_requests, charged_tokens = p_charged_tokens, not_before = NULL, settled_at = now(),
      grounding_checked = p_grounding_checked, grounding_ungrounded = p_grounding_ungrounded
  WHERE id = v_req.id;
  PERFORM sourcebound.run_budget_charge(v_req.run_id, v_req.reserved_requests, v_req.reserved_tokens, p_charged_requests, p_charged_tokens);

  INSERT INTO sourcebound.run_checkpoints (
    id, run_id, conversation_id, scope, segment, predecessor_id, correction_revision, model_route, from_seq, to_seq,
    compacted_seqs, source_hashes, source_hash, hash_version, tool_result_refs, summary_request_id, summary_model,
    prompt_version, summary, summary_bytes)
  SELECT p_checkpoint_id, v_req.run_id, v_req.conversation_id, v_req.scope,
    coalesce((SELECT k.segment FROM sourcebound.run_checkpoints k WHERE k.id = v_req.predecessor_id), 0) + 1,
    v_req.predecessor_id, p_correction_revision, p_model_route, v_req.from_seq, v_req.to_seq, v_req.compacted_seqs,
    p_source_hashes, v_req.source_hash, v_req.hash_version,
    (SELECT coalesce(jsonb_agg(jsonb_build_object(
        'proposalId', u.proposal_id, 'tool', u.tool_name, 'settlement', u.status, 'dispatchId', u.dispatch_id,
        'resultId', u.result_id, 'version', u.result_version) ORDER BY u.turn_seq, u.position), '[]'::jsonb)
     FROM sourcebound.run_tool_units u WHERE u.run_id = v_req.run_id AND u.turn_seq = ANY (v_req.compacted_seqs)),
    v_req.id, p_answer_model, v_req.prompt_version, p_summary, octet_length(p_summary);
  RETURN true;
END
$function$

-- function sourcebound.run_checkpoints_guard()
CREATE OR REPLACE FUNCTION sourcebound.run_checkpoints_guard()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
DECLARE
  v_last sourcebound.run_checkpoints%ROWTYPE;
  v_after bigint := 0;
  v_n integer := cardinality(NEW.compacted_seqs);
  v_req sourcebound.run_summary_requests%ROWTYPE;
BEGIN
  IF TG_OP = 'DELETE' THEN
    IF sourcebound.run_parent_alive(OLD.run_id) THEN
      RAISE EXCEPTION 'sourcebound: checkpoint % cannot be deleted; delete its run to erase it', OLD.id
        USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_checkpoint_delete';
    END IF;
    RETURN OLD;
  END IF;
  IF TG_OP = 'UPDATE' THEN
    RAISE EXCEPTION 'sourcebound: checkpoint % is immutable', OLD.id
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_checkpoint_immutable';
  END IF;

  SELECT * INTO v_last FROM sourcebound.run_checkpoints WHERE run_id = NEW.run_id ORDER BY segment DESC LIMIT 1;
  IF FOUND THEN
    IF NEW.predecessor_id IS DISTINCT FROM v_last.id OR NEW.segment <> v_last.segment + 1 THEN
      RAISE EXCEPTION 'sourcebound: checkpoint must follow the newest checkpoint % of run %', v_last.id, NEW.run_id
        USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_checkpoint_chain';
    END IF;
    v_after := v_last.to_seq;
  ELSIF NEW.predecessor_id IS NOT NULL OR NEW.segment <> 1 THEN
    RAISE EXCEPTION 'sourcebound: the first checkpoint of run % has segment 1 and no predecessor', NEW.run_id
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_checkpoint_first';
  END IF;
  IF NEW.from_seq <= v_after THEN
    RAISE EXCEPTION 'sourcebound: checkpoint range %..% overlaps the range before it (ending at %)', NEW.from_seq, NEW.to_seq, v_after
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_checkpoint_overlap';
  END IF;
  IF NEW.compacted_seqs[1] <> NEW.from_seq OR NEW.compacted_seqs[v_n] <> NEW.to_seq
     OR EXISTS (SELECT 1 FROM generate_series(1, v_n - 1) i WHERE NEW.compacted_seqs[i + 1] <= NEW.compacted_seqs[i]) THEN
    RAISE EXCEPTION 'sourcebound: compacted turns must increase strictly from from_seq to to_seq'
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_checkpoint_turn_order';
  END IF;
  IF (SELECT count(*) FROM sourcebound.run_turns
      WHERE run_id = NEW.run_id AND kind = 'model' AND seq = ANY (NEW.compacted_seqs)) <> v_n
     OR EXISTS (SELECT 1 FROM sourcebound.run_turns
                WHERE run_id = NEW.run_id AND kind = 'model' AND seq > v_after AND seq <= NEW.to_seq
                  AND seq <> ALL (NEW.compacted_seqs)) THEN
    RAISE EXCEPTION 'sourcebound: compacted turns must be every model turn of run % from % to %', NEW.run_id, v_after + 1, NEW.to_seq
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_checkpoint_turns';
  END IF;
  IF EXISTS (SELECT 1 FROM sourcebound.run_tool_units
             WHERE run_id = NEW.run_id AND turn_seq = ANY (NEW.compacted_seqs)
               AND status NOT IN ('settled', 'failed', 'unknown')) THEN
    RAISE EXCEPTION 'sourcebound: a checkpoint cannot compact a tool unit that is not settled'
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_checkpoint_unsettled_tool';
  END IF;

  SELECT * INTO v_req FROM sourcebound.run_summary_requests WHERE id = NEW.summary_request_id;
  IF NOT FOUND OR v_req.run_id <> NEW.run_id OR v_req.status <> 'ok'
     OR v_req.predecessor_id IS DISTINCT FROM NEW.predecessor_id
     OR v_req.from_seq <> NEW.from_seq OR v_req.to_seq <> NEW.to_seq OR v_req.compacted_seqs <> NEW.compacted_seqs
     OR v_req.source_hash <> NEW.source_hash OR v_req.hash_version <> NEW.hash_version
     OR v_req.prompt_version <> NEW.prompt_version OR v_req.summary <> NEW.summary THEN
    RAISE EXCEPTION 'sourcebound: checkpoint must be bound to an ok summary request of the same run, range and source'
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_checkpoint_summary';
  END IF;
  RETURN NEW;
END
$function$

-- function sourcebound.run_in_current_scope(uuid)
CREATE OR REPLACE FUNCTION sourcebound.run_in_current_scope(p_run_id uuid)
 RETURNS boolean
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
  RETURN (SELECT c.scope = sourcebound.current_scope()
          FROM sourcebound.runs r JOIN sourcebound.conversations c ON c.id = r.conversation_id WHERE r.id = p_run_id);
END
$function$

-- function sourcebound.run_model_requests_guard()
CREATE OR REPLACE FUNCTION sourcebound.run_model_requests_guard()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
BEGIN
  IF TG_OP = 'DELETE' THEN
    IF sourcebound.run_parent_alive(OLD.run_id) THEN
      RAISE EXCEPTION 'sourcebound: model request receipt % cannot be deleted; delete its run to erase it', OLD.id
        USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_model_request_delete';
    END IF;
    RETURN OLD;
  END IF;
  RAISE EXCEPTION 'sourcebound: model request receipt % is immutable', OLD.id
    USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_model_request_immutable';
END
$function$

-- function sourcebound.run_parent_alive(uuid)
CREATE OR REPLACE FUNCTION sourcebound.run_parent_alive(p_run_id uuid)
 RETURNS boolean
 LANGUAGE sql
 STABLE
AS $function$
  SELECT EXISTS (
    SELECT 1 FROM sourcebound.runs r
    JOIN sourcebound.conversations c ON c.id = r.conversation_id
    WHERE r.id = p_run_id)
$function$

-- function sourcebound.run_results_guard()
CREATE OR REPLACE FUNCTION sourcebound.run_results_guard()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
BEGIN
  IF TG_OP = 'DELETE' THEN
    IF sourcebound.run_parent_alive(OLD.run_id) THEN
      RAISE EXCEPTION 'sourcebound: result % version % cannot be deleted; delete its run to erase it', OLD.id, OLD.version
        USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_result_delete';
    END IF;
    RETURN OLD;
  END IF;
  IF TG_OP = 'UPDATE' THEN
    RAISE EXCEPTION 'sourcebound: result % version % is immutable; store a new version', OLD.id, OLD.version
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_result_immutable';
  END IF;
  IF NEW.version > 1 AND NOT EXISTS (
    SELECT 1 FROM sourcebound.run_results
    WHERE id = NEW.id AND version = NEW.version - 1 AND run_id = NEW.run_id AND kind = NEW.kind) THEN
    RAISE EXCEPTION 'sourcebound: result % version % must follow version % of the same run', NEW.id, NEW.version, NEW.version - 1
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_result_version_gap';
  END IF;
  NEW.byte_size := octet_length(NEW.content);
  NEW.line_count := CASE WHEN NEW.content = '' THEN 0
                         ELSE length(NEW.content) - length(replace(NEW.content, E'\n', '')) + 1 END;
  NEW.json_bytes := octet_length(to_json(NEW.content)::text);
  NEW.sha256 := encode(sha256(convert_to(NEW.content, 'UTF8')), 'hex');
  RETURN NEW;
END
$function$

-- function sourcebound.run_source_hash_v1(text[])
CREATE OR REPLACE FUNCTION sourcebound.run_source_hash_v1(p_group_hashes text[])
 RETURNS text
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
  SELECT encode(sha256(convert_to('sourcebound/run-source', 'UTF8') || '\x00'::bytea || int4send(1)
    || int4send(coalesce(cardinality(p_group_hashes), 0))
    || coalesce((SELECT string_agg(sourcebound.source_hash_v1_field(h), ''::bytea ORDER BY o)
                 FROM unnest(p_group_hashes) WITH ORDINALITY AS x(h, o)), ''::bytea)), 'hex')
$function$

-- function sourcebound.run_summary_expire(text,uuid,timestamp with time zone)
CREATE OR REPLACE FUNCTION sourcebound.run_summary_expire(p_scope text, p_run_id uuid, p_now timestamp with time zone)
 RETURNS SETOF uuid
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
  WITH e AS (
    UPDATE sourcebound.run_summary_requests
    SET status = 'unknown', spent = true, settled_at = now(),
        reason = 'lease_expired: unsettled after its deadline; the process that sent it was lost',
        charged_requests = reserved_requests, charged_tokens = reserved_tokens
    WHERE run_id = p_run_id AND scope = p_scope AND status = 'dispatched' AND lease_expires_at < p_now
    RETURNING id, reserved_requests, reserved_tokens
  ), b AS (
    UPDATE sourcebound.run_budgets b
    SET requests_reserved = b.requests_reserved - t.r, tokens_reserved = b.tokens_reserved - t.t,
        requests_used = b.requests_used + t.r, tokens_used = b.tokens_used + t.t, updated_at = now()
    FROM (SELECT sum(reserved_requests)::int AS r, sum(reserved_tokens)::bigint AS t FROM e) t
    WHERE b.run_id = p_run_id AND t.r IS NOT NULL
    RETURNING 1
  )
  SELECT id FROM e ORDER BY id
$function$

-- function sourcebound.run_summary_ok_verdict(text,text[],text[])
CREATE OR REPLACE FUNCTION sourcebound.run_summary_ok_verdict(p_summary text, p_checked text[], p_ungrounded text[])
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
BEGIN
  IF p_summary IS NULL OR p_checked IS NULL OR p_ungrounded IS NULL THEN
    RAISE EXCEPTION 'sourcebound: an ok summary request is settled with its answer and its grounding verdict'
      USING CONSTRAINT = 'run_summary_ok_verdict';
  END IF;
END
$function$

-- function sourcebound.run_summary_request_in_scope(text,uuid)
CREATE OR REPLACE FUNCTION sourcebound.run_summary_request_in_scope(p_scope text, p_request_id uuid)
 RETURNS sourcebound.run_summary_requests
 LANGUAGE plpgsql
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
DECLARE
  v_req sourcebound.run_summary_requests;
BEGIN
  SELECT * INTO v_req FROM sourcebound.run_summary_requests WHERE id = p_request_id AND scope = p_scope FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'sourcebound: no summary request % in scope %', p_request_id, p_scope
      USING ERRCODE = 'no_data_found', CONSTRAINT = 'run_summary_request_in_scope';
  END IF;
  RETURN v_req;
END
$function$

-- function sourcebound.run_summary_requests_guard()
CREATE OR REPLACE FUNCTION sourcebound.run_summary_requests_guard()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
BEGIN
  IF TG_OP = 'DELETE' THEN
    IF sourcebound.run_parent_alive(OLD.run_id) THEN
      RAISE EXCEPTION 'sourcebound: summary request % cannot be deleted; delete its run to erase it', OLD.id
        USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_summary_request_delete';
    END IF;
    RETURN OLD;
  END IF;
  IF TG_OP = 'INSERT' THEN
    IF NEW.status <> 'dispatched' THEN
      RAISE EXCEPTION 'sourcebound: a summary request receipt is written before dispatch, as dispatched'
        USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_summary_request_not_dispatched';
    END IF;
    IF (SELECT count(*) FROM sourcebound.run_summary_requests
        WHERE identity_key = NEW.identity_key AND (status = 'dispatched' OR spent)) >= 2 THEN
      RAISE EXCEPTION 'sourcebound: summary identity % has spent its two attempts', NEW.identity_key
        USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_summary_attempts_spent';
    END IF;
    RETURN NEW;
  END IF;
  IF OLD.status <> 'dispatched' THEN
    RAISE EXCEPTION 'sourcebound: summary request % is settled (%) and immutable', OLD.id, OLD.status
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_summary_request_immutable';
  END IF;
  IF NEW.status = 'dispatched' THEN
    RAISE EXCEPTION 'sourcebound: summary request % can only be settled', OLD.id
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_summary_request_settle_only';
  END IF;
  IF NEW.run_id <> OLD.run_id OR NEW.conversation_id <> OLD.conversation_id OR NEW.scope <> OLD.scope
     OR NEW.identity_key <> OLD.identity_key OR NEW.attempt <> OLD.attempt
     OR NEW.predecessor_id IS DISTINCT FROM OLD.predecessor_id
     OR NEW.from_seq <> OLD.from_seq OR NEW.to_seq <> OLD.to_seq OR NEW.compacted_seqs <> OLD.compacted_seqs
     OR NEW.source_hash <> OLD.source_hash OR NEW.hash_version <> OLD.hash_version
     OR NEW.model <> OLD.model OR NEW.prompt_version <> OLD.prompt_version
     OR NEW.reserved_requests <> OLD.reserved_requests OR NEW.reserved_tokens <> OLD.reserved_tokens
     OR NEW.dispatched_at <> OLD.dispatched_at THEN
    RAISE EXCEPTION 'sourcebound: the identity of summary request % cannot change', OLD.id
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_summary_request_identity';
  END IF;
  RETURN NEW;
END
$function$

-- function sourcebound.run_summary_requests_identity()
CREATE OR REPLACE FUNCTION sourcebound.run_summary_requests_identity()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
BEGIN
  IF NEW.identity_key IS DISTINCT FROM encode(sha256(convert_to('sourcebound/run-candidate', 'UTF8') || '\x00'::bytea || int4send(1)
       || sourcebound.source_hash_v1_field(NEW.run_id::text) || sourcebound.source_hash_v1_field(coalesce(NEW.predecessor_id::text, ''))
       || sourcebound.source_hash_v1_field(NEW.from_seq::text) || sourcebound.source_hash_v1_field(NEW.to_seq::text)
       || sourcebound.source_hash_v1_field(NEW.source_hash) || sourcebound.source_hash_v1_field(NEW.model)
       || sourcebound.source_hash_v1_field(NEW.prompt_version)), 'hex') THEN
    RAISE EXCEPTION 'sourcebound: summary request identity % is not the identity of its run, predecessor, range, source, model and prompt', NEW.identity_key
      USING CONSTRAINT = 'run_summary_request_identity_key';
  END IF;
  RETURN NEW;
END
$function$

-- function sourcebound.run_summary_settle(text,uuid,text,text,text,text,text,jsonb,integer,bigint,timestamp with time zone,text[],text[])
CREATE OR REPLACE FUNCTION sourcebound.run_summary_settle(p_scope text, p_request_id uuid, p_status text, p_reason text, p_summary text, p_answer_model text, p_provider_request_id text, p_usage jsonb, p_charged_requests integer, p_charged_tokens bigint, p_not_before timestamp with time zone, p_grounding_checked text[], p_grounding_ungrounded text[])
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
DECLARE
  v_req sourcebound.run_summary_requests := sourcebound.run_summary_request_in_scope(p_scope, p_request_id);
BEGIN
  IF p_status IS NULL OR p_status NOT IN ('ok', 'invalid', 'deferred', 'unknown', 'config') THEN
    RAISE EXCEPTION 'sourcebound: a summary request is settled as ok, invalid, deferred, unknown or config, not %', p_status
      USING CONSTRAINT = 'run_summary_outcome_unknown';
  END IF;
  IF p_status = 'ok' THEN
    PERFORM sourcebound.run_summary_ok_verdict(p_summary, p_grounding_checked, p_grounding_ungrounded);
    IF p_reason IS NULL THEN
      RAISE EXCEPTION 'sourcebound: an accepted answer is settled with its checkpoint (run_checkpoint_commit); settled alone, an ok names why it was refused'
        USING CONSTRAINT = 'run_summary_ok_refused_only';
    END IF;
  END IF;
  IF v_req.status <> 'dispatched' THEN
    RETURN false;
  END IF;
  UPDATE sourcebound.run_summary_requests
  SET status = p_status, spent = p_status IN ('ok', 'invalid', 'unknown'), reason = p_reason,
      summary = CASE WHEN p_status = 'ok' THEN p_summary END,
      answer_model = p_answer_model, provider_request_id = p_provider_request_id, usage = p_usage,
      charged_requests = p_charged_requests, charged_tokens = p_charged_tokens, not_before = p_not_before, settled_at = now(),
      grounding_checked = p_grounding_checked, grounding_ungrounded = p_grounding_ungrounded
  WHERE id = v_req.id;
  PERFORM sourcebound.run_budget_charge(v_req.run_id, v_req.reserved_requests, v_req.reserved_tokens, p_charged_requests, p_charged_tokens);
  RETURN true;
END
$function$

-- function sourcebound.run_tool_units_guard()
CREATE OR REPLACE FUNCTION sourcebound.run_tool_units_guard()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
BEGIN
  IF TG_OP = 'DELETE' THEN
    IF sourcebound.run_parent_alive(OLD.run_id) THEN
      RAISE EXCEPTION 'sourcebound: tool unit % cannot be deleted; delete its run to erase it', OLD.proposal_id
        USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_tool_unit_delete';
    END IF;
    RETURN OLD;
  END IF;
  IF TG_OP = 'INSERT' THEN
    IF NEW.status <> 'proposed' THEN
      RAISE EXCEPTION 'sourcebound: tool unit % must start as proposed', NEW.proposal_id
        USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_tool_unit_not_proposed';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM sourcebound.run_turns WHERE seq = NEW.turn_seq AND run_id = NEW.run_id AND kind = 'model') THEN
      RAISE EXCEPTION 'sourcebound: tool unit % must belong to a model turn of its run', NEW.proposal_id
        USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_tool_unit_turn';
    END IF;
    RETURN NEW;
  END IF;
  IF OLD.status IN ('settled', 'failed', 'unknown') THEN
    RAISE EXCEPTION 'sourcebound: tool unit % is % and immutable', OLD.proposal_id, OLD.status
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_tool_unit_immutable';
  END IF;
  IF NEW.run_id <> OLD.run_id OR NEW.turn_seq <> OLD.turn_seq OR NEW.position <> OLD.position
     OR NEW.proposal_id <> OLD.proposal_id OR NEW.tool_name <> OLD.tool_name OR NEW.input <> OLD.input
     OR NEW.created_at <> OLD.created_at THEN
    RAISE EXCEPTION 'sourcebound: the identity of tool unit % cannot change', OLD.proposal_id
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_tool_unit_identity';
  END IF;
  IF OLD.dispatch_id IS NOT NULL AND NEW.dispatch_id IS DISTINCT FROM OLD.dispatch_id THEN
    RAISE EXCEPTION 'sourcebound: tool unit % was dispatched as %; its dispatch identity cannot change', OLD.proposal_id, OLD.dispatch_id
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_tool_unit_dispatch_identity';
  END IF;
  IF NEW.status = 'proposed' OR (OLD.status = 'dispatched' AND NEW.status = 'dispatched') THEN
    RAISE EXCEPTION 'sourcebound: tool unit % cannot go from % to %', OLD.proposal_id, OLD.status, NEW.status
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_tool_unit_transition';
  END IF;
  IF NEW.result_id IS NOT NULL AND NOT EXISTS (
    SELECT 1 FROM sourcebound.run_results
    WHERE id = NEW.result_id AND version = NEW.result_version AND run_id = NEW.run_id) THEN
    RAISE EXCEPTION 'sourcebound: the result of tool unit % must be a result of its run', OLD.proposal_id
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_tool_unit_result_run';
  END IF;
  RETURN NEW;
END
$function$

-- function sourcebound.run_turns_guard()
CREATE OR REPLACE FUNCTION sourcebound.run_turns_guard()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
DECLARE
  v_next integer;
BEGIN
  IF TG_OP = 'DELETE' THEN
    IF sourcebound.run_parent_alive(OLD.run_id) THEN
      RAISE EXCEPTION 'sourcebound: run history entry % cannot be deleted; delete its run to erase it', OLD.seq
        USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_turn_delete';
    END IF;
    RETURN OLD;
  END IF;
  IF TG_OP = 'UPDATE' THEN
    RAISE EXCEPTION 'sourcebound: run history entry % is immutable', OLD.seq
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_turn_immutable';
  END IF;
  IF NEW.kind = 'request' THEN
    IF EXISTS (SELECT 1 FROM sourcebound.run_turns WHERE run_id = NEW.run_id) THEN
      RAISE EXCEPTION 'sourcebound: the initial request must be the first entry of run %', NEW.run_id
        USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_request_not_first';
    END IF;
    RETURN NEW;
  END IF;
  SELECT max(revision) + 1 INTO v_next FROM sourcebound.run_turns WHERE run_id = NEW.run_id AND revision IS NOT NULL;
  IF v_next IS NULL THEN
    RAISE EXCEPTION 'sourcebound: run % has no initial request; record it first', NEW.run_id
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_request_missing';
  END IF;
  IF NEW.kind = 'correction' AND NEW.revision <> v_next THEN
    RAISE EXCEPTION 'sourcebound: the next correction of run % is revision %, not %', NEW.run_id, v_next, NEW.revision
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_correction_revision';
  END IF;
  RETURN NEW;
END
$function$

-- function sourcebound.runs_refresh_pair()
CREATE OR REPLACE FUNCTION sourcebound.runs_refresh_pair()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
DECLARE
  v_index integer;
BEGIN
  IF TG_OP = 'UPDATE' AND NEW.id = OLD.id AND NEW.conversation_id = OLD.conversation_id AND NEW.seq = OLD.seq THEN
    IF (OLD.status IN ('completed', 'partial', 'clarify_pending')) = (NEW.status IN ('completed', 'partial', 'clarify_pending')) THEN
      RETURN NULL;
    END IF;
    IF current_setting('transaction_isolation') IN ('repeatable read', 'serializable') THEN
      PERFORM sourcebound.pair_write_refused();
    END IF;
    IF NEW.status IN ('completed', 'partial', 'clarify_pending') THEN
      -- The lock comes before the definition is read (see refresh_pair).
      PERFORM pg_advisory_xact_lock(74201, hashtext(NEW.conversation_id::text));
      INSERT INTO sourcebound.pairs (run_id, conversation_id, run_seq, pair_index, user_message_id, assistant_message_id)
      SELECT NEW.id, NEW.conversation_id, NEW.seq, coalesce(last.pair_index + 1, 0), u.id, a.id
      FROM sourcebound.messages u
      JOIN sourcebound.messages a
        ON a.run_id = NEW.id AND a.role = 'assistant' AND a.conversation_id = NEW.conversation_id
      LEFT JOIN LATERAL (
        SELECT x.pair_index, x.run_seq FROM sourcebound.pairs x
        WHERE x.conversation_id = NEW.conversation_id ORDER BY x.pair_index DESC LIMIT 1
      ) last ON true
      WHERE u.run_id = NEW.id AND u.role = 'user' AND u.conversation_id = NEW.conversation_id
        AND a.status = 'completed'
        AND u.content ~ '[^\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]'
        AND a.content ~ '[^\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]'
        AND (last.run_seq IS NULL OR last.run_seq < NEW.seq)
      RETURNING pair_index INTO v_index;
      IF FOUND THEN
        IF sourcebound.plannable_range_count(v_index + 1) > sourcebound.plannable_range_count(v_index) THEN
          PERFORM sourcebound.pairs_changed(NEW.conversation_id, v_index, v_index + 1, v_index, v_index);
        END IF;
        RETURN NULL;
      END IF;
    END IF;
  END IF;
  -- Erasing a conversation (its runs go by cascade) reads nothing that matters.
  IF current_setting('transaction_isolation') IN ('repeatable read', 'serializable') THEN
    IF TG_OP = 'UPDATE' OR EXISTS (SELECT 1 FROM sourcebound.conversations WHERE id = OLD.conversation_id) THEN
      PERFORM sourcebound.pair_write_refused();
    END IF;
  END IF;
  IF TG_OP = 'UPDATE' AND OLD.conversation_id IS DISTINCT FROM NEW.conversation_id THEN
    PERFORM sourcebound.pairs_lock(OLD.conversation_id, NEW.conversation_id);
  END IF;
  PERFORM sourcebound.refresh_pair(OLD.conversation_id, OLD.id, false);
  IF TG_OP = 'UPDATE' AND (NEW.id IS DISTINCT FROM OLD.id OR NEW.conversation_id IS DISTINCT FROM OLD.conversation_id) THEN
    PERFORM sourcebound.refresh_pair(NEW.conversation_id, NEW.id, false);
  END IF;
  RETURN NULL;
END
$function$

-- function sourcebound.scope_call_admit(text,integer)
CREATE OR REPLACE FUNCTION sourcebound.scope_call_admit(p_scope text, p_limit integer)
 RETURNS timestamp with time zone
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
DECLARE
  v_hour timestamptz := date_trunc('hour', now());
  v_calls integer;
BEGIN
  IF p_limit <= 0 THEN
    RETURN NULL;
  END IF;
  INSERT INTO sourcebound.scope_call_windows AS w (scope, hour_start, calls) VALUES (p_scope, v_hour, 1)
  ON CONFLICT (scope, hour_start) DO UPDATE SET calls = w.calls + 1 WHERE w.calls < p_limit
  RETURNING w.calls INTO v_calls;
  IF v_calls IS NULL THEN
    RETURN v_hour + interval '1 hour';
  END IF;
  IF v_calls = 1 THEN
    DELETE FROM sourcebound.scope_call_windows WHERE scope = p_scope AND hour_start < v_hour;
  END IF;
  RETURN NULL;
END
$function$

-- function sourcebound.scope_fixed()
CREATE OR REPLACE FUNCTION sourcebound.scope_fixed()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
BEGIN
  IF TG_TABLE_NAME = 'conversations' THEN
    RAISE EXCEPTION 'sourcebound: the scope and id of a conversation are fixed once written'
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'conversation_scope_fixed';
  END IF;
  IF (SELECT scope FROM sourcebound.conversations WHERE id = OLD.conversation_id)
     IS DISTINCT FROM (SELECT scope FROM sourcebound.conversations WHERE id = NEW.conversation_id) THEN
    RAISE EXCEPTION 'sourcebound: a % row cannot move to a conversation of another scope', TG_TABLE_NAME
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'conversation_scope_fixed';
  END IF;
  RETURN NEW;
END
$function$

-- function sourcebound.source_hash_v1(uuid[],text[],uuid[],text[])
CREATE OR REPLACE FUNCTION sourcebound.source_hash_v1(p_user_ids uuid[], p_user_texts text[], p_assistant_ids uuid[], p_assistant_texts text[])
 RETURNS text
 LANGUAGE sql
 STABLE PARALLEL SAFE
AS $function$
  SELECT sourcebound.source_hash_v1_of(coalesce(cardinality(p_user_ids), 0),
           string_agg(sourcebound.source_hash_v1_pair(x.u, x.ut, x.a, x.at), ''::bytea ORDER BY x.o))
  FROM unnest(p_user_ids, p_user_texts, p_assistant_ids, p_assistant_texts) WITH ORDINALITY AS x(u, ut, a, at, o)
$function$

-- function sourcebound.source_hash_v1_field(text)
CREATE OR REPLACE FUNCTION sourcebound.source_hash_v1_field(p_value text)
 RETURNS bytea
 LANGUAGE sql
 STABLE PARALLEL SAFE
AS $function$
  SELECT int4send(octet_length(convert_to(p_value, 'UTF8'))) || convert_to(p_value, 'UTF8')
$function$

-- function sourcebound.source_hash_v1_of(integer,bytea)
CREATE OR REPLACE FUNCTION sourcebound.source_hash_v1_of(p_pairs integer, p_fields bytea)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  SELECT encode(sha256('\x736f75726365626f756e642f636f6e766572736174696f6e2d736f7572636500'::bytea
    || int4send(1) || int4send(p_pairs) || coalesce(p_fields, ''::bytea)), 'hex')
$function$

-- function sourcebound.source_hash_v1_pair(uuid,text,uuid,text)
CREATE OR REPLACE FUNCTION sourcebound.source_hash_v1_pair(p_user_id uuid, p_user_text text, p_assistant_id uuid, p_assistant_text text)
 RETURNS bytea
 LANGUAGE sql
 STABLE PARALLEL SAFE
AS $function$
  SELECT sourcebound.source_hash_v1_field(p_user_id::text) || sourcebound.source_hash_v1_field(p_user_text)
      || sourcebound.source_hash_v1_field(p_assistant_id::text) || sourcebound.source_hash_v1_field(p_assistant_text)
$function$

-- function sourcebound.sweep_compaction(integer)
CREATE OR REPLACE FUNCTION sourcebound.sweep_compaction(p_limit integer DEFAULT 1000)
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
DECLARE
  v_after uuid;
  v_conversation uuid;
  v_last uuid;
  v_count integer := 0;
  v_seen integer := 0;
BEGIN
  -- Dead claims no claim will come for: lease over, and the
  -- range's source is not theirs now, or the range is no longer plannable,
  -- or it has no mark (no_claim_will_come).
  -- Looked for in the claims in flight only; a few at a time; one that a
  -- claim or a commit holds is skipped.
  IF EXISTS (SELECT 1 FROM sourcebound.conversation_summaries s WHERE s.status = 'running' AND s.lease_expires_at <= now()) THEN
    WITH judged AS (
      SELECT s.id, sourcebound.no_claim_will_come(s.conversation_id, s.from_pair, s.source_hash, s.source_message_ids) AS why
      FROM sourcebound.conversation_summaries s
      WHERE s.status = 'running' AND s.lease_expires_at <= now()
    ), dead AS (
      SELECT s.id, j.why
      FROM judged j JOIN sourcebound.conversation_summaries s ON s.id = j.id
      WHERE j.why IS NOT NULL AND s.status = 'running' AND s.lease_expires_at <= now()
      LIMIT p_limit
      FOR UPDATE OF s SKIP LOCKED
    ), settled AS (
      UPDATE sourcebound.conversation_summaries s
      SET updated_at = now(), status = CASE WHEN s.attempts_spent + 1 >= 2 THEN 'failed' ELSE 'stale' END,
          attempts_spent = s.attempts_spent + 1,
          failure_reason = CASE WHEN s.attempts_spent + 1 >= 2 THEN 'two attempts spent (the last: lease expired, and ' || dead.why || ')'
                                ELSE 'lease expired, and ' || dead.why END,
          lease_owner = NULL, lease_expires_at = NULL, not_before = NULL
      FROM dead WHERE s.id = dead.id
      RETURNING s.id, dead.why)
    UPDATE sourcebound.conversation_summary_attempts a
    SET outcome = 'unknown', spent = true, finished_at = now(),
        reason = 'lease_expired: the worker holding the claim stopped before settling, and ' || settled.why
    FROM settled WHERE a.summary_id = settled.id AND a.outcome IS NULL;
  END IF;

  -- Pending records no claim will come for: the same three cases, past their not_before.
  IF EXISTS (SELECT 1 FROM sourcebound.conversation_summaries s WHERE s.status = 'pending' AND (s.not_before IS NULL OR s.not_before <= now())) THEN
    WITH judged AS (
      SELECT s.id, sourcebound.no_claim_will_come(s.conversation_id, s.from_pair, s.source_hash, s.source_message_ids) AS why
      FROM sourcebound.conversation_summaries s
      WHERE s.status = 'pending' AND (s.not_before IS NULL OR s.not_before <= now())
    ), orphaned AS (
      SELECT s.id, j.why
      FROM judged j JOIN sourcebound.conversation_summaries s ON s.id = j.id
      WHERE j.why IS NOT NULL AND s.status = 'pending' AND (s.not_before IS NULL OR s.not_before <= now())
      LIMIT p_limit
      FOR UPDATE OF s SKIP LOCKED
    )
    UPDATE sourcebound.conversation_summaries s
    SET updated_at = now(), status = 'stale', not_before = NULL,
        failure_reason = 'pending, and ' || orphaned.why
    FROM orphaned WHERE s.id = orphaned.id;
  END IF;

  SELECT after_conversation_id INTO v_after FROM sourcebound.compaction_sweep_cursor WHERE singleton FOR UPDATE;
  FOR v_conversation IN
    SELECT DISTINCT m.conversation_id FROM sourcebound.compaction_marks m
    WHERE m.conversation_id > coalesce(v_after, '00000000-0000-0000-0000-000000000000'::uuid)
    ORDER BY m.conversation_id LIMIT p_limit
  LOOP
    v_seen := v_seen + 1;
    v_last := v_conversation;
    v_count := v_count + sourcebound.compaction_enqueue_if_lost(v_conversation);
  END LOOP;
  -- Wrap around: the conversations up to the cursor.
  IF v_after IS NOT NULL AND v_seen < p_limit THEN
    FOR v_conversation IN
      SELECT DISTINCT m.conversation_id FROM sourcebound.compaction_marks m
      WHERE m.conversation_id <= v_after
      ORDER BY m.conversation_id LIMIT p_limit - v_seen
    LOOP
      v_seen := v_seen + 1;
      v_last := v_conversation;
      v_count := v_count + sourcebound.compaction_enqueue_if_lost(v_conversation);
    END LOOP;
  END IF;
  -- A page that reached the limit continues after its last conversation; a shorter one saw them all.
  INSERT INTO sourcebound.compaction_sweep_cursor (singleton, after_conversation_id)
  VALUES (true, CASE WHEN v_seen >= p_limit THEN v_last END)
  ON CONFLICT (singleton) DO UPDATE SET after_conversation_id = excluded.after_conversation_id;
  RETURN v_count;
END
$function$

-- function sourcebound.worker_beat(text,text[],double precision)
CREATE OR REPLACE FUNCTION sourcebound.worker_beat(p_worker_id text, p_graphile_worker_ids text[], p_dead_after_ms double precision)
 RETURNS TABLE(worker_id text, silent_ms double precision, jobs_unlocked integer, claims_released integer)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
DECLARE
  v_dead sourcebound.workers;
  v_reaped record;
BEGIN
  INSERT INTO sourcebound.workers AS w (worker_id, graphile_worker_ids, beat_at) VALUES (p_worker_id, p_graphile_worker_ids, now())
  ON CONFLICT ON CONSTRAINT workers_pkey DO UPDATE SET graphile_worker_ids = EXCLUDED.graphile_worker_ids, beat_at = now();
  FOR v_dead IN
    SELECT * FROM sourcebound.workers d
    WHERE d.worker_id <> p_worker_id
      AND greatest(d.beat_at, pg_postmaster_start_time()) < now() - make_interval(secs => p_dead_after_ms / 1000)
    FOR UPDATE SKIP LOCKED
  LOOP
    SELECT * INTO v_reaped FROM sourcebound.worker_reap(v_dead);
    worker_id := v_dead.worker_id;
    silent_ms := extract(epoch FROM now() - v_dead.beat_at) * 1000;
    jobs_unlocked := v_reaped.jobs_unlocked;
    claims_released := v_reaped.claims_released;
    RETURN NEXT;
  END LOOP;
END
$function$

-- function sourcebound.worker_leave(text)
CREATE OR REPLACE FUNCTION sourcebound.worker_leave(p_worker_id text, OUT jobs_unlocked integer, OUT claims_released integer)
 RETURNS record
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
DECLARE
  v_self sourcebound.workers;
BEGIN
  SELECT * INTO v_self FROM sourcebound.workers WHERE workers.worker_id = p_worker_id FOR UPDATE;
  IF NOT FOUND THEN
    jobs_unlocked := 0;
    claims_released := 0;
    RETURN;
  END IF;
  SELECT r.jobs_unlocked, r.claims_released INTO jobs_unlocked, claims_released FROM sourcebound.worker_reap(v_self) r;
END
$function$

-- function sourcebound.worker_reap(sourcebound.workers)
CREATE OR REPLACE FUNCTION sourcebound.worker_reap(p_worker sourcebound.workers, OUT jobs_unlocked integer, OUT claims_released integer)
 RETURNS record
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'sourcebound', 'pg_temp'
AS $function$
DECLARE
  v_conversations uuid[];
BEGIN
  SELECT count(*)::int INTO jobs_unlocked FROM graphile_worker.jobs WHERE locked_by = ANY (p_worker.graphile_worker_ids);
  IF jobs_unlocked > 0 THEN
    PERFORM graphile_worker.force_unlock_workers(p_worker.graphile_worker_ids);
  END IF;
  WITH released AS (
    UPDATE sourcebound.conversation_summaries SET lease_expires_at = now()
    WHERE status = 'running' AND lease_expires_at > now()
      AND (lease_owner = p_worker.worker_id OR starts_with(lease_owner, p_worker.worker_id || '/r'))
    RETURNING conversation_id
  )
  SELECT count(*)::int, coalesce(array_agg(DISTINCT conversation_id), '{}') INTO claims_released, v_conversations FROM released;
  PERFORM sourcebound.compaction_resume(v_conversations);
  DELETE FROM sourcebound.workers WHERE worker_id = p_worker.worker_id;
END
$function$
