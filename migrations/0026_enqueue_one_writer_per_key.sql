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
-- deferral's run_at, in the job and, from 0027 on, in commit_summary(),
-- which 0027 redefines anyway) go through compaction_job_at(), under the
-- key's lock only: the commit holds the summary's row, which a
-- conversation's deletion (under 74201) waits for.
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
