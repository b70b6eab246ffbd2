-- Invariant: there is ONE definition of an eligible pair (DESIGN.md, "Eligible
-- pair"), and everything else reads it. sourcebound.pair_of_run() is that
-- definition; sourcebound.pairs is its trigger-maintained materialization
-- (0003_pair_index.sql); sourcebound.eligible_pairs is what code reads.
--
-- A pair is the user message and the assistant message of one run when:
--   the run's status is completed, partial or clarify_pending;
--   the assistant message's status is completed;
--   both messages belong to that run AND to the run's conversation;
--   both contain non-whitespace text.
-- Tool calls, traces, streaming or foreign messages never enter a pair.
-- (Foreign messages cannot exist at all: messages_run_same_conversation_fk.)
CREATE FUNCTION sourcebound.pair_of_run(p_run_id uuid)
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
    AND u.content ~ '\S'
    AND a.content ~ '\S'
$$;
--> statement-breakpoint
-- Pair indexes are unique per conversation. DEFERRABLE so that shifting the
-- indexes after an insertion or removal in the middle is one UPDATE checked at
-- the end of the statement, not row by row.
ALTER TABLE sourcebound.pairs
  ADD CONSTRAINT pairs_conversation_index_key UNIQUE (conversation_id, pair_index) DEFERRABLE INITIALLY IMMEDIATE;
--> statement-breakpoint
CREATE VIEW sourcebound.eligible_pairs AS
  SELECT p.conversation_id,
         p.pair_index,
         p.run_id,
         p.run_seq,
         p.user_message_id,
         u.content AS user_text,
         p.assistant_message_id,
         a.content AS assistant_text
  FROM sourcebound.pairs p
  JOIN sourcebound.messages u ON u.id = p.user_message_id
  JOIN sourcebound.messages a ON a.id = p.assistant_message_id;
--> statement-breakpoint
-- Recomputes a conversation's pairs from the definition alone and returns every
-- row where the materialization differs (missing, extra, wrong index or ids).
-- Empty means the triggers kept sourcebound.pairs exact. Used by tests and
-- `sourcebound inspect`; it reads the whole conversation, so it is not for hot paths.
CREATE FUNCTION sourcebound.pairs_drift(p_conversation_id uuid)
RETURNS TABLE (run_id uuid, expected_index bigint, actual_index integer, problem text)
LANGUAGE sql STABLE AS $$
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
$$;
