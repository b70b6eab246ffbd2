-- Invariant: sourcebound.pairs holds exactly the pairs that
-- sourcebound.pair_of_run() defines, with pair_index = position among the
-- conversation's eligible pairs in run order (checked by pairs_drift()).
--
-- Concurrency: every change that can alter a conversation's pairs takes a
-- transaction-scoped advisory lock on that conversation BEFORE it evaluates the
-- definition. Without it, two transactions that each complete half of a pair
-- (one the run status, one the assistant message) would each see the other's
-- half uncommitted and both skip it. With it, the second waits for the first to
-- commit and, in READ COMMITTED, its next statement sees the committed half.
-- The lock also serializes pair_index assignment, so two transactions
-- completing pairs 29 and 30 concurrently both count correctly and the crossing
-- to 30 pairs enqueues a job. Lock namespace 74201 (src/db/locks.ts).
CREATE FUNCTION sourcebound.refresh_pair(p_conversation_id uuid, p_run_id uuid, p_content_changed boolean)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  v_cur sourcebound.pairs%ROWTYPE;
  v_has_cur boolean;
  v_new record;
  v_has_new boolean;
  v_old_count integer;
  v_new_count integer;
  v_index integer;
  v_changed_at integer;
BEGIN
  PERFORM pg_advisory_xact_lock(74201, hashtext(p_conversation_id::text));
  -- A conversation being deleted takes its pairs with it by cascade.
  IF NOT EXISTS (SELECT 1 FROM sourcebound.conversations WHERE id = p_conversation_id) THEN
    RETURN;
  END IF;

  SELECT * INTO v_cur FROM sourcebound.pairs WHERE run_id = p_run_id;
  v_has_cur := FOUND;
  SELECT * INTO v_new FROM sourcebound.pair_of_run(p_run_id);
  v_has_new := FOUND;

  IF NOT v_has_cur AND NOT v_has_new THEN
    RETURN;
  END IF;

  SELECT coalesce(max(pair_index) + 1, 0) INTO v_old_count
  FROM sourcebound.pairs WHERE conversation_id = p_conversation_id;

  IF v_has_cur AND v_has_new
     AND v_cur.user_message_id = v_new.user_message_id
     AND v_cur.assistant_message_id = v_new.assistant_message_id
     AND v_cur.conversation_id = v_new.conversation_id THEN
    -- Same pair; only its text may have changed.
    IF p_content_changed THEN
      PERFORM sourcebound.pairs_changed(p_conversation_id, v_old_count, v_old_count, v_cur.pair_index);
    END IF;
    RETURN;
  END IF;

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
      SELECT coalesce(max(pair_index) + 1, 0) INTO v_index
      FROM sourcebound.pairs WHERE conversation_id = v_new.conversation_id;
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
CREATE FUNCTION sourcebound.messages_refresh_pair() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
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
CREATE TRIGGER messages_refresh_pair_ins AFTER INSERT ON sourcebound.messages
  FOR EACH ROW WHEN (NEW.run_id IS NOT NULL) EXECUTE FUNCTION sourcebound.messages_refresh_pair();
--> statement-breakpoint
-- Streaming assistant text (status streaming before and after) cannot change a
-- pair: skipped without entering plpgsql, so token-by-token updates stay cheap.
CREATE TRIGGER messages_refresh_pair_upd AFTER UPDATE ON sourcebound.messages
  FOR EACH ROW WHEN (
    OLD.run_id IS DISTINCT FROM NEW.run_id
    OR OLD.conversation_id IS DISTINCT FROM NEW.conversation_id
    OR OLD.role IS DISTINCT FROM NEW.role
    OR OLD.status IS DISTINCT FROM NEW.status
    OR (NOT (OLD.status = 'streaming' AND NEW.status = 'streaming') AND OLD.content IS DISTINCT FROM NEW.content)
  ) EXECUTE FUNCTION sourcebound.messages_refresh_pair();
--> statement-breakpoint
CREATE TRIGGER messages_refresh_pair_del AFTER DELETE ON sourcebound.messages
  FOR EACH ROW WHEN (OLD.run_id IS NOT NULL) EXECUTE FUNCTION sourcebound.messages_refresh_pair();
--> statement-breakpoint
CREATE FUNCTION sourcebound.runs_refresh_pair() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM sourcebound.refresh_pair(OLD.conversation_id, OLD.id, false);
  IF TG_OP = 'UPDATE' AND NEW.conversation_id IS DISTINCT FROM OLD.conversation_id THEN
    PERFORM sourcebound.refresh_pair(NEW.conversation_id, NEW.id, false);
  END IF;
  RETURN NULL;
END
$$;
--> statement-breakpoint
CREATE TRIGGER runs_refresh_pair_upd AFTER UPDATE ON sourcebound.runs
  FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.conversation_id IS DISTINCT FROM NEW.conversation_id)
  EXECUTE FUNCTION sourcebound.runs_refresh_pair();
--> statement-breakpoint
CREATE TRIGGER runs_refresh_pair_del AFTER DELETE ON sourcebound.runs
  FOR EACH ROW EXECUTE FUNCTION sourcebound.runs_refresh_pair();
