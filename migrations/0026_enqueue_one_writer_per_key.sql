-- Invariant (0002, kept): a conversation has one waiting compaction job under
-- its key, 'sourcebound:compact:<id>', and every enqueue either finds a fresh
-- one (not locked, no attempt made) or leaves one behind it.
--
-- What changes: the writers of that key take a transaction advisory lock of
-- its own (class 74203, the key's hash) before they touch a job row.
-- Found by fault scenario 4 (four connections enqueueing the same
-- conversations while eight workers run them): PostgreSQL reported
-- "deadlock detected" between two enqueue_compaction() calls of one key.
-- The cause is the fast path's FOR KEY SHARE (0024). When a worker takes the
-- fresh job at that moment, the enqueue waits for the worker, then finds the
-- row no longer fresh, but PostgreSQL keeps the row lock it took for the
-- recheck. Both enqueues then take the running-job path, which writes two
-- rows: add_job's unsafe_dedupe bumps the running job, add_jobs clears its
-- key (a key update, which waits for every FOR KEY SHARE) and inserts its
-- successor. Each enqueue held a share lock the other's key update needed
-- (test/integrity/enqueue.test.ts replays it with two enqueues and a worker
-- holding its claim).
-- With the key's lock taken first, one writer of a key touches its rows at a
-- time and a lock kept by a failed recheck blocks nobody but workers, whose
-- job statements wait for nothing else. enqueue_compaction() takes the
-- conversation's write lock (74201) before it, the order the write path
-- already takes them in (its triggers enqueue while holding 74201), so an
-- application that enqueues and then writes in one transaction cannot
-- deadlock with another writer. The worker's own writes of the key (a
-- deferral's run_at, in the commit and in the job) go through
-- compaction_job_at(), under the key's lock only: the commit holds the
-- summary's row, which a conversation's deletion (under 74201) waits for.
-- The sweep never waits for either lock: a conversation busy with a writer
-- is left to that writer's own enqueue and to the next sweep.

CREATE FUNCTION sourcebound.compaction_key_lock(p_conversation_id uuid)
RETURNS void LANGUAGE sql VOLATILE AS $$
  SELECT pg_advisory_xact_lock(74203, hashtext('sourcebound:compact:' || p_conversation_id::text))
$$;
--> statement-breakpoint
-- The conversation's job at a time, by graphile-worker's preserve_run_at
-- rules, as the one writer of its key.
CREATE FUNCTION sourcebound.compaction_job_at(p_conversation_id uuid, p_run_at timestamptz)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  PERFORM sourcebound.compaction_key_lock(p_conversation_id);
  PERFORM graphile_worker.add_job('compact_conversation', json_build_object('conversationId', p_conversation_id),
    run_at := p_run_at, job_key := 'sourcebound:compact:' || p_conversation_id::text, job_key_mode := 'preserve_run_at');
END
$$;
--> statement-breakpoint
CREATE OR REPLACE FUNCTION sourcebound.enqueue_compaction(p_conversation_id uuid)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  v_key text := 'sourcebound:compact:' || p_conversation_id::text;
  v_job graphile_worker._private_jobs;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM sourcebound.conversations WHERE id = p_conversation_id) THEN
    RAISE EXCEPTION 'sourcebound: conversation % does not exist', p_conversation_id
      USING ERRCODE = 'no_data_found';
  END IF;
  PERFORM pg_advisory_xact_lock(74201, hashtext(p_conversation_id::text));
  PERFORM sourcebound.compaction_key_lock(p_conversation_id);
  -- A fresh job waiting: what preserve_run_at would leave it as (0024). Its
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
-- The sweep's enqueue (0023), which never waits for a conversation's locks.
CREATE OR REPLACE FUNCTION sourcebound.compaction_enqueue_if_lost(p_conversation_id uuid)
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
-- Commit (0025), unchanged but for the deferral's job, written through
-- compaction_job_at().
CREATE OR REPLACE FUNCTION sourcebound.commit_summary(
  p_summary_id uuid, p_attempt_id bigint, p_worker_id text, p_outcome text,
  p_summary text, p_reason text, p_request_id text, p_usage jsonb, p_not_before_ms double precision,
  p_grounding_checked text[], p_grounding_ungrounded text[])
RETURNS TABLE (commit_kind text, rec sourcebound.conversation_summaries, marks_remain boolean)
LANGUAGE plpgsql AS $$
DECLARE
  v_rec sourcebound.conversation_summaries;
  v_generation bigint;
  v_src record;
  v_final boolean;
BEGIN
  SELECT * INTO v_rec FROM sourcebound.conversation_summaries WHERE id = p_summary_id FOR UPDATE;
  -- Gone with its conversation, or taken over after our lease expired (that
  -- worker already counted our attempt as spent). The lease owner is the
  -- worker process, shared by its jobs: a takeover by another job of the same
  -- process settles our attempt, so the attempt must still be open too.
  IF NOT FOUND OR v_rec.status <> 'running' OR v_rec.lease_owner IS DISTINCT FROM p_worker_id
     OR NOT EXISTS (SELECT 1 FROM sourcebound.conversation_summary_attempts a
                    WHERE a.id = p_attempt_id AND a.summary_id = p_summary_id AND a.outcome IS NULL) THEN
    commit_kind := 'lease_lost';
    RETURN NEXT;
    RETURN;
  END IF;
  v_final := v_rec.attempts_spent + 1 >= 2;

  IF p_outcome = 'ok' THEN
    IF v_rec.hash_version <> 1 THEN
      RAISE EXCEPTION 'sourcebound: source hash version % cannot be computed here', v_rec.hash_version;
    END IF;
    SELECT generation INTO v_generation FROM sourcebound.compaction_marks
    WHERE conversation_id = v_rec.conversation_id AND from_pair = v_rec.from_pair;
    SELECT * INTO v_src FROM sourcebound.range_source(v_rec.conversation_id, v_rec.from_pair);
    IF v_src.pairs = 10 AND v_src.source_message_ids = v_rec.source_message_ids AND v_src.source_hash = v_rec.source_hash THEN
      UPDATE sourcebound.conversation_summary_attempts
      SET outcome = 'ok', spent = true, reason = NULL, request_id = p_request_id, usage = p_usage, finished_at = now(),
          grounding_checked = p_grounding_checked, grounding_ungrounded = p_grounding_ungrounded
      WHERE id = p_attempt_id;
      UPDATE sourcebound.conversation_summaries
      SET status = 'completed', attempts_spent = attempts_spent + 1, summary = p_summary, completed_at = now(),
          lease_owner = NULL, lease_expires_at = NULL, not_before = NULL
      WHERE id = p_summary_id RETURNING * INTO v_rec;
      PERFORM sourcebound.compaction_mark_clear(v_rec.conversation_id, v_rec.from_pair, v_generation);
      commit_kind := 'completed';
    ELSE
      UPDATE sourcebound.conversation_summary_attempts
      SET outcome = 'stale', spent = true, reason = 'the source changed while the summary was being made',
          request_id = p_request_id, usage = p_usage, finished_at = now(),
          grounding_checked = p_grounding_checked, grounding_ungrounded = p_grounding_ungrounded
      WHERE id = p_attempt_id;
      UPDATE sourcebound.conversation_summaries
      SET status = CASE WHEN v_final THEN 'failed' ELSE 'stale' END, attempts_spent = attempts_spent + 1,
          failure_reason = CASE WHEN v_final THEN 'two attempts spent (the last: source changed before commit)' ELSE 'source changed before commit' END,
          lease_owner = NULL, lease_expires_at = NULL, not_before = NULL
      WHERE id = p_summary_id RETURNING * INTO v_rec;
      commit_kind := 'stale';
    END IF;
  ELSIF p_outcome IN ('invalid', 'unknown') THEN
    UPDATE sourcebound.conversation_summary_attempts
    SET outcome = p_outcome, spent = true, reason = p_reason, request_id = p_request_id, usage = p_usage, finished_at = now(),
        grounding_checked = p_grounding_checked, grounding_ungrounded = p_grounding_ungrounded
    WHERE id = p_attempt_id;
    UPDATE sourcebound.conversation_summaries
    SET status = CASE WHEN v_final THEN 'failed' ELSE 'pending' END, attempts_spent = attempts_spent + 1,
        failure_reason = p_outcome || ': ' || p_reason,
        not_before = CASE WHEN v_final OR p_not_before_ms IS NULL THEN NULL ELSE now() + make_interval(secs => p_not_before_ms / 1000) END,
        lease_owner = NULL, lease_expires_at = NULL
    WHERE id = p_summary_id RETURNING * INTO v_rec;
    commit_kind := 'spent';
  ELSIF p_outcome IN ('deferred', 'config') THEN
    UPDATE sourcebound.conversation_summary_attempts
    SET outcome = p_outcome, spent = false, reason = p_reason, request_id = NULL, usage = NULL, finished_at = now()
    WHERE id = p_attempt_id;
    UPDATE sourcebound.conversation_summaries
    SET status = 'pending', failure_reason = p_outcome || ': ' || p_reason,
        not_before = CASE WHEN p_outcome = 'deferred' THEN now() + make_interval(secs => coalesce(p_not_before_ms, 0) / 1000) END,
        lease_owner = NULL, lease_expires_at = NULL
    WHERE id = p_summary_id RETURNING * INTO v_rec;
    IF p_outcome = 'deferred' THEN
      -- The provider asked us to wait: the conversation's job runs then, and
      -- preserve_run_at keeps later enqueues from asking earlier.
      PERFORM sourcebound.compaction_job_at(v_rec.conversation_id, v_rec.not_before);
    END IF;
    commit_kind := p_outcome;
  ELSE
    RAISE EXCEPTION 'sourcebound: unknown outcome %', p_outcome;
  END IF;
  rec := v_rec;
  marks_remain := EXISTS (SELECT 1 FROM sourcebound.compaction_marks m WHERE m.conversation_id = v_rec.conversation_id);
  RETURN NEXT;
END
$$;
