-- Invariant: unchanged from 0016/0023/0024 (sourcebound.pairs holds exactly
-- what sourcebound.pair_of_run() defines, under every change, each change
-- reported to pairs_changed() with the pairs it touched; the lock protocol of
-- 0003). This migration only makes the application's write path cheaper
-- (bench P1, issue 14), measured with callgrind on the five statements of a
-- live pair (bench/README.md, P1): per pair, the triggers cost +0.60M
-- instructions over the same writes without them before, +0.46M after.
--
-- Where it went, besides the three PL/pgSQL calls: PostgreSQL reads a WHEN
-- clause back from its stored node text and plans it on every statement
-- (about 26 instructions per character), and it does the same for a CHECK
-- constraint. The message update's clause was 1,687 characters (four text
-- comparisons, each with its constant spelled out byte by byte), the insert's
-- 865, the run update's 370: about 100K a pair, paid before any trigger runs.

-- The run side, as in 0024, except the append reads the run from NEW instead
-- of re-reading it through pair_of_run(): the trigger has the row, and the
-- IF above has already decided its status. The messages are read and tested
-- as pair_of_run() does (same joins, same status and whitespace tests; a drift
-- between the two is what the drift checks of test/integrity compare).
-- The NOT EXISTS (a pair of this run) of 0024 is dropped: pairs are dense and
-- in run order, so if this run had a pair, the pair with the highest index
-- would have a run_seq >= this run's, and the "last.run_seq < seq" test
-- already excludes it. Anything else takes the general path, unchanged.
CREATE OR REPLACE FUNCTION sourcebound.runs_refresh_pair() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v_index integer;
BEGIN
  IF TG_OP = 'UPDATE' AND NEW.id = OLD.id AND NEW.conversation_id = OLD.conversation_id AND NEW.seq = OLD.seq THEN
    IF (OLD.status IN ('completed', 'partial', 'clarify_pending')) = (NEW.status IN ('completed', 'partial', 'clarify_pending')) THEN
      RETURN NULL;
    END IF;
    IF NEW.status IN ('completed', 'partial', 'clarify_pending') THEN
      -- The lock comes before the definition is read (0003).
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
  IF TG_OP = 'UPDATE' AND OLD.conversation_id IS DISTINCT FROM NEW.conversation_id THEN
    PERFORM sourcebound.pairs_lock(OLD.conversation_id, NEW.conversation_id);
  END IF;
  PERFORM sourcebound.refresh_pair(OLD.conversation_id, OLD.id, false);
  IF TG_OP = 'UPDATE' AND (NEW.id IS DISTINCT FROM OLD.id OR NEW.conversation_id IS DISTINCT FROM OLD.conversation_id) THEN
    PERFORM sourcebound.refresh_pair(NEW.conversation_id, NEW.id, false);
  END IF;
  RETURN NULL;
END
$$;
--> statement-breakpoint
-- The message side, as in 0024, without the read of sourcebound.pairs in the
-- no-op test (0019: "the run is not eligible and has no pair"). A run that is
-- not eligible has no pair once its own trigger has run: every change of a
-- run's eligibility reaches runs_refresh_pair(), which removes the pair in
-- the same statement (general path). The one moment a non-eligible run can
-- still have its pair is inside a statement that changed that run and this
-- message together (a data-modifying CTE), before the run's trigger fired;
-- that trigger is still queued and recomputes the pair from the definition,
-- so returning here loses nothing. Under the conversation's lock, as before.
CREATE OR REPLACE FUNCTION sourcebound.messages_refresh_pair() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v_conversation uuid;
  v_eligible boolean;
BEGIN
  IF TG_OP = 'INSERT' AND NEW.run_id IS NULL THEN
    RETURN NULL;
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
$$;
--> statement-breakpoint
-- Run updates: no WHEN clause. 0024's (OLD.* IS DISTINCT FROM NEW.*) only
-- filtered updates that change nothing, which the function's first test
-- (eligibility the same before and after) returns from as well; every real
-- status change paid the clause and then called the function anyway.
DROP TRIGGER runs_refresh_pair_upd ON sourcebound.runs;
--> statement-breakpoint
CREATE TRIGGER runs_refresh_pair_upd AFTER UPDATE ON sourcebound.runs
  FOR EACH ROW EXECUTE FUNCTION sourcebound.runs_refresh_pair();
--> statement-breakpoint
-- The message clauses, the same tests in fewer nodes: one array overlap
-- instead of two (insert) or four (update) text comparisons. They are the
-- same tests because a role is 'user' or 'assistant' (messages_role_known)
-- and a status 'streaming', 'completed' or 'failed' (messages_status_known):
-- no role can equal 'completed' and no status 'user', so "one of them is in
-- {user, completed}" is "role = 'user' OR status = 'completed'".
-- Insert: an assistant message that is not completed cannot complete a pair
-- (0024).
DROP TRIGGER messages_refresh_pair_ins ON sourcebound.messages;
--> statement-breakpoint
CREATE TRIGGER messages_refresh_pair_ins AFTER INSERT ON sourcebound.messages
  FOR EACH ROW WHEN (ARRAY[NEW.role, NEW.status] && '{user,completed}'::text[])
  EXECUTE FUNCTION sourcebound.messages_refresh_pair();
--> statement-breakpoint
-- Update: an assistant message that is not completed before and not after is
-- in no pair before and none after (0024): streaming updates skip PL/pgSQL.
DROP TRIGGER messages_refresh_pair_upd ON sourcebound.messages;
--> statement-breakpoint
CREATE TRIGGER messages_refresh_pair_upd AFTER UPDATE ON sourcebound.messages
  FOR EACH ROW WHEN (ARRAY[OLD.role, OLD.status, NEW.role, NEW.status] && '{user,completed}'::text[])
  EXECUTE FUNCTION sourcebound.messages_refresh_pair();
