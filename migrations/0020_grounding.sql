-- Invariant: the grounding check of an answer (src/grounding.ts) is kept with the attempt
-- that produced it: the facts checked and, among them, those the summarizer's material
-- does not contain (both set or both null; the ungrounded ones are a subset of the checked).
ALTER TABLE "sourcebound"."conversation_summary_attempts" ADD COLUMN "grounding_checked" text[];--> statement-breakpoint
ALTER TABLE "sourcebound"."conversation_summary_attempts" ADD COLUMN "grounding_ungrounded" text[];--> statement-breakpoint
ALTER TABLE "sourcebound"."run_summary_requests" ADD COLUMN "grounding_checked" text[];--> statement-breakpoint
ALTER TABLE "sourcebound"."run_summary_requests" ADD COLUMN "grounding_ungrounded" text[];--> statement-breakpoint
ALTER TABLE "sourcebound"."conversation_summary_attempts" ADD CONSTRAINT "conversation_summary_attempts_grounding" CHECK (("sourcebound"."conversation_summary_attempts"."grounding_checked" is null) = ("sourcebound"."conversation_summary_attempts"."grounding_ungrounded" is null) and "sourcebound"."conversation_summary_attempts"."grounding_ungrounded" <@ "sourcebound"."conversation_summary_attempts"."grounding_checked");--> statement-breakpoint
ALTER TABLE "sourcebound"."run_summary_requests" ADD CONSTRAINT "run_summary_requests_grounding" CHECK (("sourcebound"."run_summary_requests"."grounding_checked" is null) = ("sourcebound"."run_summary_requests"."grounding_ungrounded" is null) and "sourcebound"."run_summary_requests"."grounding_ungrounded" <@ "sourcebound"."run_summary_requests"."grounding_checked");