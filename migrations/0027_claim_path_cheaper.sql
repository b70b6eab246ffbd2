-- Invariants kept (0023, 0025, 0026, unchanged): a summary completes only for the
-- source its commit re-read and re-hashed; a mark is cleared only by a claim
-- or commit that has just seen a completed or failed record bind the range's
-- source, and only if its generation did not move since that look.
--
-- What changes is what the claim path costs on the server (issue 14, P3/P4),
-- measured with clock_timestamp() loops in PL/pgSQL on PostgreSQL 15:
-- - commit_summary() read range_source() whole, but compares only the pair
--   count, the 20 ids and the hash: selecting those three lets the planner
--   drop the other aggregates of the inlined query (the replies' ids and
--   texts, their length), 0.154 -> 0.107 ms a call;
-- - a mark was cleared through PERFORM compaction_mark_clear(), a PL/pgSQL
--   function entered from PL/pgSQL for one DELETE: now the DELETE itself,
--   word for word the same condition (compaction_mark_clear() stays, for
--   other callers).
-- - each UPDATE of a record or an attempt entered a PL/pgSQL guard trigger
--   that, but for a change it refuses, only set updated_at := now() (records)
--   or returned the row as it came (attempts). The guards' UPDATE triggers
--   now have WHEN clauses, evaluated in C, that hold exactly when the
--   function would raise, or (records) when updated_at is not already now();
--   the claim's and the commit's UPDATEs set updated_at = now() themselves.
--   Any other writer still enters the guard as before, so every refusal and
--   every updated_at stays the database's. DELETE keeps its own trigger.
-- The functions keep their signatures, return types and outcomes (CREATE OR
-- REPLACE); the two guard triggers are each split into a DELETE and an UPDATE trigger.

-- Claim of one range (0025), the mark cleared in place.
CREATE OR REPLACE FUNCTION sourcebound.claim_range(p_conversation_id uuid, p_from_pair integer, p_model text, p_prompt_version text, p_worker_id text, p_lease_ms double precision)
RETURNS TABLE (claim_kind text, rec sourcebound.conversation_summaries, claim_attempt_id bigint, claim_until timestamptz, claim_assistant_ids uuid[], claim_assistant_texts text[])
LANGUAGE plpgsql AS $$
DECLARE
  v_generation bigint;
  v_scope text;
  v_count integer;
  v_src record;
  v_rec sourcebound.conversation_summaries;
  v_expired boolean := false;
BEGIN
  IF NOT pg_try_advisory_xact_lock(74202, hashtext(p_conversation_id::text || ':' || p_from_pair::text)) THEN
    claim_kind := 'busy';
    RETURN NEXT;
    RETURN;
  END IF;
  -- The generation is read before the source (this statement comes first):
  -- an edit committed after it moves the generation, so clearing the mark
  -- below fails and the range is visited again.
  SELECT c.scope,
         (SELECT m.generation FROM sourcebound.compaction_marks m WHERE m.conversation_id = c.id AND m.from_pair = p_from_pair),
         (SELECT coalesce(max(p.pair_index) + 1, 0) FROM sourcebound.pairs p WHERE p.conversation_id = c.id)
  INTO v_scope, v_generation, v_count
  FROM sourcebound.conversations c WHERE c.id = p_conversation_id;
  IF NOT FOUND THEN
    claim_kind := 'gone';
    RETURN NEXT;
    RETURN;
  END IF;
  IF p_from_pair % 10 <> 0 OR p_from_pair + 9 >= 10 * sourcebound.plannable_range_count(v_count) THEN
    DELETE FROM sourcebound.compaction_marks WHERE conversation_id = p_conversation_id AND from_pair = p_from_pair AND generation = v_generation;
    claim_kind := 'gone';
    RETURN NEXT;
    RETURN;
  END IF;
  SELECT * INTO v_src FROM sourcebound.range_source(p_conversation_id, p_from_pair);
  IF v_src.pairs <> 10 THEN
    -- The index disagrees with itself (drift): nothing can be bound; the mark stays for after a repair.
    claim_kind := 'gone';
    RETURN NEXT;
    RETURN;
  END IF;

  SELECT * INTO v_rec FROM sourcebound.conversation_summaries s
  WHERE s.conversation_id = p_conversation_id AND s.from_pair = p_from_pair AND s.to_pair = p_from_pair + 9
    AND s.source_hash = v_src.source_hash AND s.model = p_model AND s.prompt_version = p_prompt_version
  FOR UPDATE;

  IF NOT FOUND THEN
    INSERT INTO sourcebound.conversation_summaries
      (conversation_id, scope, from_pair, to_pair, source_message_ids, source_hash, hash_version, model, prompt_version,
       status, lease_owner, lease_expires_at)
    VALUES (p_conversation_id, v_scope, p_from_pair, p_from_pair + 9, v_src.source_message_ids, v_src.source_hash, 1, p_model, p_prompt_version,
       'running', p_worker_id, now() + make_interval(secs => p_lease_ms / 1000))
    RETURNING * INTO v_rec;
  ELSE
    IF v_rec.status IN ('completed', 'failed') THEN
      DELETE FROM sourcebound.compaction_marks WHERE conversation_id = p_conversation_id AND from_pair = p_from_pair AND generation = v_generation;
      claim_kind := CASE WHEN v_rec.status = 'completed' THEN 'done' ELSE 'failed' END;
      rec := v_rec;
      RETURN NEXT;
      RETURN;
    END IF;
    IF v_rec.status = 'running' THEN
      IF v_rec.lease_expires_at > now() THEN
        claim_kind := 'busy';
        claim_until := v_rec.lease_expires_at;
        RETURN NEXT;
        RETURN;
      END IF;
      -- The holder died mid-call: its attempt may have reached the model, so it counts.
      UPDATE sourcebound.conversation_summary_attempts
      SET outcome = 'unknown', spent = true, reason = 'lease_expired: the worker holding the claim stopped before settling', finished_at = now()
      WHERE summary_id = v_rec.id AND outcome IS NULL;
      IF v_rec.attempts_spent + 1 >= 2 THEN
        UPDATE sourcebound.conversation_summaries
        SET updated_at = now(), status = 'failed', attempts_spent = attempts_spent + 1, failure_reason = 'two attempts spent (the last: lease expired)',
            lease_owner = NULL, lease_expires_at = NULL, not_before = NULL
        WHERE id = v_rec.id RETURNING * INTO v_rec;
        DELETE FROM sourcebound.compaction_marks WHERE conversation_id = p_conversation_id AND from_pair = p_from_pair AND generation = v_generation;
        claim_kind := 'failed';
        rec := v_rec;
        RETURN NEXT;
        RETURN;
      END IF;
      v_expired := true;
    ELSIF v_rec.not_before IS NOT NULL AND v_rec.not_before > now() THEN
      claim_kind := 'deferred';
      claim_until := v_rec.not_before;
      rec := v_rec;
      RETURN NEXT;
      RETURN;
    END IF;
    UPDATE sourcebound.conversation_summaries
    SET updated_at = now(), status = 'running', lease_owner = p_worker_id, lease_expires_at = now() + make_interval(secs => p_lease_ms / 1000), not_before = NULL,
        attempts_spent = attempts_spent + CASE WHEN v_expired THEN 1 ELSE 0 END,
        failure_reason = CASE WHEN v_expired THEN 'lease expired' ELSE failure_reason END
    WHERE id = v_rec.id RETURNING * INTO v_rec;
  END IF;

  INSERT INTO sourcebound.conversation_summary_attempts (summary_id, worker_id, input_chars)
  VALUES (v_rec.id, p_worker_id, v_src.input_chars)
  RETURNING id INTO claim_attempt_id;
  claim_kind := 'claimed';
  rec := v_rec;
  claim_assistant_ids := v_src.assistant_ids;
  claim_assistant_texts := v_src.assistant_texts;
  RETURN NEXT;
END
$$;
--> statement-breakpoint
-- Commit (0025, with the deferral written through 0026's compaction_job_at()): reads only what it compares; the mark cleared in place.
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
    -- Only what is compared: the planner then drops range_source()'s other
    -- aggregates (the replies' ids, texts and length), about a third of its cost.
    SELECT s.pairs, s.source_message_ids, s.source_hash INTO v_src FROM sourcebound.range_source(v_rec.conversation_id, v_rec.from_pair) s;
    IF v_src.pairs = 10 AND v_src.source_message_ids = v_rec.source_message_ids AND v_src.source_hash = v_rec.source_hash THEN
      UPDATE sourcebound.conversation_summary_attempts
      SET outcome = 'ok', spent = true, reason = NULL, request_id = p_request_id, usage = p_usage, finished_at = now(),
          grounding_checked = p_grounding_checked, grounding_ungrounded = p_grounding_ungrounded
      WHERE id = p_attempt_id;
      UPDATE sourcebound.conversation_summaries
      SET updated_at = now(), status = 'completed', attempts_spent = attempts_spent + 1, summary = p_summary, completed_at = now(),
          lease_owner = NULL, lease_expires_at = NULL, not_before = NULL
      WHERE id = p_summary_id RETURNING * INTO v_rec;
      DELETE FROM sourcebound.compaction_marks WHERE conversation_id = v_rec.conversation_id AND from_pair = v_rec.from_pair AND generation = v_generation;
      commit_kind := 'completed';
    ELSE
      UPDATE sourcebound.conversation_summary_attempts
      SET outcome = 'stale', spent = true, reason = 'the source changed while the summary was being made',
          request_id = p_request_id, usage = p_usage, finished_at = now(),
          grounding_checked = p_grounding_checked, grounding_ungrounded = p_grounding_ungrounded
      WHERE id = p_attempt_id;
      UPDATE sourcebound.conversation_summaries
      SET updated_at = now(), status = CASE WHEN v_final THEN 'failed' ELSE 'stale' END, attempts_spent = attempts_spent + 1,
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
    SET updated_at = now(), status = CASE WHEN v_final THEN 'failed' ELSE 'pending' END, attempts_spent = attempts_spent + 1,
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
    SET updated_at = now(), status = 'pending', failure_reason = p_outcome || ': ' || p_reason,
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
--> statement-breakpoint
-- The guards (0004) split by operation; their functions are unchanged. UPDATE
-- fires the function only when it has something to do: the conditions are
-- the function's own (the identity columns are NOT NULL, so IS DISTINCT FROM
-- is <> there), plus, for records, an updated_at that is not now().
DROP TRIGGER conversation_summaries_guard ON sourcebound.conversation_summaries;
--> statement-breakpoint
CREATE TRIGGER conversation_summaries_guard_delete BEFORE DELETE ON sourcebound.conversation_summaries
  FOR EACH ROW EXECUTE FUNCTION sourcebound.conversation_summaries_guard();
--> statement-breakpoint
CREATE TRIGGER conversation_summaries_guard_update BEFORE UPDATE ON sourcebound.conversation_summaries
  FOR EACH ROW WHEN (
    OLD.status IN ('completed', 'failed')
    OR NEW.conversation_id IS DISTINCT FROM OLD.conversation_id OR NEW.scope IS DISTINCT FROM OLD.scope
    OR NEW.from_pair IS DISTINCT FROM OLD.from_pair OR NEW.to_pair IS DISTINCT FROM OLD.to_pair
    OR NEW.source_message_ids IS DISTINCT FROM OLD.source_message_ids OR NEW.source_hash IS DISTINCT FROM OLD.source_hash
    OR NEW.hash_version IS DISTINCT FROM OLD.hash_version OR NEW.model IS DISTINCT FROM OLD.model
    OR NEW.prompt_version IS DISTINCT FROM OLD.prompt_version
    OR NEW.attempts_spent < OLD.attempts_spent
    OR NEW.updated_at IS DISTINCT FROM now())
  EXECUTE FUNCTION sourcebound.conversation_summaries_guard();
--> statement-breakpoint
DROP TRIGGER conversation_summary_attempts_guard ON sourcebound.conversation_summary_attempts;
--> statement-breakpoint
CREATE TRIGGER conversation_summary_attempts_guard_delete BEFORE DELETE ON sourcebound.conversation_summary_attempts
  FOR EACH ROW EXECUTE FUNCTION sourcebound.conversation_summary_attempts_guard();
--> statement-breakpoint
CREATE TRIGGER conversation_summary_attempts_guard_update BEFORE UPDATE ON sourcebound.conversation_summary_attempts
  FOR EACH ROW WHEN (
    OLD.outcome IS NOT NULL
    OR NEW.summary_id IS DISTINCT FROM OLD.summary_id OR NEW.worker_id IS DISTINCT FROM OLD.worker_id
    OR NEW.started_at IS DISTINCT FROM OLD.started_at)
  EXECUTE FUNCTION sourcebound.conversation_summary_attempts_guard();
