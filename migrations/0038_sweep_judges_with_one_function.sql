-- One judgment for both of the sweep's settlements (0035's dead claims and
-- 0036's orphaned pending records): why no claim will come for a record.
-- 0035 and 0036 each wrote the same three tests (source changed, range no
-- longer plannable, range unmarked) and the same reasons inline; here they
-- become one function, sourcebound.no_claim_will_come(), and
-- sweep_compaction calls it in both places. What the sweep settles, and
-- with which reason, is unchanged.

-- Why no claim will come for a record of this range and source, or NULL when
-- one will: its source changed (a claim binds a new record), its range is no
-- longer plannable (pairs removed: no mark is kept, a claim answers 'gone'),
-- or its range has no mark (a completed or failed record of another
-- summarizer identity binds the source, by the marks' invariant: no job
-- comes). In that order: the first that holds is the reason.
CREATE OR REPLACE FUNCTION sourcebound.no_claim_will_come(p_conversation_id uuid, p_from_pair integer, p_source_hash text, p_source_message_ids uuid[])
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

  -- Pending records no claim will come for (0036): the same three cases, past their not_before.
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
