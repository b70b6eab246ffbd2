-- Invariant: unchanged from 0003 (sourcebound.pairs holds exactly what
-- sourcebound.pair_of_run() defines, with dense pair indexes, under the
-- per-conversation lock). This migration only makes the common writes cheaper,
-- because the write path is the application's (bench P1):
--   1. An assistant message inserted while streaming cannot complete a pair
--      (its status is not completed, and a run has one assistant message), so
--      it no longer enters the trigger at all.
--   2. After the lock, a run whose status is not eligible and that has no
--      pair returns at once, without evaluating the three-table definition.
--      The lock is still taken first: two transactions completing the two
--      halves of a pair must serialize (see 0003).
--   3. The conversation-exists check (which protects a deleted conversation's
--      cascade from quadratic index shifting) runs only on the structural path.
CREATE OR REPLACE FUNCTION sourcebound.refresh_pair(p_conversation_id uuid, p_run_id uuid, p_content_changed boolean)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  v_cur sourcebound.pairs%ROWTYPE;
  v_has_cur boolean;
  v_new record;
  v_has_new boolean;
  v_status text;
  v_old_count integer;
  v_new_count integer;
  v_index integer;
  v_changed_at integer;
BEGIN
  PERFORM pg_advisory_xact_lock(74201, hashtext(p_conversation_id::text));

  SELECT * INTO v_cur FROM sourcebound.pairs WHERE run_id = p_run_id;
  v_has_cur := FOUND;
  IF NOT v_has_cur THEN
    SELECT status INTO v_status FROM sourcebound.runs WHERE id = p_run_id;
    IF NOT FOUND OR v_status NOT IN ('completed', 'partial', 'clarify_pending') THEN
      RETURN;
    END IF;
  END IF;

  SELECT * INTO v_new FROM sourcebound.pair_of_run(p_run_id);
  v_has_new := FOUND;

  IF NOT v_has_cur AND NOT v_has_new THEN
    RETURN;
  END IF;

  IF v_has_cur AND v_has_new
     AND v_cur.user_message_id = v_new.user_message_id
     AND v_cur.assistant_message_id = v_new.assistant_message_id
     AND v_cur.conversation_id = v_new.conversation_id THEN
    -- Same pair; only its text may have changed.
    IF p_content_changed THEN
      SELECT coalesce(max(pair_index) + 1, 0) INTO v_old_count
      FROM sourcebound.pairs WHERE conversation_id = p_conversation_id;
      PERFORM sourcebound.pairs_changed(p_conversation_id, v_old_count, v_old_count, v_cur.pair_index);
    END IF;
    RETURN;
  END IF;

  -- A conversation being deleted takes its pairs with it by cascade.
  IF NOT EXISTS (SELECT 1 FROM sourcebound.conversations WHERE id = p_conversation_id) THEN
    RETURN;
  END IF;

  SELECT coalesce(max(pair_index) + 1, 0) INTO v_old_count
  FROM sourcebound.pairs WHERE conversation_id = p_conversation_id;

  IF v_has_cur THEN
    DELETE FROM sourcebound.pairs WHERE run_id = p_run_id;
    UPDATE sourcebound.pairs SET pair_index = pair_index - 1
    WHERE conversation_id = v_cur.conversation_id AND pair_index > v_cur.pair_index;
    v_changed_at := v_cur.pair_index;
  END IF;

  IF v_has_new THEN
    -- Usually the newest run: it goes at the end and nothing shifts.
    SELECT pair_index INTO v_index FROM sourcebound.pairs
    WHERE conversation_id = v_new.conversation_id AND run_seq > v_new.run_seq
    ORDER BY run_seq LIMIT 1;
    IF v_index IS NULL THEN
      v_index := v_old_count - (CASE WHEN v_has_cur THEN 1 ELSE 0 END);
    ELSE
      UPDATE sourcebound.pairs SET pair_index = pair_index + 1
      WHERE conversation_id = v_new.conversation_id AND pair_index >= v_index;
    END IF;
    INSERT INTO sourcebound.pairs (run_id, conversation_id, run_seq, pair_index, user_message_id, assistant_message_id)
    VALUES (v_new.run_id, v_new.conversation_id, v_new.run_seq, v_index, v_new.user_message_id, v_new.assistant_message_id);
    v_changed_at := least(coalesce(v_changed_at, v_index), v_index);
  END IF;

  v_new_count := v_old_count + (CASE WHEN v_has_new THEN 1 ELSE 0 END) - (CASE WHEN v_has_cur THEN 1 ELSE 0 END);
  PERFORM sourcebound.pairs_changed(p_conversation_id, v_old_count, v_new_count, v_changed_at);
END
$$;
--> statement-breakpoint
DROP TRIGGER messages_refresh_pair_ins ON sourcebound.messages;
--> statement-breakpoint
CREATE TRIGGER messages_refresh_pair_ins AFTER INSERT ON sourcebound.messages
  FOR EACH ROW WHEN (NEW.run_id IS NOT NULL AND NOT (NEW.role = 'assistant' AND NEW.status = 'streaming'))
  EXECUTE FUNCTION sourcebound.messages_refresh_pair();
