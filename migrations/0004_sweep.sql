-- The sweep: repairs lost jobs and settles records no claim will come for.

-- The definition the marks maintain: a plannable range needs work unless a
-- completed or failed record binds its current source. It reads and hashes the
-- range, so it is for audits and tests, not for every sweep (which reads the
-- marks).
CREATE FUNCTION sourcebound.range_needs_work(p_conversation_id uuid, p_from_pair integer)
RETURNS boolean LANGUAGE sql STABLE AS $$
  SELECT NOT EXISTS (
    SELECT 1
    FROM sourcebound.range_source(p_conversation_id, p_from_pair) src
    JOIN sourcebound.conversation_summaries s
      ON s.conversation_id = p_conversation_id AND s.from_pair = p_from_pair
     AND s.status IN ('completed', 'failed') AND s.hash_version = 1
     AND s.source_hash = src.source_hash AND s.source_message_ids = src.source_message_ids
    WHERE src.pairs = 10
  )
$$;
--> statement-breakpoint
-- Every plannable range of a conversation that needs work by range_needs_work()
-- (the audit: tests check the marks always cover it).
CREATE FUNCTION sourcebound.ranges_needing_work(p_conversation_id uuid)
RETURNS SETOF integer LANGUAGE sql STABLE AS $$
  SELECT 10 * k
  FROM generate_series(0, sourcebound.plannable_range_count(
         (SELECT coalesce(max(pair_index) + 1, 0)::int FROM sourcebound.pairs WHERE conversation_id = p_conversation_id)) - 1) k
  WHERE sourcebound.range_needs_work(p_conversation_id, 10 * k)
$$;
--> statement-breakpoint
-- Why no claim will come for a record of this range and source, or NULL when
-- one will: its source changed (a claim binds a new record), its range is no
-- longer plannable (pairs removed: no mark, a claim answers 'gone'), or its
-- range has no mark (a record of another model or prompt version binds the
-- source, so no job comes). The first that holds is the reason. One function
-- for both of the sweep's settlements, so they cannot disagree.
CREATE FUNCTION sourcebound.no_claim_will_come(p_conversation_id uuid, p_from_pair integer, p_source_hash text, p_source_message_ids uuid[])
 RETURNS text
 LANGUAGE sql
 STABLE
AS $function$
  SELECT CASE
    WHEN NOT EXISTS (
      SELECT 1 FROM sourcebound.range_source(p_conversation_id, p_from_pair) src
      WHERE src.pairs = 10 AND src.source_hash = p_source_hash AND src.source_message_ids = p_source_message_ids)
      THEN 'the source changed since'
    WHEN p_from_pair + 9 >= 10 * sourcebound.plannable_range_count(
      (SELECT coalesce(max(p.pair_index) + 1, 0) FROM sourcebound.pairs p WHERE p.conversation_id = p_conversation_id))
      THEN 'the range is no longer plannable'
    WHEN NOT EXISTS (SELECT 1 FROM sourcebound.compaction_marks m WHERE m.conversation_id = p_conversation_id AND m.from_pair = p_from_pair)
      THEN 'its range is no longer marked (a record of another model or prompt version binds its source)'
  END
$function$;
--> statement-breakpoint
-- The sweep's enqueue, which never waits for a conversation's locks. A job
-- waiting under the key that never failed (not locked, no attempt: new, or
-- scheduled for a deferral or retry) will run when it should. Anything else is
-- enqueued again: a failed job (backoff grows to hours) is reset to run now; a
-- locked one proves nothing (a SIGKILLed worker's job stays locked for hours),
-- so add_job starts a new job beside it, which finds the range busy while the
-- holder lives. A conversation busy with a writer is left to that writer's own
-- enqueue and the next sweep. graphile_worker._private_jobs is read by its
-- unique `key` only.
CREATE FUNCTION sourcebound.compaction_enqueue_if_lost(p_conversation_id uuid)
RETURNS integer LANGUAGE plpgsql AS $$
BEGIN
  IF EXISTS (
    SELECT 1 FROM graphile_worker._private_jobs j
    WHERE j.key = 'sourcebound:compact:' || p_conversation_id::text
      AND j.locked_at IS NULL AND j.attempts = 0) THEN
    RETURN 0;
  END IF;
  IF NOT pg_try_advisory_xact_lock(74201, hashtext(p_conversation_id::text))
     OR NOT pg_try_advisory_xact_lock(74203, hashtext('sourcebound:compact:' || p_conversation_id::text)) THEN
    RETURN 0;
  END IF;
  PERFORM sourcebound.enqueue_compaction(p_conversation_id);
  RETURN 1;
END
$$;
--> statement-breakpoint
-- Invariant: a lost compaction job is repaired, not permanent, and no record
-- stays open ('running' or 'pending') for good. The crontab task calls this:
-- - a claim whose worker died (lease over) and for which no claim will come
--   (no_claim_will_come) is settled as a takeover would: the attempt unknown
--   and spent, the record stale (failed when that was its second attempt);
-- - a pending record past its not_before for which no claim will come is
--   settled stale, with no attempt spent;
-- - every marked conversation with no fresh job waiting is enqueued
--   (compaction_enqueue_if_lost), in conversation order from where the last
--   run stopped (compaction_sweep_cursor), so more than p_limit of them are
--   all reached over a few runs.
-- A live claim is never touched; rows a claim or commit holds are skipped (SKIP
-- LOCKED). It reads the open records (the open index) and the marks, never the
-- history.
CREATE FUNCTION sourcebound.sweep_compaction(p_limit integer DEFAULT 1000)
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
  -- Dead claims no claim will come for: lease over, and the
  -- range's source is not theirs now, or the range is no longer plannable,
  -- or it has no mark (no_claim_will_come).
  -- Looked for in the claims in flight only; a few at a time; one that a
  -- claim or a commit holds is skipped.
  IF EXISTS (SELECT 1 FROM sourcebound.conversation_summaries s WHERE s.status = 'running' AND s.lease_expires_at <= now()) THEN
    WITH judged AS (
      SELECT s.id, sourcebound.no_claim_will_come(s.conversation_id, s.from_pair, s.source_hash, s.source_message_ids) AS why
      FROM sourcebound.conversation_summaries s
      WHERE s.status = 'running' AND s.lease_expires_at <= now()
    ), dead AS (
      SELECT s.id, j.why
      FROM judged j JOIN sourcebound.conversation_summaries s ON s.id = j.id
      WHERE j.why IS NOT NULL AND s.status = 'running' AND s.lease_expires_at <= now()
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

  -- Pending records no claim will come for: the same three cases, past their not_before.
  IF EXISTS (SELECT 1 FROM sourcebound.conversation_summaries s WHERE s.status = 'pending' AND (s.not_before IS NULL OR s.not_before <= now())) THEN
    WITH judged AS (
      SELECT s.id, sourcebound.no_claim_will_come(s.conversation_id, s.from_pair, s.source_hash, s.source_message_ids) AS why
      FROM sourcebound.conversation_summaries s
      WHERE s.status = 'pending' AND (s.not_before IS NULL OR s.not_before <= now())
    ), orphaned AS (
      SELECT s.id, j.why
      FROM judged j JOIN sourcebound.conversation_summaries s ON s.id = j.id
      WHERE j.why IS NOT NULL AND s.status = 'pending' AND (s.not_before IS NULL OR s.not_before <= now())
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
