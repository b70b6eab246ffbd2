-- Invariant: after `sourcebound repair <id>` (sourcebound.pairs_rebuild) the
-- conversation's pair index AND that of every conversation the drift spans
-- match the definition. 0016 rebuilt the conversations whose index held one
-- of this conversation's runs, but not the reverse: after a move applied
-- around the triggers, this conversation's index still held a run that now
-- belongs to another conversation, and that other conversation stayed
-- without the pair. Both directions are now rebuilt, all locks taken in
-- lock-key order before anything is read for the rebuild.
CREATE OR REPLACE FUNCTION sourcebound.pairs_rebuild(p_conversation_id uuid) RETURNS integer LANGUAGE plpgsql AS $$
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
  -- Conversations whose index holds a run of this one, and conversations
  -- owning a run this one's index holds.
  SELECT array_agg(DISTINCT o) INTO v_others FROM (
    SELECT p.conversation_id AS o
    FROM sourcebound.pairs p JOIN sourcebound.runs r ON r.id = p.run_id
    WHERE r.conversation_id = p_conversation_id AND p.conversation_id <> p_conversation_id
    UNION
    SELECT r.conversation_id
    FROM sourcebound.pairs p JOIN sourcebound.runs r ON r.id = p.run_id
    WHERE p.conversation_id = p_conversation_id AND r.conversation_id <> p_conversation_id
  ) s;
  FOR v_key IN
    SELECT DISTINCT hashtext(c::text) FROM unnest(ARRAY[p_conversation_id] || coalesce(v_others, '{}')) c ORDER BY 1
  LOOP
    PERFORM pg_advisory_xact_lock(74201, v_key);
  END LOOP;

  SELECT count(*), min(least(expected_index, actual_index)) INTO v_wrong, v_changed
  FROM sourcebound.pairs_drift(p_conversation_id);
  IF v_wrong > 0 THEN
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
  END IF;
  -- The other side of the drift, rebuilt the same way (their locks are held).
  FOREACH v_other IN ARRAY coalesce(v_others, '{}') LOOP
    v_wrong := v_wrong + sourcebound.pairs_rebuild(v_other);
  END LOOP;
  RETURN v_wrong;
END
$$;
