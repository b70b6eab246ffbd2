-- Invariant: unchanged (the pair index is contiguous in run order, 0003/0016).
-- What changes is the cost of one statement that takes many pairs of a
-- conversation out of their places: `DELETE FROM sourcebound.runs WHERE
-- conversation_id = $1` (clearing a thread but keeping it), the same on its
-- messages, `UPDATE sourcebound.runs SET status = 'cancelled' ...`, moving a
-- thread's runs into another conversation, `UPDATE sourcebound.runs SET seq
-- = default ...` on many runs. Each row's trigger took its own pair out and
-- shifted every later pair by one, so n pairs made n shifts of up to n rows,
-- each reading past the dead index entries of the shifts before it in the
-- same transaction: cubic. Measured, every run of one conversation:
-- deleted, 100 pairs 0.37 s, 200 2.5 s, 400 23 s, 1,000 422 s; moved to
-- another conversation, 400 pairs 37 s; reordered, 410 pairs 59 s; with the
-- conversation's lock held all along. Deleting the conversation itself was
-- already cheap (0016).
-- Row triggers run after the statement has changed all its rows, so a
-- removal one of whose next eight pairs has left its place too takes every
-- later pair of the conversation that has left its place, and renumbers the
-- rest once: deleted 1,000 pairs 0.19 s, moved 400 0.6 s, reordered 410
-- 0.23 s. The usual removal or move of one pair costs eight probes more
-- (are the next pairs still in their places?), against a shift of every
-- later pair. Still quadratic: a statement that takes out pairs more than
-- eight apart, in pair order (every tenth of a long conversation, say).
CREATE OR REPLACE FUNCTION sourcebound.refresh_pair(p_conversation_id uuid, p_run_id uuid, p_content_changed boolean)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
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
  v_gone integer;
  v_next integer; -- later pairs (of the next eight) no longer in their place
  v_batched boolean := false;
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
    -- One pair changed in place: only its range.
    PERFORM sourcebound.pairs_changed(v_cur_conversation, v_count, v_count, v_cur_index, v_cur_index);
    RETURN;
  END IF;

  IF v_cur_conversation IS NOT NULL THEN
    IF NOT EXISTS (SELECT 1 FROM sourcebound.conversations WHERE id = v_cur_conversation) THEN
      -- A conversation being deleted takes its pairs with it by cascade: no
      -- shifting (quadratic) and nothing to report.
      DELETE FROM sourcebound.pairs WHERE run_id = p_run_id;
    ELSE
      SELECT coalesce(max(pair_index) + 1, 0) INTO v_count FROM sourcebound.pairs WHERE conversation_id = v_cur_conversation;
      -- Row triggers run once the whole statement has changed its rows (0033).
      -- When one of the next eight pairs has left its place too (gone, moved
      -- to another conversation or to a new seq), the statement is taking
      -- several: every later pair of the conversation no longer in its place
      -- leaves now and the rest is renumbered once. Their own triggers find
      -- them unindexed and index them where they now belong, if anywhere.
      -- The usual removal or move of one pair costs eight probes more.
      SELECT count(*) INTO v_next
      FROM (SELECT p.run_id, p.conversation_id, p.run_seq FROM sourcebound.pairs p
            WHERE p.conversation_id = v_cur_conversation AND p.pair_index > v_cur_index
            ORDER BY p.pair_index LIMIT 8) p
      WHERE NOT EXISTS (SELECT 1 FROM sourcebound.pair_of_run(p.run_id) d WHERE d.conversation_id = p.conversation_id AND d.run_seq = p.run_seq);
      IF v_next = 0 THEN
        DELETE FROM sourcebound.pairs WHERE run_id = p_run_id;
        UPDATE sourcebound.pairs SET pair_index = pair_index - 1
        WHERE conversation_id = v_cur_conversation AND pair_index > v_cur_index;
        v_gone := 1;
      ELSE
        WITH gone AS (
          DELETE FROM sourcebound.pairs p
          WHERE p.conversation_id = v_cur_conversation AND p.pair_index >= v_cur_index
            AND (p.run_id = p_run_id OR NOT EXISTS (
              SELECT 1 FROM sourcebound.pair_of_run(p.run_id) d WHERE d.conversation_id = p.conversation_id AND d.run_seq = p.run_seq))
          RETURNING 1)
        SELECT count(*) INTO v_gone FROM gone;
        UPDATE sourcebound.pairs p SET pair_index = n.pair_index
        FROM (SELECT x.run_id, v_cur_index - 1 + row_number() OVER (ORDER BY x.pair_index) AS pair_index
              FROM sourcebound.pairs x WHERE x.conversation_id = v_cur_conversation AND x.pair_index > v_cur_index) n
        WHERE p.run_id = n.run_id;
        v_batched := true;
      END IF;
      IF v_batched OR v_new_conversation IS DISTINCT FROM v_cur_conversation THEN
        PERFORM sourcebound.pairs_changed(v_cur_conversation, v_count, v_count - v_gone, v_cur_index);
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
    IF v_new_conversation IS NOT DISTINCT FROM v_cur_conversation AND NOT v_batched THEN
      -- Moved within the conversation (a new seq): the count is unchanged.
      -- Only the pairs between its old and its new place shifted.
      PERFORM sourcebound.pairs_changed(v_new_conversation, v_count + 1, v_count + 1, least(v_cur_index, v_index), greatest(v_cur_index, v_index));
    ELSE
      -- Into another conversation, or back after a removal of several (reported above).
      PERFORM sourcebound.pairs_changed(v_new_conversation, v_count, v_count + 1, v_index);
    END IF;
  END IF;
END
$function$;
