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
ALTER TABLE "sourcebound"."compaction_marks" ADD CONSTRAINT "compaction_marks_conversation_id_conversations_id_fk" FOREIGN KEY ("conversation_id") REFERENCES "sourcebound"."conversations"("id") ON DELETE cascade ON UPDATE no action;