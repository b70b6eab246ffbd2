-- Invariants: a Run's initial request and corrections always hold text (never only whitespace:
-- they are carried verbatim into every later request, and the Messages API refuses an empty
-- text block; corrections are immutable, so one blank entry would stop the Run for good).
-- NOT VALID: rows written before this migration are not re-checked (they are immutable).
-- Thinking blocks of an extended-thinking model turn are kept with it, only on model turns.
ALTER TABLE "sourcebound"."run_turns" ADD COLUMN "thinking" jsonb;--> statement-breakpoint
ALTER TABLE "sourcebound"."run_turns" ADD CONSTRAINT "run_turns_thinking_only_on_model" CHECK ("sourcebound"."run_turns"."thinking" is null or ("sourcebound"."run_turns"."kind" = 'model' and jsonb_typeof("sourcebound"."run_turns"."thinking") = 'array'));--> statement-breakpoint
ALTER TABLE "sourcebound"."run_turns" ADD CONSTRAINT "run_turns_user_text_not_blank" CHECK ("sourcebound"."run_turns"."kind" = 'model' or "sourcebound"."run_turns"."text" ~ '[^\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]') NOT VALID;