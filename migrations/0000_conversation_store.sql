CREATE SCHEMA "sourcebound";
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
	CONSTRAINT "conversation_summary_attempts_outcome_known" CHECK (outcome is null or outcome in ('ok', 'invalid', 'deferred', 'unknown', 'config', 'stale', 'lease_expired')),
	CONSTRAINT "conversation_summary_attempts_settled" CHECK ((outcome is null) = (finished_at is null) and (outcome is null) = (spent is null))
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
ALTER TABLE "sourcebound"."conversation_summaries" ADD CONSTRAINT "conversation_summaries_conversation_fk" FOREIGN KEY ("conversation_id","scope") REFERENCES "sourcebound"."conversations"("id","scope") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "sourcebound"."conversation_summary_attempts" ADD CONSTRAINT "conversation_summary_attempts_summary_id_conversation_summaries_id_fk" FOREIGN KEY ("summary_id") REFERENCES "sourcebound"."conversation_summaries"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "sourcebound"."messages" ADD CONSTRAINT "messages_conversation_id_conversations_id_fk" FOREIGN KEY ("conversation_id") REFERENCES "sourcebound"."conversations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "sourcebound"."messages" ADD CONSTRAINT "messages_run_same_conversation_fk" FOREIGN KEY ("run_id","conversation_id") REFERENCES "sourcebound"."runs"("id","conversation_id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "sourcebound"."pairs" ADD CONSTRAINT "pairs_conversation_id_conversations_id_fk" FOREIGN KEY ("conversation_id") REFERENCES "sourcebound"."conversations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "sourcebound"."runs" ADD CONSTRAINT "runs_conversation_id_conversations_id_fk" FOREIGN KEY ("conversation_id") REFERENCES "sourcebound"."conversations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "conversation_summaries_conversation_idx" ON "sourcebound"."conversation_summaries" USING btree ("conversation_id","from_pair");--> statement-breakpoint
CREATE INDEX "conversation_summaries_open_idx" ON "sourcebound"."conversation_summaries" USING btree ("status") WHERE status in ('running', 'pending');--> statement-breakpoint
CREATE INDEX "conversation_summary_attempts_summary_idx" ON "sourcebound"."conversation_summary_attempts" USING btree ("summary_id");--> statement-breakpoint
CREATE UNIQUE INDEX "messages_run_role_key" ON "sourcebound"."messages" USING btree ("run_id","role") WHERE run_id is not null;--> statement-breakpoint
CREATE INDEX "messages_conversation_idx" ON "sourcebound"."messages" USING btree ("conversation_id");--> statement-breakpoint
CREATE UNIQUE INDEX "pairs_conversation_seq_key" ON "sourcebound"."pairs" USING btree ("conversation_id","run_seq");--> statement-breakpoint
CREATE INDEX "runs_conversation_seq_idx" ON "sourcebound"."runs" USING btree ("conversation_id","seq");