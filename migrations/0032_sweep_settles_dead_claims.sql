-- Invariant (DESIGN.md "Job identity and claim", and the lifecycle of a
-- summary record): a claim whose worker died is taken over after its lease,
-- and the dead attempt still counts; a claim whose source changed before its
-- commit ends stale. A claim whose worker died and whose source then changed
-- was neither: the takeover (claim_range, 0025/0027) only ever looks at the
-- identity of the range's current source, so the dead claim of the old
-- source stayed 'running' for good, its lease long over and its attempt
-- never settled (`sourcebound inspect` showed the dead worker's lease and an
-- attempt with no outcome), and the sweep never came back to it.
-- The sweep now settles such claims the way a takeover would, as stale
-- (their source is gone): the attempt unknown and spent, the record stale,
-- or failed when that was its second attempt. Should the old source come
-- back, its identity is claimed again with the dead attempt counted, as a
-- takeover would have. A dead claim whose source is still the range's is
-- left to the takeover, as before (its range is marked, so a job comes); a
-- live claim is never touched (its worker may still commit, and be told
-- stale), nor one a claim or commit holds at that moment (SKIP LOCKED).
-- Its cost is not on the claim path: the sweep reads the running records
-- (the open index: the claims in flight, not history) and, only when one's
-- lease is over, the source of its range.
CREATE OR REPLACE FUNCTION sourcebound.sweep_compaction(p_limit integer DEFAULT 1000)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_after uuid;
  v_conversation uuid;
  v_last uuid;
  v_count integer := 0;
  v_seen integer := 0;
BEGIN
  -- Dead claims of a source that is gone (0032): lease over, and the range's
  -- source is not theirs now. Looked for in the claims in flight only; a few
  -- at a time; one that a claim or a commit holds is skipped.
  IF EXISTS (SELECT 1 FROM sourcebound.conversation_summaries s WHERE s.status = 'running' AND s.lease_expires_at <= now()) THEN
    WITH dead AS (
      SELECT s.id FROM sourcebound.conversation_summaries s
      WHERE s.status = 'running' AND s.lease_expires_at <= now()
        AND NOT EXISTS (
          SELECT 1 FROM sourcebound.range_source(s.conversation_id, s.from_pair) src
          WHERE src.pairs = 10 AND src.source_hash = s.source_hash AND src.source_message_ids = s.source_message_ids)
      LIMIT p_limit
      FOR UPDATE OF s SKIP LOCKED
    ), settled AS (
      UPDATE sourcebound.conversation_summaries s
      SET updated_at = now(), status = CASE WHEN s.attempts_spent + 1 >= 2 THEN 'failed' ELSE 'stale' END,
          attempts_spent = s.attempts_spent + 1,
          failure_reason = CASE WHEN s.attempts_spent + 1 >= 2 THEN 'two attempts spent (the last: lease expired, and the source changed since)'
                                ELSE 'lease expired, and the source changed since' END,
          lease_owner = NULL, lease_expires_at = NULL, not_before = NULL
      FROM dead WHERE s.id = dead.id
      RETURNING s.id)
    UPDATE sourcebound.conversation_summary_attempts a
    SET outcome = 'unknown', spent = true, finished_at = now(),
        reason = 'lease_expired: the worker holding the claim stopped before settling, and the source changed since'
    FROM settled WHERE a.summary_id = settled.id AND a.outcome IS NULL;
  END IF;

  SELECT after_conversation_id INTO v_after FROM sourcebound.compaction_sweep_cursor WHERE singleton FOR UPDATE;
  FOR v_conversation IN
    SELECT DISTINCT m.conversation_id FROM sourcebound.compaction_marks m
    WHERE m.conversation_id > coalesce(v_after, '00000000-0000-0000-0000-000000000000'::uuid)
    ORDER BY m.conversation_id LIMIT p_limit
  LOOP
    v_seen := v_seen + 1;
    v_last := v_conversation;
    v_count := v_count + sourcebound.compaction_enqueue_if_lost(v_conversation);
  END LOOP;
  -- Wrap around: the conversations up to the cursor.
  IF v_after IS NOT NULL AND v_seen < p_limit THEN
    FOR v_conversation IN
      SELECT DISTINCT m.conversation_id FROM sourcebound.compaction_marks m
      WHERE m.conversation_id <= v_after
      ORDER BY m.conversation_id LIMIT p_limit - v_seen
    LOOP
      v_seen := v_seen + 1;
      v_last := v_conversation;
      v_count := v_count + sourcebound.compaction_enqueue_if_lost(v_conversation);
    END LOOP;
  END IF;
  -- A page that reached the limit continues after its last conversation; a shorter one saw them all.
  INSERT INTO sourcebound.compaction_sweep_cursor (singleton, after_conversation_id)
  VALUES (true, CASE WHEN v_seen >= p_limit THEN v_last END)
  ON CONFLICT (singleton) DO UPDATE SET after_conversation_id = excluded.after_conversation_id;
  RETURN v_count;
END
$function$;
