-- Invariant 1: immutable records cannot be erased in bulk. Row triggers do not
-- fire on TRUNCATE, so the guards of 0004 (conversation summaries and their
-- attempts) and of the run history (0007-0011) could be bypassed by
-- `TRUNCATE ... CASCADE`. Erasing a conversation with DELETE still erases its
-- records by cascade; nothing else can.
CREATE FUNCTION sourcebound.refuse_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'sourcebound: % keeps immutable records and cannot be truncated; delete conversations to erase them', TG_TABLE_NAME
    USING ERRCODE = 'integrity_constraint_violation';
END
$$;
--> statement-breakpoint
CREATE TRIGGER conversation_summaries_no_truncate BEFORE TRUNCATE ON sourcebound.conversation_summaries
  FOR EACH STATEMENT EXECUTE FUNCTION sourcebound.refuse_truncate();
--> statement-breakpoint
CREATE TRIGGER conversation_summary_attempts_no_truncate BEFORE TRUNCATE ON sourcebound.conversation_summary_attempts
  FOR EACH STATEMENT EXECUTE FUNCTION sourcebound.refuse_truncate();
--> statement-breakpoint
CREATE TRIGGER run_turns_no_truncate BEFORE TRUNCATE ON sourcebound.run_turns
  FOR EACH STATEMENT EXECUTE FUNCTION sourcebound.refuse_truncate();
--> statement-breakpoint
CREATE TRIGGER run_tool_units_no_truncate BEFORE TRUNCATE ON sourcebound.run_tool_units
  FOR EACH STATEMENT EXECUTE FUNCTION sourcebound.refuse_truncate();
--> statement-breakpoint
CREATE TRIGGER run_results_no_truncate BEFORE TRUNCATE ON sourcebound.run_results
  FOR EACH STATEMENT EXECUTE FUNCTION sourcebound.refuse_truncate();
--> statement-breakpoint
CREATE TRIGGER run_summary_requests_no_truncate BEFORE TRUNCATE ON sourcebound.run_summary_requests
  FOR EACH STATEMENT EXECUTE FUNCTION sourcebound.refuse_truncate();
--> statement-breakpoint
CREATE TRIGGER run_checkpoints_no_truncate BEFORE TRUNCATE ON sourcebound.run_checkpoints
  FOR EACH STATEMENT EXECUTE FUNCTION sourcebound.refuse_truncate();
--> statement-breakpoint
-- Invariant 2: "non-empty text" means the same thing in the database as in the
-- summarizer. 0001 used the regex class \S, whose meaning follows the server's
-- locale: under C.UTF-8 a reply of only no-break spaces or a BOM counted as
-- text, while the summarizer (JavaScript's trim) saw nothing and failed the
-- range twice. The class below is exactly what String.prototype.trim removes
-- (WhiteSpace and LineTerminator), independent of locale.
CREATE OR REPLACE FUNCTION sourcebound.pair_of_run(p_run_id uuid)
RETURNS TABLE (conversation_id uuid, run_id uuid, run_seq bigint, user_message_id uuid, assistant_message_id uuid)
LANGUAGE sql STABLE AS $$
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
$$;
--> statement-breakpoint
-- Pairs that were eligible only under the old class leave the index (through
-- the one maintenance path, so indexes shift and plannable ranges re-enqueue).
DO $$
DECLARE
  v record;
BEGIN
  FOR v IN
    SELECT p.conversation_id, p.run_id
    FROM sourcebound.pairs p
    JOIN sourcebound.messages u ON u.id = p.user_message_id
    JOIN sourcebound.messages a ON a.id = p.assistant_message_id
    WHERE u.content !~ '[^\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]'
       OR a.content !~ '[^\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]'
  LOOP
    PERFORM sourcebound.refresh_pair(v.conversation_id, v.run_id, false);
  END LOOP;
END
$$;
