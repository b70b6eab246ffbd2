CREATE SCHEMA "sourcebound";
--> statement-breakpoint
CREATE TABLE "sourcebound"."compaction_marks" (
	"conversation_id" uuid NOT NULL,
	"from_pair" integer NOT NULL,
	"generation" bigint DEFAULT 1 NOT NULL,
	"marked_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "compaction_marks_pkey" PRIMARY KEY("conversation_id","from_pair"),
	CONSTRAINT "compaction_marks_range_aligned" CHECK ("sourcebound"."compaction_marks"."from_pair" >= 0 and "sourcebound"."compaction_marks"."from_pair" % 10 = 0)
);
--> statement-breakpoint
CREATE TABLE "sourcebound"."compaction_sweep_cursor" (
	"singleton" boolean PRIMARY KEY DEFAULT true NOT NULL,
	"after_conversation_id" uuid,
	CONSTRAINT "compaction_sweep_cursor_one_row" CHECK ("sourcebound"."compaction_sweep_cursor"."singleton")
);
--> statement-breakpoint
CREATE TABLE "sourcebound"."conversation_summaries" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"conversation_id" uuid NOT NULL,
	"scope" text NOT NULL,
	"from_pair" integer NOT NULL,
	"to_pair" integer NOT NULL,
	"source_message_ids" uuid[] NOT NULL,
	"source_hash" text NOT NULL,
	"hash_version" integer NOT NULL,
	"model" text NOT NULL,
	"prompt_version" text NOT NULL,
	"status" text NOT NULL,
	"summary" text,
	"attempts_spent" integer DEFAULT 0 NOT NULL,
	"lease_owner" text,
	"lease_expires_at" timestamp with time zone,
	"not_before" timestamp with time zone,
	"failure_reason" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	"completed_at" timestamp with time zone,
	CONSTRAINT "conversation_summaries_identity_key" UNIQUE("conversation_id","from_pair","to_pair","source_hash","model","prompt_version"),
	CONSTRAINT "conversation_summaries_status_known" CHECK (status in ('running', 'pending', 'completed', 'failed', 'stale')),
	CONSTRAINT "conversation_summaries_range_aligned" CHECK ("sourcebound"."conversation_summaries"."from_pair" >= 0 and "sourcebound"."conversation_summaries"."from_pair" % 10 = 0 and "sourcebound"."conversation_summaries"."to_pair" = "sourcebound"."conversation_summaries"."from_pair" + 9),
	CONSTRAINT "conversation_summaries_twenty_sources" CHECK (cardinality("sourcebound"."conversation_summaries"."source_message_ids") = 20),
	CONSTRAINT "conversation_summaries_hash_hex" CHECK ("sourcebound"."conversation_summaries"."source_hash" ~ '^[0-9a-f]{64}$'),
	CONSTRAINT "conversation_summaries_attempts_bounded" CHECK ("sourcebound"."conversation_summaries"."attempts_spent" between 0 and 2),
	CONSTRAINT "conversation_summaries_completed_has_text" CHECK ("sourcebound"."conversation_summaries"."status" <> 'completed' or ("sourcebound"."conversation_summaries"."summary" is not null and length("sourcebound"."conversation_summaries"."summary") > 0 and "sourcebound"."conversation_summaries"."completed_at" is not null)),
	CONSTRAINT "conversation_summaries_running_has_lease" CHECK ("sourcebound"."conversation_summaries"."status" <> 'running' or ("sourcebound"."conversation_summaries"."lease_owner" is not null and "sourcebound"."conversation_summaries"."lease_expires_at" is not null))
);
--> statement-breakpoint
CREATE TABLE "sourcebound"."conversation_summary_attempts" (
	"id" bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY (sequence name "sourcebound"."conversation_summary_attempts_id_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"summary_id" uuid NOT NULL,
	"worker_id" text NOT NULL,
	"started_at" timestamp with time zone DEFAULT now() NOT NULL,
	"finished_at" timestamp with time zone,
	"outcome" text,
	"spent" boolean,
	"reason" text,
	"request_id" text,
	"usage" jsonb,
	"input_chars" integer,
	"grounding_checked" text[],
	"grounding_ungrounded" text[],
	CONSTRAINT "conversation_summary_attempts_outcome_known" CHECK (outcome is null or outcome in ('ok', 'invalid', 'deferred', 'unknown', 'config', 'stale', 'lease_expired')),
	CONSTRAINT "conversation_summary_attempts_settled" CHECK ((outcome is null) = (finished_at is null) and (outcome is null) = (spent is null)),
	CONSTRAINT "conversation_summary_attempts_grounding" CHECK (("sourcebound"."conversation_summary_attempts"."grounding_checked" is null) = ("sourcebound"."conversation_summary_attempts"."grounding_ungrounded" is null) and "sourcebound"."conversation_summary_attempts"."grounding_ungrounded" <@ "sourcebound"."conversation_summary_attempts"."grounding_checked")
);
--> statement-breakpoint
CREATE TABLE "sourcebound"."conversations" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"scope" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "conversations_id_scope_key" UNIQUE("id","scope"),
	CONSTRAINT "conversations_scope_not_empty" CHECK (length("sourcebound"."conversations"."scope") > 0)
);
--> statement-breakpoint
CREATE TABLE "sourcebound"."messages" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"conversation_id" uuid NOT NULL,
	"run_id" uuid,
	"role" text NOT NULL,
	"content" text DEFAULT '' NOT NULL,
	"status" text DEFAULT 'completed' NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"edited_at" timestamp with time zone,
	CONSTRAINT "messages_role_known" CHECK (role in ('user', 'assistant')),
	CONSTRAINT "messages_status_known" CHECK (status in ('streaming', 'completed', 'failed'))
);
--> statement-breakpoint
CREATE TABLE "sourcebound"."pairs" (
	"run_id" uuid PRIMARY KEY NOT NULL,
	"conversation_id" uuid NOT NULL,
	"run_seq" bigint NOT NULL,
	"pair_index" integer NOT NULL,
	"user_message_id" uuid NOT NULL,
	"assistant_message_id" uuid NOT NULL,
	CONSTRAINT "pairs_index_nonnegative" CHECK ("sourcebound"."pairs"."pair_index" >= 0)
);
--> statement-breakpoint
CREATE TABLE "sourcebound"."projection_layouts" (
	"conversation_id" uuid NOT NULL,
	"budget_bytes" integer NOT NULL,
	"start_pair" integer NOT NULL,
	"end_pair" integer NOT NULL,
	"summaries" jsonb NOT NULL,
	"gaps" jsonb DEFAULT '[]'::jsonb NOT NULL,
	"prefix_sha256" text NOT NULL,
	"prefix_bytes" integer NOT NULL,
	"rewritten_at" timestamp with time zone DEFAULT now() NOT NULL,
	"saved_cost" double precision DEFAULT 0 NOT NULL,
	"saves_bytes" bigint DEFAULT 0 NOT NULL,
	"head_sha256" text,
	"used_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "projection_layouts_pkey" PRIMARY KEY("conversation_id","budget_bytes"),
	CONSTRAINT "projection_layouts_span" CHECK ("sourcebound"."projection_layouts"."budget_bytes" >= 0 and 0 <= "sourcebound"."projection_layouts"."start_pair" and "sourcebound"."projection_layouts"."start_pair" <= "sourcebound"."projection_layouts"."end_pair"),
	CONSTRAINT "projection_layouts_hash_hex" CHECK ("sourcebound"."projection_layouts"."prefix_sha256" ~ '^[0-9a-f]{64}$'),
	CONSTRAINT "projection_layouts_head_hash_hex" CHECK ("sourcebound"."projection_layouts"."head_sha256" is null or "sourcebound"."projection_layouts"."head_sha256" ~ '^[0-9a-f]{64}$'),
	CONSTRAINT "projection_layouts_ledger" CHECK ("sourcebound"."projection_layouts"."saved_cost" > '-Infinity' and "sourcebound"."projection_layouts"."saved_cost" < 'Infinity' and "sourcebound"."projection_layouts"."saves_bytes" >= 0)
);
--> statement-breakpoint
CREATE TABLE "sourcebound"."runs" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"conversation_id" uuid NOT NULL,
	"status" text NOT NULL,
	"seq" bigint GENERATED ALWAYS AS IDENTITY (sequence name "sourcebound"."runs_seq_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "runs_id_conversation_key" UNIQUE("id","conversation_id"),
	CONSTRAINT "runs_status_known" CHECK (status in ('queued', 'running', 'completed', 'partial', 'clarify_pending', 'failed', 'cancelled'))
);
--> statement-breakpoint
CREATE TABLE "sourcebound"."run_budgets" (
	"run_id" uuid PRIMARY KEY NOT NULL,
	"requests_limit" integer,
	"tokens_limit" bigint,
	"requests_used" integer DEFAULT 0 NOT NULL,
	"tokens_used" bigint DEFAULT 0 NOT NULL,
	"requests_reserved" integer DEFAULT 0 NOT NULL,
	"tokens_reserved" bigint DEFAULT 0 NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "run_budgets_nonnegative" CHECK (coalesce("sourcebound"."run_budgets"."requests_limit", 0) >= 0 and coalesce("sourcebound"."run_budgets"."tokens_limit", 0) >= 0
    and "sourcebound"."run_budgets"."requests_used" >= 0 and "sourcebound"."run_budgets"."tokens_used" >= 0 and "sourcebound"."run_budgets"."requests_reserved" >= 0 and "sourcebound"."run_budgets"."tokens_reserved" >= 0)
);
--> statement-breakpoint
CREATE TABLE "sourcebound"."run_checkpoints" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"run_id" uuid NOT NULL,
	"conversation_id" uuid NOT NULL,
	"scope" text NOT NULL,
	"segment" integer NOT NULL,
	"predecessor_id" uuid,
	"correction_revision" integer NOT NULL,
	"model_route" text NOT NULL,
	"from_seq" bigint NOT NULL,
	"to_seq" bigint NOT NULL,
	"compacted_seqs" bigint[] NOT NULL,
	"source_hashes" text[] NOT NULL,
	"source_hash" text NOT NULL,
	"hash_version" integer NOT NULL,
	"tool_result_refs" jsonb NOT NULL,
	"summary_request_id" uuid NOT NULL,
	"summary_model" text NOT NULL,
	"prompt_version" text NOT NULL,
	"summary" text NOT NULL,
	"summary_bytes" integer NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "run_checkpoints_segment_key" UNIQUE("run_id","segment"),
	CONSTRAINT "run_checkpoints_summary_request_key" UNIQUE("summary_request_id"),
	CONSTRAINT "run_checkpoints_chain" CHECK (("sourcebound"."run_checkpoints"."segment" = 1) = ("sourcebound"."run_checkpoints"."predecessor_id" is null) and "sourcebound"."run_checkpoints"."segment" >= 1),
	CONSTRAINT "run_checkpoints_range" CHECK ("sourcebound"."run_checkpoints"."from_seq" <= "sourcebound"."run_checkpoints"."to_seq"),
	CONSTRAINT "run_checkpoints_sources" CHECK (cardinality("sourcebound"."run_checkpoints"."compacted_seqs") >= 1 and cardinality("sourcebound"."run_checkpoints"."compacted_seqs") = cardinality("sourcebound"."run_checkpoints"."source_hashes")),
	CONSTRAINT "run_checkpoints_summary" CHECK (length("sourcebound"."run_checkpoints"."summary") > 0 and "sourcebound"."run_checkpoints"."summary_bytes" = octet_length("sourcebound"."run_checkpoints"."summary")),
	CONSTRAINT "run_checkpoints_correction_revision" CHECK ("sourcebound"."run_checkpoints"."correction_revision" >= 0),
	CONSTRAINT "run_checkpoints_source_hash_hex" CHECK ("sourcebound"."run_checkpoints"."source_hash" ~ '^[0-9a-f]{64}$')
);
--> statement-breakpoint
CREATE TABLE "sourcebound"."run_model_requests" (
	"id" bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY (sequence name "sourcebound"."run_model_requests_id_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"run_id" uuid NOT NULL,
	"request_key" text NOT NULL,
	"request_bytes" integer NOT NULL,
	"input_tokens" integer,
	"output_tokens" integer,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "run_model_requests_key" UNIQUE("run_id","request_key"),
	CONSTRAINT "run_model_requests_run_id_key" UNIQUE("run_id","id"),
	CONSTRAINT "run_model_requests_sizes" CHECK ("sourcebound"."run_model_requests"."request_bytes" >= 0 and coalesce("sourcebound"."run_model_requests"."input_tokens", 0) >= 0 and coalesce("sourcebound"."run_model_requests"."output_tokens", 0) >= 0)
);
--> statement-breakpoint
CREATE TABLE "sourcebound"."run_results" (
	"id" uuid NOT NULL,
	"version" integer NOT NULL,
	"run_id" uuid NOT NULL,
	"kind" text NOT NULL,
	"label" text,
	"content" text NOT NULL,
	"byte_size" integer NOT NULL,
	"line_count" integer NOT NULL,
	"json_bytes" integer NOT NULL,
	"sha256" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "run_results_pkey" PRIMARY KEY("id","version"),
	CONSTRAINT "run_results_kind_known" CHECK (kind in ('external', 'tool_result')),
	CONSTRAINT "run_results_version_positive" CHECK ("sourcebound"."run_results"."version" >= 1),
	CONSTRAINT "run_results_sizes" CHECK ("sourcebound"."run_results"."byte_size" >= 0 and "sourcebound"."run_results"."line_count" >= 0 and "sourcebound"."run_results"."json_bytes" >= "sourcebound"."run_results"."byte_size" + 2),
	CONSTRAINT "run_results_sha256_hex" CHECK ("sourcebound"."run_results"."sha256" ~ '^[0-9a-f]{64}$')
);
--> statement-breakpoint
CREATE TABLE "sourcebound"."run_summary_requests" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"run_id" uuid NOT NULL,
	"conversation_id" uuid NOT NULL,
	"scope" text NOT NULL,
	"identity_key" text NOT NULL,
	"attempt" integer NOT NULL,
	"predecessor_id" uuid,
	"from_seq" bigint NOT NULL,
	"to_seq" bigint NOT NULL,
	"compacted_seqs" bigint[] NOT NULL,
	"source_hash" text NOT NULL,
	"hash_version" integer NOT NULL,
	"model" text NOT NULL,
	"prompt_version" text NOT NULL,
	"max_chars" integer NOT NULL,
	"input_bytes" integer NOT NULL,
	"status" text DEFAULT 'dispatched' NOT NULL,
	"spent" boolean,
	"reason" text,
	"summary" text,
	"answer_model" text,
	"provider_request_id" text,
	"usage" jsonb,
	"reserved_requests" integer NOT NULL,
	"reserved_tokens" bigint NOT NULL,
	"charged_requests" integer,
	"charged_tokens" bigint,
	"not_before" timestamp with time zone,
	"lease_expires_at" timestamp with time zone NOT NULL,
	"dispatched_at" timestamp with time zone DEFAULT now() NOT NULL,
	"settled_at" timestamp with time zone,
	"grounding_checked" text[],
	"grounding_ungrounded" text[],
	CONSTRAINT "run_summary_requests_identity_attempt_key" UNIQUE("identity_key","attempt"),
	CONSTRAINT "run_summary_requests_status_known" CHECK (status in ('dispatched', 'ok', 'invalid', 'deferred', 'unknown', 'config')),
	CONSTRAINT "run_summary_requests_settled" CHECK (("sourcebound"."run_summary_requests"."status" = 'dispatched') = ("sourcebound"."run_summary_requests"."settled_at" is null) and ("sourcebound"."run_summary_requests"."status" = 'dispatched') = ("sourcebound"."run_summary_requests"."spent" is null)),
	CONSTRAINT "run_summary_requests_grounding" CHECK (("sourcebound"."run_summary_requests"."grounding_checked" is null) = ("sourcebound"."run_summary_requests"."grounding_ungrounded" is null) and "sourcebound"."run_summary_requests"."grounding_ungrounded" <@ "sourcebound"."run_summary_requests"."grounding_checked"),
	CONSTRAINT "run_summary_requests_ok_has_text" CHECK ("sourcebound"."run_summary_requests"."status" <> 'ok' or ("sourcebound"."run_summary_requests"."summary" is not null and length("sourcebound"."run_summary_requests"."summary") > 0)),
	CONSTRAINT "run_summary_requests_range" CHECK ("sourcebound"."run_summary_requests"."from_seq" <= "sourcebound"."run_summary_requests"."to_seq" and cardinality("sourcebound"."run_summary_requests"."compacted_seqs") >= 1),
	CONSTRAINT "run_summary_requests_attempt_positive" CHECK ("sourcebound"."run_summary_requests"."attempt" >= 1),
	CONSTRAINT "run_summary_requests_identity_hex" CHECK ("sourcebound"."run_summary_requests"."identity_key" ~ '^[0-9a-f]{64}$'),
	CONSTRAINT "run_summary_requests_source_hash_hex" CHECK ("sourcebound"."run_summary_requests"."source_hash" ~ '^[0-9a-f]{64}$')
);
--> statement-breakpoint
CREATE TABLE "sourcebound"."run_tool_units" (
	"id" bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY (sequence name "sourcebound"."run_tool_units_id_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"run_id" uuid NOT NULL,
	"turn_seq" bigint NOT NULL,
	"position" integer NOT NULL,
	"proposal_id" text NOT NULL,
	"tool_name" text NOT NULL,
	"input" jsonb NOT NULL,
	"status" text DEFAULT 'proposed' NOT NULL,
	"dispatch_id" text,
	"result_id" uuid,
	"result_version" integer,
	"result_inline" boolean DEFAULT true NOT NULL,
	"error" text,
	"dispatched_at" timestamp with time zone,
	"settled_at" timestamp with time zone,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "run_tool_units_proposal_key" UNIQUE("run_id","proposal_id"),
	CONSTRAINT "run_tool_units_position_key" UNIQUE("turn_seq","position"),
	CONSTRAINT "run_tool_units_dispatch_key" UNIQUE("run_id","dispatch_id"),
	CONSTRAINT "run_tool_units_status_known" CHECK (status in ('proposed', 'dispatched', 'settled', 'failed', 'unknown')),
	CONSTRAINT "run_tool_units_dispatch_matches_status" CHECK (case "sourcebound"."run_tool_units"."status" when 'proposed' then "sourcebound"."run_tool_units"."dispatch_id" is null when 'failed' then true else "sourcebound"."run_tool_units"."dispatch_id" is not null end),
	CONSTRAINT "run_tool_units_result_matches_status" CHECK (case "sourcebound"."run_tool_units"."status" when 'settled' then "sourcebound"."run_tool_units"."result_id" is not null when 'proposed' then "sourcebound"."run_tool_units"."result_id" is null when 'dispatched' then "sourcebound"."run_tool_units"."result_id" is null else true end),
	CONSTRAINT "run_tool_units_settled_at" CHECK (("sourcebound"."run_tool_units"."status" in ('settled', 'failed', 'unknown')) = ("sourcebound"."run_tool_units"."settled_at" is not null)),
	CONSTRAINT "run_tool_units_position" CHECK ("sourcebound"."run_tool_units"."position" >= 0)
);
--> statement-breakpoint
CREATE TABLE "sourcebound"."run_turns" (
	"seq" bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY (sequence name "sourcebound"."run_turns_seq_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"run_id" uuid NOT NULL,
	"kind" text NOT NULL,
	"revision" integer,
	"text" text NOT NULL,
	"model_request_id" bigint,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"thinking" jsonb,
	CONSTRAINT "run_turns_run_seq_key" UNIQUE("run_id","seq"),
	CONSTRAINT "run_turns_kind_known" CHECK (kind in ('request', 'correction', 'model')),
	CONSTRAINT "run_turns_revision_matches_kind" CHECK (case "sourcebound"."run_turns"."kind" when 'request' then "sourcebound"."run_turns"."revision" = 0 when 'correction' then "sourcebound"."run_turns"."revision" >= 1 else "sourcebound"."run_turns"."revision" is null end),
	CONSTRAINT "run_turns_model_request_only_on_model" CHECK ("sourcebound"."run_turns"."model_request_id" is null or "sourcebound"."run_turns"."kind" = 'model'),
	CONSTRAINT "run_turns_thinking_only_on_model" CHECK ("sourcebound"."run_turns"."thinking" is null or ("sourcebound"."run_turns"."kind" = 'model' and jsonb_typeof("sourcebound"."run_turns"."thinking") = 'array')),
	CONSTRAINT "run_turns_user_text_not_blank" CHECK ("sourcebound"."run_turns"."kind" = 'model' or "sourcebound"."run_turns"."text" ~ '[^\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]')
);
--> statement-breakpoint
ALTER TABLE "sourcebound"."compaction_marks" ADD CONSTRAINT "compaction_marks_conversation_id_conversations_id_fk" FOREIGN KEY ("conversation_id") REFERENCES "sourcebound"."conversations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "sourcebound"."conversation_summaries" ADD CONSTRAINT "conversation_summaries_conversation_fk" FOREIGN KEY ("conversation_id","scope") REFERENCES "sourcebound"."conversations"("id","scope") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "sourcebound"."conversation_summary_attempts" ADD CONSTRAINT "conversation_summary_attempts_summary_id_conversation_summaries_id_fk" FOREIGN KEY ("summary_id") REFERENCES "sourcebound"."conversation_summaries"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "sourcebound"."messages" ADD CONSTRAINT "messages_conversation_id_conversations_id_fk" FOREIGN KEY ("conversation_id") REFERENCES "sourcebound"."conversations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "sourcebound"."messages" ADD CONSTRAINT "messages_run_same_conversation_fk" FOREIGN KEY ("run_id","conversation_id") REFERENCES "sourcebound"."runs"("id","conversation_id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "sourcebound"."pairs" ADD CONSTRAINT "pairs_conversation_id_conversations_id_fk" FOREIGN KEY ("conversation_id") REFERENCES "sourcebound"."conversations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "sourcebound"."projection_layouts" ADD CONSTRAINT "projection_layouts_conversation_id_conversations_id_fk" FOREIGN KEY ("conversation_id") REFERENCES "sourcebound"."conversations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "sourcebound"."runs" ADD CONSTRAINT "runs_conversation_id_conversations_id_fk" FOREIGN KEY ("conversation_id") REFERENCES "sourcebound"."conversations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "sourcebound"."run_budgets" ADD CONSTRAINT "run_budgets_run_id_runs_id_fk" FOREIGN KEY ("run_id") REFERENCES "sourcebound"."runs"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "sourcebound"."run_checkpoints" ADD CONSTRAINT "run_checkpoints_predecessor_id_run_checkpoints_id_fk" FOREIGN KEY ("predecessor_id") REFERENCES "sourcebound"."run_checkpoints"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "sourcebound"."run_checkpoints" ADD CONSTRAINT "run_checkpoints_summary_request_id_run_summary_requests_id_fk" FOREIGN KEY ("summary_request_id") REFERENCES "sourcebound"."run_summary_requests"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "sourcebound"."run_checkpoints" ADD CONSTRAINT "run_checkpoints_run_fk" FOREIGN KEY ("run_id","conversation_id") REFERENCES "sourcebound"."runs"("id","conversation_id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "sourcebound"."run_checkpoints" ADD CONSTRAINT "run_checkpoints_scope_fk" FOREIGN KEY ("conversation_id","scope") REFERENCES "sourcebound"."conversations"("id","scope") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "sourcebound"."run_model_requests" ADD CONSTRAINT "run_model_requests_run_id_runs_id_fk" FOREIGN KEY ("run_id") REFERENCES "sourcebound"."runs"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "sourcebound"."run_results" ADD CONSTRAINT "run_results_run_id_runs_id_fk" FOREIGN KEY ("run_id") REFERENCES "sourcebound"."runs"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "sourcebound"."run_summary_requests" ADD CONSTRAINT "run_summary_requests_predecessor_id_run_checkpoints_id_fk" FOREIGN KEY ("predecessor_id") REFERENCES "sourcebound"."run_checkpoints"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "sourcebound"."run_summary_requests" ADD CONSTRAINT "run_summary_requests_run_fk" FOREIGN KEY ("run_id","conversation_id") REFERENCES "sourcebound"."runs"("id","conversation_id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "sourcebound"."run_summary_requests" ADD CONSTRAINT "run_summary_requests_scope_fk" FOREIGN KEY ("conversation_id","scope") REFERENCES "sourcebound"."conversations"("id","scope") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "sourcebound"."run_tool_units" ADD CONSTRAINT "run_tool_units_turn_fk" FOREIGN KEY ("run_id","turn_seq") REFERENCES "sourcebound"."run_turns"("run_id","seq") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "sourcebound"."run_tool_units" ADD CONSTRAINT "run_tool_units_result_fk" FOREIGN KEY ("result_id","result_version") REFERENCES "sourcebound"."run_results"("id","version") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "sourcebound"."run_turns" ADD CONSTRAINT "run_turns_run_id_runs_id_fk" FOREIGN KEY ("run_id") REFERENCES "sourcebound"."runs"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "sourcebound"."run_turns" ADD CONSTRAINT "run_turns_model_request_fk" FOREIGN KEY ("run_id","model_request_id") REFERENCES "sourcebound"."run_model_requests"("run_id","id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "conversation_summaries_conversation_idx" ON "sourcebound"."conversation_summaries" USING btree ("conversation_id","from_pair");--> statement-breakpoint
CREATE INDEX "conversation_summaries_open_idx" ON "sourcebound"."conversation_summaries" USING btree ("status") WHERE status in ('running', 'pending');--> statement-breakpoint
CREATE INDEX "conversation_summary_attempts_summary_idx" ON "sourcebound"."conversation_summary_attempts" USING btree ("summary_id");--> statement-breakpoint
CREATE UNIQUE INDEX "messages_run_role_key" ON "sourcebound"."messages" USING btree ("run_id","role") WHERE run_id is not null;--> statement-breakpoint
CREATE INDEX "messages_conversation_idx" ON "sourcebound"."messages" USING btree ("conversation_id");--> statement-breakpoint
CREATE UNIQUE INDEX "pairs_conversation_seq_key" ON "sourcebound"."pairs" USING btree ("conversation_id","run_seq");--> statement-breakpoint
CREATE INDEX "runs_conversation_seq_idx" ON "sourcebound"."runs" USING btree ("conversation_id","seq");--> statement-breakpoint
CREATE INDEX "run_checkpoints_conversation_idx" ON "sourcebound"."run_checkpoints" USING btree ("conversation_id");--> statement-breakpoint
CREATE INDEX "run_checkpoints_predecessor_idx" ON "sourcebound"."run_checkpoints" USING btree ("predecessor_id") WHERE predecessor_id is not null;--> statement-breakpoint
CREATE INDEX "run_results_run_idx" ON "sourcebound"."run_results" USING btree ("run_id","kind");--> statement-breakpoint
CREATE UNIQUE INDEX "run_summary_requests_in_flight_key" ON "sourcebound"."run_summary_requests" USING btree ("run_id") WHERE status = 'dispatched';--> statement-breakpoint
CREATE INDEX "run_summary_requests_run_idx" ON "sourcebound"."run_summary_requests" USING btree ("run_id","dispatched_at");--> statement-breakpoint
CREATE INDEX "run_summary_requests_conversation_idx" ON "sourcebound"."run_summary_requests" USING btree ("conversation_id");--> statement-breakpoint
CREATE INDEX "run_summary_requests_predecessor_idx" ON "sourcebound"."run_summary_requests" USING btree ("predecessor_id") WHERE predecessor_id is not null;--> statement-breakpoint
CREATE INDEX "run_tool_units_result_idx" ON "sourcebound"."run_tool_units" USING btree ("result_id","result_version") WHERE result_id is not null;--> statement-breakpoint
CREATE UNIQUE INDEX "run_turns_revision_key" ON "sourcebound"."run_turns" USING btree ("run_id","revision") WHERE revision is not null;--> statement-breakpoint
CREATE INDEX "run_turns_model_request_idx" ON "sourcebound"."run_turns" USING btree ("run_id","model_request_id") WHERE model_request_id is not null;