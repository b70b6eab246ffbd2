-- Invariant (as 0032): a claim whose worker died is settled, by a takeover
-- or by the sweep; none stays 'running' for good. 0032 left two cases open,
-- both with the range's source unchanged, in which no takeover comes:
-- - the range is no longer plannable (pairs were removed, so it lies in the
--   newest 20 again): no mark is kept for it and claim_range answers 'gone';
-- - a record of another summarizer identity (model or prompt version: a
--   worker fleet upgraded or reconfigured) completed or failed for the same
--   source, which cleared the range's mark, so no job comes for it.
-- The record stayed 'running' with its lease long over and its attempt
-- open (`sourcebound inspect` showed a claim in flight that no worker held),
-- for as long as the conversation did not grow back, or for good.
-- The sweep now settles a dead claim whenever no claim will come for it (its
-- source changed, its range is not plannable, or its range has no mark), the
-- way 0032 settles one of a changed source: the attempt unknown and spent,
-- the record stale (failed when that was its second attempt), the reason
-- saying which case it was. Should a claim of that same identity and source
-- come again, it takes the stale record over with the dead attempt counted,
-- as a takeover would have. A dead claim of a marked, plannable range with
-- its source unchanged is still left to the takeover (a job comes); a live
-- claim is never touched; one a claim or commit holds is skipped (SKIP
-- LOCKED). The conditions are read once per expired claim (the claims in
-- flight, a few).
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
  -- Dead claims no claim will come for (0032, 0035): lease over, and the
  -- range's source is not theirs now, or the range is no longer plannable,
  -- or it has no mark.
  -- Looked for in the claims in flight only; a few at a time; one that a
  -- claim or a commit holds is skipped.
  IF EXISTS (SELECT 1 FROM sourcebound.conversation_summaries s WHERE s.status = 'running' AND s.lease_expires_at <= now()) THEN
    WITH expired AS (
      SELECT s.id, s.conversation_id, s.from_pair, s.source_hash, s.source_message_ids, s.attempts_spent
      FROM sourcebound.conversation_summaries s
      WHERE s.status = 'running' AND s.lease_expires_at <= now()
    ), judged AS (
      SELECT e.id, e.attempts_spent,
             -- The range lies in the newest pairs again (pairs removed since): no mark, no claim comes.
             e.from_pair + 9 >= 10 * sourcebound.plannable_range_count(
               (SELECT coalesce(max(p.pair_index) + 1, 0) FROM sourcebound.pairs p WHERE p.conversation_id = e.conversation_id)) AS unplannable,
             NOT EXISTS (
               SELECT 1 FROM sourcebound.range_source(e.conversation_id, e.from_pair) src
               WHERE src.pairs = 10 AND src.source_hash = e.source_hash AND src.source_message_ids = e.source_message_ids) AS changed,
             -- No mark: no job comes for the range (a completed or failed record of another
             -- summarizer identity binds its source, by the marks' invariant).
             NOT EXISTS (
               SELECT 1 FROM sourcebound.compaction_marks m WHERE m.conversation_id = e.conversation_id AND m.from_pair = e.from_pair) AS unmarked
      FROM expired e
    ), dead AS (
      SELECT s.id, CASE WHEN j.changed THEN 'the source changed since'
                        WHEN j.unplannable THEN 'the range is no longer plannable'
                        ELSE 'its range is no longer marked (a record of another model or prompt version binds its source)' END AS why
      FROM judged j JOIN sourcebound.conversation_summaries s ON s.id = j.id
      WHERE (j.changed OR j.unplannable OR j.unmarked) AND s.status = 'running' AND s.lease_expires_at <= now()
      LIMIT p_limit
      FOR UPDATE OF s SKIP LOCKED
    ), settled AS (
      UPDATE sourcebound.conversation_summaries s
      SET updated_at = now(), status = CASE WHEN s.attempts_spent + 1 >= 2 THEN 'failed' ELSE 'stale' END,
          attempts_spent = s.attempts_spent + 1,
          failure_reason = CASE WHEN s.attempts_spent + 1 >= 2 THEN 'two attempts spent (the last: lease expired, and ' || dead.why || ')'
                                ELSE 'lease expired, and ' || dead.why END,
          lease_owner = NULL, lease_expires_at = NULL, not_before = NULL
      FROM dead WHERE s.id = dead.id
      RETURNING s.id, dead.why)
    UPDATE sourcebound.conversation_summary_attempts a
    SET outcome = 'unknown', spent = true, finished_at = now(),
        reason = 'lease_expired: the worker holding the claim stopped before settling, and ' || settled.why
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
