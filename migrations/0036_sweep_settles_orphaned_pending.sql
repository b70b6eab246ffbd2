-- Invariant: a record that no claim will come for does not stay open
-- ('running' or 'pending') for good. 0035 settled the dead claims of that
-- kind; a 'pending' record (an answer invalid or unknown, a call deferred or
-- refused for configuration: it waits for the next claim) had the same fate
-- when, before that claim came, the range's source changed (the claim then
-- binds a new record, of the new source), pairs were removed so that the
-- range is no longer plannable, or a record of another model or prompt
-- version bound the source and cleared the range's mark. It stayed 'pending'
-- for good: `sourcebound inspect` showed a retry that would never come, and
-- the open records (status running or pending, which operators watch)
-- never drained.
-- The sweep now settles such a record 'stale' once its not_before has passed
-- (a record still waiting out a deferral is left until then: its job may
-- yet come), with the reason naming the case (each attempt keeps its own). No attempt is in flight, so
-- none is spent and its spent attempts stay as they were: should a claim of
-- that same identity and source come again, it takes the stale record over
-- as it takes a pending one. A pending record whose range is plannable,
-- marked and unchanged is left to its claim; one a claim holds is skipped
-- (SKIP LOCKED), and one a claim took meanwhile is no longer 'pending' when
-- locked, so it is left alone. Read: the pending records past their
-- not_before (the open-records index), a few.
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

  -- Pending records no claim will come for (0036): the same three cases, past their not_before.
  IF EXISTS (SELECT 1 FROM sourcebound.conversation_summaries s WHERE s.status = 'pending' AND (s.not_before IS NULL OR s.not_before <= now())) THEN
    WITH waiting AS (
      SELECT s.id, s.conversation_id, s.from_pair, s.source_hash, s.source_message_ids
      FROM sourcebound.conversation_summaries s
      WHERE s.status = 'pending' AND (s.not_before IS NULL OR s.not_before <= now())
    ), judged AS (
      SELECT w.id,
             w.from_pair + 9 >= 10 * sourcebound.plannable_range_count(
               (SELECT coalesce(max(p.pair_index) + 1, 0) FROM sourcebound.pairs p WHERE p.conversation_id = w.conversation_id)) AS unplannable,
             NOT EXISTS (
               SELECT 1 FROM sourcebound.range_source(w.conversation_id, w.from_pair) src
               WHERE src.pairs = 10 AND src.source_hash = w.source_hash AND src.source_message_ids = w.source_message_ids) AS changed,
             NOT EXISTS (
               SELECT 1 FROM sourcebound.compaction_marks m WHERE m.conversation_id = w.conversation_id AND m.from_pair = w.from_pair) AS unmarked
      FROM waiting w
    ), orphaned AS (
      SELECT s.id, CASE WHEN j.changed THEN 'the source changed since'
                        WHEN j.unplannable THEN 'the range is no longer plannable'
                        ELSE 'its range is no longer marked (a record of another model or prompt version binds its source)' END AS why
      FROM judged j JOIN sourcebound.conversation_summaries s ON s.id = j.id
      WHERE (j.changed OR j.unplannable OR j.unmarked) AND s.status = 'pending' AND (s.not_before IS NULL OR s.not_before <= now())
      LIMIT p_limit
      FOR UPDATE OF s SKIP LOCKED
    )
    UPDATE sourcebound.conversation_summaries s
    SET updated_at = now(), status = 'stale', not_before = NULL,
        failure_reason = 'pending, and ' || orphaned.why
    FROM orphaned WHERE s.id = orphaned.id;
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
