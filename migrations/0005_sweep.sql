-- Invariant: a lost compaction job is repaired, not permanent. A plannable
-- range needs work when no record for its current source ids is completed,
-- failed for good, or running under a live lease. The crontab task
-- sweep_compaction calls this; it re-enqueues (deduplicated by job key) every
-- conversation with such a range. Content edits inside a summarized range are
-- enqueued by the pair trigger at edit time (0002/0003); the sweep compares ids,
-- not texts, so it stays cheap.
CREATE FUNCTION sourcebound.range_needs_work(p_conversation_id uuid, p_from_pair integer)
RETURNS boolean LANGUAGE sql STABLE AS $$
  SELECT NOT EXISTS (
    SELECT 1 FROM sourcebound.conversation_summaries s
    WHERE s.conversation_id = p_conversation_id
      AND s.from_pair = p_from_pair
      AND (s.status IN ('completed', 'failed') OR (s.status = 'running' AND s.lease_expires_at > now()))
      AND s.source_message_ids = ARRAY(
        SELECT id FROM sourcebound.pairs p
        CROSS JOIN LATERAL unnest(ARRAY[p.user_message_id, p.assistant_message_id]) WITH ORDINALITY AS ids(id, n)
        WHERE p.conversation_id = p_conversation_id AND p.pair_index BETWEEN p_from_pair AND p_from_pair + 9
        ORDER BY p.pair_index, ids.n)
  )
$$;
--> statement-breakpoint
CREATE FUNCTION sourcebound.sweep_compaction(p_limit integer DEFAULT 1000)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  v_conversation uuid;
  v_count integer := 0;
BEGIN
  FOR v_conversation IN
    SELECT c.id
    FROM sourcebound.conversations c
    CROSS JOIN LATERAL (
      SELECT coalesce(max(p.pair_index) + 1, 0) AS n FROM sourcebound.pairs p WHERE p.conversation_id = c.id
    ) pc
    WHERE pc.n >= 30
      AND EXISTS (
        SELECT 1 FROM generate_series(0, sourcebound.plannable_range_count(pc.n) - 1) k
        WHERE sourcebound.range_needs_work(c.id, 10 * k))
    LIMIT p_limit
  LOOP
    PERFORM sourcebound.enqueue_compaction(v_conversation);
    v_count := v_count + 1;
  END LOOP;
  RETURN v_count;
END
$$;
