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
	CONSTRAINT "projection_layouts_pkey" PRIMARY KEY("conversation_id","budget_bytes"),
	CONSTRAINT "projection_layouts_span" CHECK ("sourcebound"."projection_layouts"."budget_bytes" >= 0 and 0 <= "sourcebound"."projection_layouts"."start_pair" and "sourcebound"."projection_layouts"."start_pair" <= "sourcebound"."projection_layouts"."end_pair"),
	CONSTRAINT "projection_layouts_hash_hex" CHECK ("sourcebound"."projection_layouts"."prefix_sha256" ~ '^[0-9a-f]{64}$')
);
--> statement-breakpoint
ALTER TABLE "sourcebound"."projection_layouts" ADD CONSTRAINT "projection_layouts_conversation_id_conversations_id_fk" FOREIGN KEY ("conversation_id") REFERENCES "sourcebound"."conversations"("id") ON DELETE cascade ON UPDATE no action;