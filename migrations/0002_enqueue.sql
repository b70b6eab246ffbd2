-- Enqueue: compaction marks and the one waiting job per conversation.

-- Planning: range k (pairs 10k..10k+9) is plannable when 10k + 9 < count - 20:
-- the first at 30 pairs, one more every 10, the newest 20 pairs never in a
-- target. src/plan.ts implements the same rule; test/plan.test.ts checks the
-- two agree.
CREATE FUNCTION sourcebound.plannable_range_count(p_pair_count integer)
RETURNS integer LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN p_pair_count < 30 THEN 0 ELSE (p_pair_count - 30) / 10 + 1 END
$$;
--> statement-breakpoint
-- Invariant: a conversation has one waiting compaction job under its key,
-- 'sourcebound:compact:<id>', and every enqueue either finds a fresh one (not
-- locked, no attempt made) or leaves one behind it.
-- Every writer of that key takes this transaction lock (class 74203, the key's
-- hash) before it touches a job row: without it two enqueues of one key
-- deadlocked, each holding the FOR KEY SHARE lock the other's key update
-- waited for (test/integrity/enqueue.test.ts replays it). Callers that also
-- write pairs take the conversation's lock (74201) first, the order the write
-- path takes them in.
CREATE FUNCTION sourcebound.compaction_key_lock(p_conversation_id uuid)
RETURNS void LANGUAGE sql VOLATILE AS $$
  SELECT pg_advisory_xact_lock(74203, hashtext('sourcebound:compact:' || p_conversation_id::text))
$$;
--> statement-breakpoint
-- The conversation's job at a time (a deferral's run_at), by graphile-worker's
-- preserve_run_at rules, as the one writer of its key. Takes only the key's
-- lock: the commit that calls it holds the summary's row, which a
-- conversation's deletion (under 74201) waits for.
CREATE FUNCTION sourcebound.compaction_job_at(p_conversation_id uuid, p_run_at timestamptz)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  PERFORM sourcebound.compaction_key_lock(p_conversation_id);
  PERFORM graphile_worker.add_job('compact_conversation', json_build_object('conversationId', p_conversation_id),
    run_at := p_run_at, job_key := 'sourcebound:compact:' || p_conversation_id::text, job_key_mode := 'preserve_run_at');
END
$$;
--> statement-breakpoint
-- Invariant: a conversation that gains a plannable range, or changes inside
-- one, gets a compact_conversation job in the same transaction; one that does
-- not gets none (every add_job NOTIFYs, which takes a global lock at commit).
-- The job key dedupes per conversation: a waiting job absorbs the enqueue and
-- preserve_run_at keeps a deferral's backoff; a running one gets a successor.
-- Shape: a fresh waiting job is found with FOR KEY SHARE (its row lock keeps a
-- worker from starting it before our changes are visible) and returns; else
-- add_job in unsafe_dedupe mode, a single insert when no job has the key (the
-- usual crossing); only when a job existed are the preserve_run_at rules
-- applied with the ordinary add_job.
-- Raises conversation_missing (src/db/conditions.ts) for an unknown conversation.
CREATE FUNCTION sourcebound.enqueue_compaction(p_conversation_id uuid)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  v_key text := 'sourcebound:compact:' || p_conversation_id::text;
  v_job graphile_worker._private_jobs;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM sourcebound.conversations WHERE id = p_conversation_id) THEN
    RAISE EXCEPTION 'sourcebound: conversation % does not exist', p_conversation_id
      USING ERRCODE = 'no_data_found', CONSTRAINT = 'conversation_missing';
  END IF;
  PERFORM pg_advisory_xact_lock(74201, hashtext(p_conversation_id::text));
  PERFORM sourcebound.compaction_key_lock(p_conversation_id);
  -- A fresh job waiting: what preserve_run_at would leave it as. Its
  -- row lock keeps a worker from starting it before our changes are visible.
  PERFORM 1 FROM graphile_worker._private_jobs j
  WHERE j.key = v_key AND j.locked_at IS NULL AND j.attempts = 0
  FOR KEY SHARE;
  IF FOUND THEN
    RETURN;
  END IF;
  v_job := graphile_worker.add_job(
    'compact_conversation',
    json_build_object('conversationId', p_conversation_id),
    job_key := v_key,
    job_key_mode := 'unsafe_dedupe'
  );
  IF v_job.revision > 0 THEN
    PERFORM graphile_worker.add_job(
      'compact_conversation',
      json_build_object('conversationId', p_conversation_id),
      job_key := v_key,
      job_key_mode := 'preserve_run_at'
    );
  END IF;
END
$$;
--> statement-breakpoint
-- Invariant: every plannable range without a completed or failed record that
-- binds its current source (ids and hash) has a row in compaction_marks,
-- written in the transaction of the change that made it need work; jobs and
-- the sweep read only the marks, so they cost what needs work, not the length
-- of history. Called by the pair index after it changed a conversation's
-- pairs: p_changed_at..p_changed_to are the indexes added, removed or edited
-- (p_changed_at null: none; p_changed_to null: every pair from p_changed_at
-- on may have moved). Marks every range gained or touched (a touched mark's
-- generation moves), drops marks of ranges no longer plannable, and enqueues
-- when it marked any.
CREATE FUNCTION sourcebound.pairs_changed(p_conversation_id uuid, p_old_count integer, p_new_count integer, p_changed_at integer, p_changed_to integer)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  v_old_ranges integer := sourcebound.plannable_range_count(p_old_count);
  v_new_ranges integer := sourcebound.plannable_range_count(p_new_count);
  v_first integer := NULL;
  v_last integer := NULL;
  v_marked integer := 0;
BEGIN
  IF v_new_ranges < v_old_ranges THEN
    DELETE FROM sourcebound.compaction_marks
    WHERE conversation_id = p_conversation_id AND from_pair >= 10 * v_new_ranges;
  END IF;
  IF p_changed_at IS NOT NULL AND p_changed_at < 10 * v_new_ranges THEN
    v_first := p_changed_at / 10;
    v_last := CASE WHEN p_changed_to IS NULL THEN v_new_ranges - 1 ELSE least(p_changed_to / 10, v_new_ranges - 1) END;
  END IF;
  IF v_new_ranges > v_old_ranges OR v_first IS NOT NULL THEN
    INSERT INTO sourcebound.compaction_marks AS m (conversation_id, from_pair)
    SELECT p_conversation_id, 10 * k
    FROM (
      SELECT generate_series(v_old_ranges, v_new_ranges - 1) AS k
      UNION
      SELECT generate_series(v_first, v_last)
    ) ranges
    ON CONFLICT (conversation_id, from_pair) DO UPDATE SET generation = m.generation + 1, marked_at = now();
    GET DIAGNOSTICS v_marked = ROW_COUNT;
  END IF;
  IF v_marked > 0 THEN
    -- Its job key dedupes, preserve_run_at keeps a deferral's backoff; a
    -- fresh job costs one insert (enqueue_compaction).
    PERFORM sourcebound.enqueue_compaction(p_conversation_id);
  END IF;
END
$$;
--> statement-breakpoint
-- For callers that only know where a change starts: every later pair may have moved.
CREATE FUNCTION sourcebound.pairs_changed(p_conversation_id uuid, p_old_count integer, p_new_count integer, p_changed_at integer)
RETURNS void LANGUAGE sql AS $$
  SELECT sourcebound.pairs_changed(p_conversation_id, p_old_count, p_new_count, p_changed_at, NULL::integer)
$$;
