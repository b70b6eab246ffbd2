-- Invariant: unchanged from 0016 (sourcebound.pairs holds exactly what
-- sourcebound.pair_of_run() defines, under every change; each change reported
-- to pairs_changed() with its lowest changed index). This migration only
-- makes the application's write path cheaper (bench P1):
--   1. A message written into a run that is not eligible (in progress,
--      failed...) and has no pair cannot change any pair: the message trigger
--      now decides that itself with one read under the lock, without calling
--      refresh_pair(). That is the user message and the assistant completion
--      of every live run (the run completes last). The lock is still taken
--      first: two transactions completing the two halves of a pair must
--      serialize (0003).
--   2. refresh_pair() reads where a new pair goes in the same query that reads
--      the run and both pairs: a completing run costs one read, one insert.
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
  v_new_count integer;
  v_new_index integer;
BEGIN
  PERFORM pg_advisory_xact_lock(74201, hashtext(p_conversation_id::text));

  LOOP
    -- One read: the run, its pair as indexed, and its pair as defined.
    SELECT r.conversation_id, r.status,
           p.conversation_id, p.pair_index, p.run_seq, p.user_message_id, p.assistant_message_id,
           d.conversation_id, d.run_seq, d.user_message_id, d.assistant_message_id,
           -- Where a new pair would go (before the first pair with a later run, else at the end).
           (SELECT coalesce(max(x.pair_index) + 1, 0) FROM sourcebound.pairs x WHERE x.conversation_id = d.conversation_id),
           (SELECT x.pair_index FROM sourcebound.pairs x WHERE x.conversation_id = d.conversation_id AND x.run_seq > d.run_seq
            ORDER BY x.run_seq LIMIT 1)
    INTO v_run_conversation, v_run_status,
         v_cur_conversation, v_cur_index, v_cur_seq, v_cur_user, v_cur_assistant,
         v_new_conversation, v_new_seq, v_new_user, v_new_assistant,
         v_new_count, v_new_index
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
    IF v_new_conversation IS NOT DISTINCT FROM v_cur_conversation THEN
      -- It moved within the conversation (a new seq): its place is read again after the removal.
      SELECT (SELECT coalesce(max(pair_index) + 1, 0) FROM sourcebound.pairs WHERE conversation_id = v_new_conversation),
             (SELECT pair_index FROM sourcebound.pairs WHERE conversation_id = v_new_conversation AND run_seq > v_new_seq
              ORDER BY run_seq LIMIT 1)
      INTO v_count, v_index;
    ELSE
      -- Usually the newest run: it goes at the end and nothing shifts.
      v_count := v_new_count;
      v_index := v_new_index;
    END IF;
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
DECLARE
  v_conversation uuid;
  v_eligible boolean;
  v_indexed boolean;
BEGIN
  IF TG_OP = 'INSERT'
     OR (TG_OP = 'UPDATE' AND NEW.run_id IS NOT DISTINCT FROM OLD.run_id AND NEW.conversation_id IS NOT DISTINCT FROM OLD.conversation_id) THEN
    PERFORM pg_advisory_xact_lock(74201, hashtext(NEW.conversation_id::text));
    SELECT r.conversation_id, r.status IN ('completed', 'partial', 'clarify_pending'),
           EXISTS (SELECT 1 FROM sourcebound.pairs p WHERE p.run_id = r.id)
    INTO v_conversation, v_eligible, v_indexed
    FROM sourcebound.runs r WHERE r.id = NEW.run_id;
    -- Its run is here, not eligible and not indexed: no pair to make, change or remove.
    IF v_conversation = NEW.conversation_id AND NOT v_eligible AND NOT v_indexed THEN
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
