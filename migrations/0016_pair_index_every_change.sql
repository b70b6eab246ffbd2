-- Invariant: unchanged from 0003 (sourcebound.pairs holds exactly the pairs
-- sourcebound.pair_of_run() defines, each conversation's pair indexes dense
-- and in run order; pairs_drift() is empty), now under EVERY change the
-- tables allow, and every change of a conversation's pairs is reported to
-- sourcebound.pairs_changed() (the "change in a planned range" hook, 0002)
-- with the lowest pair index that changed:
--   - a run that moves to another conversation (its messages move with it in
--     the same statement: the foreign key messages_run_same_conversation_fk
--     demands it). 0012 placed the moved pair at an index computed from the
--     SOURCE's count and locked only the source: a 5-pair target got indexes
--     [0,1,2,3,4,49]. Now both conversations are locked in one global order
--     (by lock key, pairs_lock), the pair leaves the source (which closes
--     up) and enters the target at its run-order place (which opens up).
--   - a run whose seq changes (`SET seq = DEFAULT` moves it to the end; seq
--     is GENERATED ALWAYS, so no other value can be written): 0003's trigger
--     did not watch seq, so projection and claims kept the old order. The
--     pair now moves to its new place.
--   - a run whose id changes, messages whose id, run, role, status or content
--     change (0015), deletes, and status flips of either.
-- A change that cannot alter any pair costs no PL/pgSQL: the WHEN clauses
-- (evaluated in C) skip run status changes between two eligible or two
-- non-eligible states, and message inserts that cannot complete a pair
-- (a streaming or failed assistant message, whitespace-only text).
--
-- Lock order: every path takes the pair lock (namespace 74201) of the
-- conversation its row names first, as before; a change that spans two
-- conversations (a move) takes both in pairs_lock's order before anything
-- else, so two transactions moving runs between the same two conversations
-- in opposite directions queue instead of deadlocking.

-- The pair locks of one or two conversations, in ascending lock-key order.
CREATE FUNCTION sourcebound.pairs_lock(p_a uuid, p_b uuid) RETURNS void LANGUAGE plpgsql AS $$
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
$$;
--> statement-breakpoint
-- Brings one run's pair in line with the definition: the run's pair as it is
-- indexed now (v_cur, in whichever conversation) against what
-- pair_of_run() says it is (v_new). p_conversation_id is the conversation
-- the caller's row names; its lock is taken first (see 0003 for why the lock
-- comes before reading the definition).
CREATE OR REPLACE FUNCTION sourcebound.refresh_pair(p_conversation_id uuid, p_run_id uuid, p_content_changed boolean)
RETURNS void LANGUAGE plpgsql AS $$
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
BEGIN
  PERFORM pg_advisory_xact_lock(74201, hashtext(p_conversation_id::text));

  LOOP
    -- One read: the run, its pair as indexed, and its pair as defined.
    SELECT r.conversation_id, r.status,
           p.conversation_id, p.pair_index, p.run_seq, p.user_message_id, p.assistant_message_id,
           d.conversation_id, d.run_seq, d.user_message_id, d.assistant_message_id
    INTO v_run_conversation, v_run_status,
         v_cur_conversation, v_cur_index, v_cur_seq, v_cur_user, v_cur_assistant,
         v_new_conversation, v_new_seq, v_new_user, v_new_assistant
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
      -- A message id changed (0015): same place, new identity.
      UPDATE sourcebound.pairs SET user_message_id = v_new_user, assistant_message_id = v_new_assistant
      WHERE run_id = p_run_id;
    END IF;
    SELECT coalesce(max(pair_index) + 1, 0) INTO v_count FROM sourcebound.pairs WHERE conversation_id = v_cur_conversation;
    PERFORM sourcebound.pairs_changed(v_cur_conversation, v_count, v_count, v_cur_index);
    RETURN;
  END IF;

  IF v_cur_conversation IS NOT NULL THEN
    IF NOT EXISTS (SELECT 1 FROM sourcebound.conversations WHERE id = v_cur_conversation) THEN
      -- A conversation being deleted takes its pairs with it by cascade: no
      -- shifting (quadratic) and nothing to report.
      DELETE FROM sourcebound.pairs WHERE run_id = p_run_id;
    ELSE
      SELECT coalesce(max(pair_index) + 1, 0) INTO v_count FROM sourcebound.pairs WHERE conversation_id = v_cur_conversation;
      DELETE FROM sourcebound.pairs WHERE run_id = p_run_id;
      UPDATE sourcebound.pairs SET pair_index = pair_index - 1
      WHERE conversation_id = v_cur_conversation AND pair_index > v_cur_index;
      IF v_new_conversation IS DISTINCT FROM v_cur_conversation THEN
        PERFORM sourcebound.pairs_changed(v_cur_conversation, v_count, v_count - 1, v_cur_index);
      END IF;
    END IF;
  END IF;

  IF v_new_conversation IS NOT NULL THEN
    -- Its place in run order: before the first pair with a later run, else at
    -- the end (usually the newest run: nothing shifts). Both in one read.
    SELECT (SELECT coalesce(max(pair_index) + 1, 0) FROM sourcebound.pairs WHERE conversation_id = v_new_conversation),
           (SELECT pair_index FROM sourcebound.pairs WHERE conversation_id = v_new_conversation AND run_seq > v_new_seq
            ORDER BY run_seq LIMIT 1)
    INTO v_count, v_index;
    IF v_index IS NULL THEN
      v_index := v_count;
    ELSE
      UPDATE sourcebound.pairs SET pair_index = pair_index + 1
      WHERE conversation_id = v_new_conversation AND pair_index >= v_index;
    END IF;
    INSERT INTO sourcebound.pairs (run_id, conversation_id, run_seq, pair_index, user_message_id, assistant_message_id)
    VALUES (p_run_id, v_new_conversation, v_new_seq, v_index, v_new_user, v_new_assistant);
    IF v_new_conversation IS NOT DISTINCT FROM v_cur_conversation THEN
      -- Moved within the conversation (a new seq): the count is unchanged.
      PERFORM sourcebound.pairs_changed(v_new_conversation, v_count + 1, v_count + 1, least(v_cur_index, v_index));
    ELSE
      PERFORM sourcebound.pairs_changed(v_new_conversation, v_count, v_count + 1, v_index);
    END IF;
  END IF;
END
$$;
--> statement-breakpoint
CREATE OR REPLACE FUNCTION sourcebound.messages_refresh_pair() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
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
CREATE OR REPLACE FUNCTION sourcebound.runs_refresh_pair() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
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
DROP TRIGGER runs_refresh_pair_upd ON sourcebound.runs;
--> statement-breakpoint
-- A status change between two eligible (or two non-eligible) states cannot
-- change a pair: skipped without entering PL/pgSQL.
CREATE TRIGGER runs_refresh_pair_upd AFTER UPDATE ON sourcebound.runs
  FOR EACH ROW WHEN (
    OLD.id IS DISTINCT FROM NEW.id
    OR OLD.conversation_id IS DISTINCT FROM NEW.conversation_id
    OR OLD.seq IS DISTINCT FROM NEW.seq
    OR (OLD.status IN ('completed', 'partial', 'clarify_pending')) IS DISTINCT FROM (NEW.status IN ('completed', 'partial', 'clarify_pending'))
  ) EXECUTE FUNCTION sourcebound.runs_refresh_pair();
--> statement-breakpoint
DROP TRIGGER messages_refresh_pair_ins ON sourcebound.messages;
--> statement-breakpoint
-- A message inserted without a run, an assistant message that is not
-- completed, or whitespace-only text (0013's class) cannot complete a pair.
CREATE TRIGGER messages_refresh_pair_ins AFTER INSERT ON sourcebound.messages
  FOR EACH ROW WHEN (
    NEW.run_id IS NOT NULL
    AND (NEW.role = 'user' OR NEW.status = 'completed')
    AND NEW.content ~ '[^\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]'
  ) EXECUTE FUNCTION sourcebound.messages_refresh_pair();
--> statement-breakpoint
-- The view checks what the index claims: both messages are in the pair's run
-- and conversation, with their roles. An index row that drifted (written
-- around the triggers) is then a gap the projection reports, never another
-- conversation's (or scope's) text.
CREATE OR REPLACE VIEW sourcebound.eligible_pairs AS
  SELECT p.conversation_id,
         p.pair_index,
         p.run_id,
         p.run_seq,
         p.user_message_id,
         u.content AS user_text,
         p.assistant_message_id,
         a.content AS assistant_text
  FROM sourcebound.pairs p
  JOIN sourcebound.messages u
    ON u.id = p.user_message_id AND u.run_id = p.run_id AND u.conversation_id = p.conversation_id AND u.role = 'user'
  JOIN sourcebound.messages a
    ON a.id = p.assistant_message_id AND a.run_id = p.run_id AND a.conversation_id = p.conversation_id AND a.role = 'assistant';
--> statement-breakpoint
-- Repair (`sourcebound repair <id>`): rebuilds a conversation's pair index
-- from the definition, under its lock and the locks of any other
-- conversation whose index holds one of its runs (those are rebuilt too).
-- Reports the rebuild to pairs_changed() at the lowest index that changed,
-- so summaries that no longer bind are redone. Returns the number of rows
-- pairs_drift() reported before (0: nothing was written). Reads the whole
-- conversation: for operators, not for hot paths.
CREATE FUNCTION sourcebound.pairs_rebuild(p_conversation_id uuid) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  v_others uuid[];
  v_other uuid;
  v_key integer;
  v_wrong integer;
  v_changed integer;
  v_old integer;
  v_new integer;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM sourcebound.conversations WHERE id = p_conversation_id) THEN
    RAISE EXCEPTION 'sourcebound: conversation % does not exist', p_conversation_id USING ERRCODE = 'no_data_found';
  END IF;
  SELECT array_agg(DISTINCT p.conversation_id) INTO v_others
  FROM sourcebound.pairs p JOIN sourcebound.runs r ON r.id = p.run_id
  WHERE r.conversation_id = p_conversation_id AND p.conversation_id <> p_conversation_id;
  FOR v_key IN
    SELECT DISTINCT hashtext(c::text) FROM unnest(ARRAY[p_conversation_id] || coalesce(v_others, '{}')) c ORDER BY 1
  LOOP
    PERFORM pg_advisory_xact_lock(74201, v_key);
  END LOOP;

  SELECT count(*), min(least(expected_index, actual_index)) INTO v_wrong, v_changed
  FROM sourcebound.pairs_drift(p_conversation_id);
  IF v_wrong = 0 THEN
    RETURN 0;
  END IF;
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
  -- Conversations that indexed one of its runs lost that row: close them up.
  FOREACH v_other IN ARRAY coalesce(v_others, '{}') LOOP
    PERFORM sourcebound.pairs_rebuild(v_other);
  END LOOP;
  RETURN v_wrong;
END
$$;
