CREATE TABLE "sourcebound"."workers" (
	"worker_id" text PRIMARY KEY NOT NULL,
	"graphile_worker_ids" text[] DEFAULT '{}'::text[] NOT NULL,
	"started_at" timestamp with time zone DEFAULT now() NOT NULL,
	"beat_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "workers_id_not_blank" CHECK (btrim("sourcebound"."workers"."worker_id") <> '')
);
--> statement-breakpoint
-- A claim's lease, renewed while its call runs (every third of the lease), so
-- the lease can be short and a dead holder's range is taken over soon. Only
-- the holder renews: the record still running under its lease owner, with
-- the attempt it opened still open. A lease that ran out but was not taken
-- over is renewed too (its commit would still be accepted, so the call is
-- not worth abandoning). Returns the new expiry, or NULL: the claim was taken
-- over or settled, and the call's answer can no longer commit.
CREATE FUNCTION sourcebound.claim_renew(p_summary_id uuid, p_attempt_id bigint, p_worker_id text, p_lease_ms double precision)
RETURNS timestamp with time zone
LANGUAGE sql SECURITY DEFINER SET search_path = sourcebound, pg_temp AS $$
  UPDATE sourcebound.conversation_summaries s
  SET lease_expires_at = greatest(s.lease_expires_at, now() + make_interval(secs => p_lease_ms / 1000))
  WHERE s.id = p_summary_id AND s.status = 'running' AND s.lease_owner = p_worker_id
    AND EXISTS (SELECT 1 FROM sourcebound.conversation_summary_attempts a
                WHERE a.id = p_attempt_id AND a.summary_id = p_summary_id AND a.outcome IS NULL)
  RETURNING s.lease_expires_at
$$;
--> statement-breakpoint
-- A compaction job that runs now for each conversation, under its own key:
-- not the conversation's usual key, which a running job may hold (re-adding a
-- locked job's key makes graphile-worker give that running job its last
-- attempt). Used wherever claims are handed back.
CREATE FUNCTION sourcebound.compaction_resume(p_conversation_ids uuid[]) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = sourcebound, pg_temp AS $$
  SELECT graphile_worker.add_job('compact_conversation', json_build_object('conversationId', c),
           run_at := now(), job_key := 'sourcebound:compact-resume:' || c, job_key_mode := 'replace')
  FROM unnest(p_conversation_ids) AS c;
$$;
--> statement-breakpoint
-- What a worker's retired runner held, handed back by that worker after a
-- recovery: the leases of its running claims end now (the next claim takes
-- them over and settles the interrupted attempt as unknown, spent), except
-- on the conversations its still-running tasks work on. Ranges it deferred
-- because of the outage, not the provider (its last attempt deferred with
-- admission_timeout or aborted_before_send), become claimable now. Each
-- conversation gets a job that runs now. Returns the conversations.
CREATE FUNCTION sourcebound.claims_hand_back(p_lease_owner text, p_except uuid[]) RETURNS SETOF uuid
LANGUAGE plpgsql SECURITY DEFINER SET search_path = sourcebound, pg_temp AS $$
DECLARE
  v_conversations uuid[];
BEGIN
  WITH released AS (
    UPDATE sourcebound.conversation_summaries SET lease_expires_at = now()
    WHERE status = 'running' AND lease_owner = p_lease_owner AND lease_expires_at > now() AND NOT (conversation_id = ANY (p_except))
    RETURNING conversation_id
  ), undeferred AS (
    UPDATE sourcebound.conversation_summaries s SET not_before = now()
    WHERE s.status = 'pending' AND s.not_before > now() AND NOT (s.conversation_id = ANY (p_except))
      AND (SELECT a.worker_id = p_lease_owner AND a.outcome = 'deferred' AND a.reason IN ('admission_timeout', 'aborted_before_send')
           FROM sourcebound.conversation_summary_attempts a
           WHERE a.summary_id = s.id ORDER BY a.id DESC LIMIT 1)
    RETURNING conversation_id
  )
  SELECT coalesce(array_agg(DISTINCT c), '{}') INTO v_conversations
  FROM (SELECT conversation_id AS c FROM released UNION ALL SELECT conversation_id FROM undeferred) changed;
  PERFORM sourcebound.compaction_resume(v_conversations);
  RETURN QUERY SELECT unnest(v_conversations);
END
$$;
--> statement-breakpoint
-- A safety net a few seconds after a recovery: ranges this process (any of
-- its runners: p_worker_id or p_worker_id/r<n>) deferred in the last two
-- minutes because of the outage become claimable now, with a job that runs
-- now (through a pooler a deferral can commit late, or come from the new
-- runner while admission reconnects). Returns the conversations.
CREATE FUNCTION sourcebound.outage_deferrals_release(p_worker_id text) RETURNS SETOF uuid
LANGUAGE plpgsql SECURITY DEFINER SET search_path = sourcebound, pg_temp AS $$
DECLARE
  v_conversations uuid[];
BEGIN
  WITH undeferred AS (
    UPDATE sourcebound.conversation_summaries s SET not_before = now()
    WHERE s.status = 'pending' AND s.not_before > now()
      AND (SELECT (a.worker_id = p_worker_id OR starts_with(a.worker_id, p_worker_id || '/r')) AND a.outcome = 'deferred'
                  AND a.reason IN ('admission_timeout', 'aborted_before_send') AND a.finished_at > now() - interval '2 minutes'
           FROM sourcebound.conversation_summary_attempts a
           WHERE a.summary_id = s.id ORDER BY a.id DESC LIMIT 1)
    RETURNING conversation_id
  )
  SELECT coalesce(array_agg(DISTINCT conversation_id), '{}') INTO v_conversations FROM undeferred;
  PERFORM sourcebound.compaction_resume(v_conversations);
  RETURN QUERY SELECT unnest(v_conversations);
END
$$;
--> statement-breakpoint
-- Hands back everything a worker process held, in one transaction: the
-- graphile-worker jobs locked with its runners' ids are unlocked (else they
-- stay locked for four hours, invisible to the queue), the leases of its
-- claims (lease owner its id or <id>/r<n>) end now and their conversations
-- get a job that runs now, and its row goes. Called for a dead worker by a
-- live one (worker_beat), and by a worker for itself as it stops.
CREATE FUNCTION sourcebound.worker_reap(p_worker sourcebound.workers, OUT jobs_unlocked integer, OUT claims_released integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = sourcebound, pg_temp AS $$
DECLARE
  v_conversations uuid[];
BEGIN
  SELECT count(*)::int INTO jobs_unlocked FROM graphile_worker.jobs WHERE locked_by = ANY (p_worker.graphile_worker_ids);
  IF jobs_unlocked > 0 THEN
    PERFORM graphile_worker.force_unlock_workers(p_worker.graphile_worker_ids);
  END IF;
  WITH released AS (
    UPDATE sourcebound.conversation_summaries SET lease_expires_at = now()
    WHERE status = 'running' AND lease_expires_at > now()
      AND (lease_owner = p_worker.worker_id OR starts_with(lease_owner, p_worker.worker_id || '/r'))
    RETURNING conversation_id
  )
  SELECT count(*)::int, coalesce(array_agg(DISTINCT conversation_id), '{}') INTO claims_released, v_conversations FROM released;
  PERFORM sourcebound.compaction_resume(v_conversations);
  DELETE FROM sourcebound.workers WHERE worker_id = p_worker.worker_id;
END
$$;
--> statement-breakpoint
-- A worker's heartbeat, and the fleet's watch over its members, in one
-- statement every few seconds: records that p_worker_id is alive (and the
-- graphile-worker ids its runners lock jobs with), then reaps every other
-- worker silent for p_dead_after_ms, so a SIGKILLed or OOM-killed worker's
-- ranges are taken over in seconds, not after a whole lease, and its jobs
-- are not left locked for four hours. Silence counts from the server's start
-- at the earliest: after a PostgreSQL restart every worker gets the whole
-- period to beat again. Two live workers never reap the same one (the row is
-- deleted under its lock). Returns the workers reaped.
CREATE FUNCTION sourcebound.worker_beat(p_worker_id text, p_graphile_worker_ids text[], p_dead_after_ms double precision)
RETURNS TABLE (worker_id text, silent_ms double precision, jobs_unlocked integer, claims_released integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = sourcebound, pg_temp AS $$
DECLARE
  v_dead sourcebound.workers;
  v_reaped record;
BEGIN
  INSERT INTO sourcebound.workers AS w (worker_id, graphile_worker_ids, beat_at) VALUES (p_worker_id, p_graphile_worker_ids, now())
  ON CONFLICT ON CONSTRAINT workers_pkey DO UPDATE SET graphile_worker_ids = EXCLUDED.graphile_worker_ids, beat_at = now();
  FOR v_dead IN
    SELECT * FROM sourcebound.workers d
    WHERE d.worker_id <> p_worker_id
      AND greatest(d.beat_at, pg_postmaster_start_time()) < now() - make_interval(secs => p_dead_after_ms / 1000)
    FOR UPDATE SKIP LOCKED
  LOOP
    SELECT * INTO v_reaped FROM sourcebound.worker_reap(v_dead);
    worker_id := v_dead.worker_id;
    silent_ms := extract(epoch FROM now() - v_dead.beat_at) * 1000;
    jobs_unlocked := v_reaped.jobs_unlocked;
    claims_released := v_reaped.claims_released;
    RETURN NEXT;
  END LOOP;
END
$$;
--> statement-breakpoint
-- A worker that stops hands back whatever it still holds (normally nothing)
-- and leaves the registry.
CREATE FUNCTION sourcebound.worker_leave(p_worker_id text, OUT jobs_unlocked integer, OUT claims_released integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = sourcebound, pg_temp AS $$
DECLARE
  v_self sourcebound.workers;
BEGIN
  SELECT * INTO v_self FROM sourcebound.workers WHERE workers.worker_id = p_worker_id FOR UPDATE;
  IF NOT FOUND THEN
    jobs_unlocked := 0;
    claims_released := 0;
    RETURN;
  END IF;
  SELECT r.jobs_unlocked, r.claims_released INTO jobs_unlocked, claims_released FROM sourcebound.worker_reap(v_self) r;
END
$$;
--> statement-breakpoint
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA sourcebound FROM PUBLIC;
--> statement-breakpoint
SELECT sourcebound.grant_runtime_roles();
