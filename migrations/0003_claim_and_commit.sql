-- Claim and commit: the source hash, the claim and commit of a range, and the
-- immutability of summary records and their attempts.

-- Source hash, version 1: the SQL twin of src/hash.ts, byte for byte
-- (test/compaction/source-hash.test.ts, on real and hostile text):
-- SHA-256 over "sourcebound/conversation-source\0" || u32be(1) || u32be(pairs)
-- || for each pair: field(user id) field(user text) field(assistant id)
-- field(assistant text), field(v) = u32be(octet length of its UTF-8) || its
-- UTF-8, ids as lowercase canonical UUID text. PostgreSQL text holds no NUL or
-- lone surrogate (node-postgres sends one as U+FFFD, as Buffer.from does), so
-- the bytes are the ones the application hashes. A twin, not SQL alone: the
-- projection re-checks bindings on texts it has read anyway, and a mismatch can
-- only make a summary unusable, never a wrong one usable.
-- These are set-based SQL functions, STABLE (convert_to is), so that they
-- inline into range_source() and its callers plan them once per session.
-- This one: one field.
CREATE FUNCTION sourcebound.source_hash_v1_field(p_value text)
RETURNS bytea LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT int4send(octet_length(convert_to(p_value, 'UTF8'))) || convert_to(p_value, 'UTF8')
$$;
--> statement-breakpoint
-- One pair's four fields: user id, user text, assistant id, assistant text.
CREATE FUNCTION sourcebound.source_hash_v1_pair(p_user_id uuid, p_user_text text, p_assistant_id uuid, p_assistant_text text)
RETURNS bytea LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT sourcebound.source_hash_v1_field(p_user_id::text) || sourcebound.source_hash_v1_field(p_user_text)
      || sourcebound.source_hash_v1_field(p_assistant_id::text) || sourcebound.source_hash_v1_field(p_assistant_text)
$$;
--> statement-breakpoint
-- The hash of p_pairs pairs whose encoded fields, in pair order, are p_fields.
CREATE FUNCTION sourcebound.source_hash_v1_of(p_pairs integer, p_fields bytea)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT encode(sha256('\x736f75726365626f756e642f636f6e766572736174696f6e2d736f7572636500'::bytea
    || int4send(1) || int4send(p_pairs) || coalesce(p_fields, ''::bytea)), 'hex')
$$;
--> statement-breakpoint
-- The hash on arrays (what the equality tests call), from the same helpers as
-- range_source().
CREATE FUNCTION sourcebound.source_hash_v1(p_user_ids uuid[], p_user_texts text[], p_assistant_ids uuid[], p_assistant_texts text[])
RETURNS text LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT sourcebound.source_hash_v1_of(coalesce(cardinality(p_user_ids), 0),
           string_agg(sourcebound.source_hash_v1_pair(x.u, x.ut, x.a, x.at), ''::bytea ORDER BY x.o))
  FROM unnest(p_user_ids, p_user_texts, p_assistant_ids, p_assistant_texts) WITH ORDINALITY AS x(u, ut, a, at, o)
$$;
--> statement-breakpoint
-- The current source of range p_from_pair..p_from_pair+9: how many of its pairs
-- exist, its 20 message ids in pair order, its hash, and the assistant replies
-- the summarizer is given. One aggregate over eligible_pairs, written so the
-- only way to a message is its primary key (IS NOT DISTINCT FROM on NOT NULL
-- columns is = but gives the planner no path through messages_conversation_idx,
-- a plan it picked on stale statistics). SQL and STABLE so it inlines. Always
-- one row (zero pairs: empty arrays' hash).
CREATE FUNCTION sourcebound.range_source(p_conversation_id uuid, p_from_pair integer)
RETURNS TABLE (pairs integer, source_message_ids uuid[], source_hash text, assistant_ids uuid[], assistant_texts text[], input_chars integer)
LANGUAGE sql STABLE AS $$
  SELECT count(*)::int,
         -- 10 x 2 (user, assistant) flattened in row order: u0, a0, u1, a1...
         ARRAY(SELECT unnest(array_agg(ARRAY[p.user_message_id, p.assistant_message_id] ORDER BY p.pair_index))),
         sourcebound.source_hash_v1_of(count(*)::int,
           string_agg(sourcebound.source_hash_v1_pair(p.user_message_id, u.content, p.assistant_message_id, a.content), ''::bytea ORDER BY p.pair_index)),
         array_agg(p.assistant_message_id ORDER BY p.pair_index),
         array_agg(a.content ORDER BY p.pair_index),
         coalesce(sum(char_length(a.content)), 0)::int
  FROM sourcebound.pairs p
  JOIN sourcebound.messages u ON u.id = p.user_message_id
  JOIN sourcebound.messages a ON a.id = p.assistant_message_id
  WHERE p.conversation_id = p_conversation_id AND p.pair_index BETWEEN p_from_pair AND p_from_pair + 9
    AND u.run_id IS NOT DISTINCT FROM p.run_id AND u.conversation_id IS NOT DISTINCT FROM p.conversation_id AND u.role IS NOT DISTINCT FROM 'user'
    AND a.run_id IS NOT DISTINCT FROM p.run_id AND a.conversation_id IS NOT DISTINCT FROM p.conversation_id AND a.role IS NOT DISTINCT FROM 'assistant'
$$;
--> statement-breakpoint
-- Claim of one range, one statement: under the range's advisory lock (74202,
-- src/db/locks.ts) read the range's source, hash it, and insert or take over
-- the record of that identity under a lease, opening its next attempt; the
-- unique constraint on the identity stays the final arbiter. A dead claim's
-- attempt still counts (unknown, spent). A mark is cleared only here or in the
-- commit, after a completed or failed record was seen to bind the range's
-- source, and only if its generation did not move since that look (an edit
-- racing the removal keeps it): the DELETE is written in place, not through a
-- helper, to keep the claim in one PL/pgSQL call.
-- claim_kind: claimed | done | failed | busy | deferred | gone.
CREATE FUNCTION sourcebound.claim_range(p_conversation_id uuid, p_from_pair integer, p_model text, p_prompt_version text, p_worker_id text, p_lease_ms double precision)
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
-- Claim of the next marked range, one statement (a job is claim, commit, not
-- read marks, claim, commit): the conversation's first mark after p_after that
-- is not one the job already visited and left in place (p_skip_from /
-- p_skip_generation pairwise: a mark whose generation moved is new work); when
-- there is none and p_wrap, the first such mark from the start. Then exactly
-- claim_range/6. claim_from_pair and claim_generation say which mark was taken.
-- claim_kind 'none': no such mark.
CREATE FUNCTION sourcebound.claim_range(p_conversation_id uuid, p_after integer, p_wrap boolean, p_skip_from integer[], p_skip_generation bigint[],
  p_model text, p_prompt_version text, p_worker_id text, p_lease_ms double precision)
RETURNS TABLE (claim_kind text, claim_from_pair integer, claim_generation bigint, rec sourcebound.conversation_summaries, claim_attempt_id bigint,
  claim_until timestamptz, claim_assistant_ids uuid[], claim_assistant_texts text[])
LANGUAGE plpgsql AS $$
DECLARE
  v_from integer;
  v_generation bigint;
BEGIN
  SELECT m.from_pair, m.generation INTO v_from, v_generation
  FROM sourcebound.compaction_marks m
  WHERE m.conversation_id = p_conversation_id AND m.from_pair > p_after
    AND NOT EXISTS (SELECT 1 FROM unnest(p_skip_from, p_skip_generation) AS s(f, g) WHERE s.f = m.from_pair AND s.g = m.generation)
  ORDER BY m.from_pair LIMIT 1;
  IF v_from IS NULL AND p_wrap THEN
    SELECT m.from_pair, m.generation INTO v_from, v_generation
    FROM sourcebound.compaction_marks m
    WHERE m.conversation_id = p_conversation_id AND m.from_pair <= p_after
      AND NOT EXISTS (SELECT 1 FROM unnest(p_skip_from, p_skip_generation) AS s(f, g) WHERE s.f = m.from_pair AND s.g = m.generation)
    ORDER BY m.from_pair LIMIT 1;
  END IF;
  IF v_from IS NULL THEN
    claim_kind := 'none';
    RETURN NEXT;
    RETURN;
  END IF;
  RETURN QUERY
    SELECT c.claim_kind, v_from, v_generation, c.rec, c.claim_attempt_id, c.claim_until, c.claim_assistant_ids, c.claim_assistant_texts
    FROM sourcebound.claim_range(p_conversation_id, v_from, p_model, p_prompt_version, p_worker_id, p_lease_ms) c;
END
$$;
--> statement-breakpoint
-- Commit, one statement: the lease and the attempt must still be ours; an ok
-- summary completes only if the range's source, read again now, still hashes
-- to the record's (it reads only the count, ids and hash, so the planner drops
-- the rest of the inlined range_source()); a dispatched call whose source
-- changed is stale and has spent its attempt. The grounding check (made in
-- TypeScript before this call) is stored with the attempt of an ok, stale or
-- invalid outcome. A deferral's run_at goes through compaction_job_at().
-- p_outcome: ok | invalid | unknown | deferred | config.
-- commit_kind: completed | stale | spent | deferred | config | lease_lost.
CREATE FUNCTION sourcebound.commit_summary(
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
      RAISE EXCEPTION 'sourcebound: source hash version % cannot be computed here', v_rec.hash_version USING CONSTRAINT = 'source_hash_version_unknown';
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
    RAISE EXCEPTION 'sourcebound: unknown outcome %', p_outcome USING CONSTRAINT = 'commit_outcome_unknown';
  END IF;
  rec := v_rec;
  marks_remain := EXISTS (SELECT 1 FROM sourcebound.compaction_marks m WHERE m.conversation_id = v_rec.conversation_id);
  RETURN NEXT;
END
$$;
--> statement-breakpoint
-- Invariant: a settled summary record is immutable. A completed or failed
-- record is never updated; no record is deleted except by the cascade from
-- erasing its conversation; an open record's identity and spent attempts never
-- go back. A stale record stays open: if the source returns to exactly that
-- state, the same identity may be claimed again. Enforced here, not only in
-- code, so a stray UPDATE cannot rewrite history.
-- The UPDATE trigger's WHEN clause (evaluated in C) holds exactly when the
-- function would raise, or when updated_at is not already now(): the claim's
-- and the commit's own updates set updated_at themselves and never enter
-- PL/pgSQL; any other writer still gets the refusal and the timestamp.
CREATE FUNCTION sourcebound.conversation_summaries_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    -- During the cascade from DELETE FROM conversations the parent row is
    -- already gone; any other delete finds it and is refused.
    IF EXISTS (SELECT 1 FROM sourcebound.conversations WHERE id = OLD.conversation_id) THEN
      RAISE EXCEPTION 'sourcebound: summary record % cannot be deleted; delete its conversation to erase it', OLD.id
        USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'summary_record_delete';
    END IF;
    RETURN OLD;
  END IF;
  IF OLD.status IN ('completed', 'failed') THEN
    RAISE EXCEPTION 'sourcebound: summary record % is % and immutable', OLD.id, OLD.status
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'summary_record_immutable';
  END IF;
  -- The identity and the spent attempts of an open record never go back.
  IF NEW.conversation_id <> OLD.conversation_id OR NEW.scope <> OLD.scope
     OR NEW.from_pair <> OLD.from_pair OR NEW.to_pair <> OLD.to_pair
     OR NEW.source_message_ids <> OLD.source_message_ids OR NEW.source_hash <> OLD.source_hash
     OR NEW.hash_version <> OLD.hash_version OR NEW.model <> OLD.model
     OR NEW.prompt_version <> OLD.prompt_version THEN
    RAISE EXCEPTION 'sourcebound: the identity of summary record % cannot change', OLD.id
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'summary_record_identity';
  END IF;
  IF NEW.attempts_spent < OLD.attempts_spent THEN
    RAISE EXCEPTION 'sourcebound: spent attempts of summary record % cannot decrease', OLD.id
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'summary_record_attempts_decrease';
  END IF;
  NEW.updated_at := now();
  RETURN NEW;
END
$$;
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
-- Invariant: every attempt is kept. A settled attempt is never changed, an
-- attempt's identity never changes, and attempts are deleted only with their
-- conversation. The UPDATE trigger's WHEN clause holds exactly when the
-- function would raise, so ordinary settlements cost no PL/pgSQL.
CREATE FUNCTION sourcebound.conversation_summary_attempts_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    IF EXISTS (SELECT 1 FROM sourcebound.conversation_summaries WHERE id = OLD.summary_id) THEN
      RAISE EXCEPTION 'sourcebound: attempt % cannot be deleted', OLD.id
        USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'summary_attempt_delete';
    END IF;
    RETURN OLD;
  END IF;
  IF OLD.outcome IS NOT NULL THEN
    RAISE EXCEPTION 'sourcebound: attempt % is settled (%) and immutable', OLD.id, OLD.outcome
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'summary_attempt_immutable';
  END IF;
  IF NEW.summary_id <> OLD.summary_id OR NEW.worker_id <> OLD.worker_id OR NEW.started_at <> OLD.started_at THEN
    RAISE EXCEPTION 'sourcebound: attempt % cannot change its identity', OLD.id
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'summary_attempt_identity';
  END IF;
  RETURN NEW;
END
$$;
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
--> statement-breakpoint
-- Immutable records cannot be erased in bulk: row triggers do not fire on
-- TRUNCATE, so without this `TRUNCATE ... CASCADE` would bypass the guards.
-- Erasing a conversation with DELETE still erases its records by cascade.
-- Used by the summary tables here and by the run history (run guards).
CREATE FUNCTION sourcebound.refuse_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'sourcebound: % keeps immutable records and cannot be truncated; delete conversations to erase them', TG_TABLE_NAME
    USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'truncate_refused';
END
$$;
--> statement-breakpoint
CREATE TRIGGER conversation_summaries_no_truncate BEFORE TRUNCATE ON sourcebound.conversation_summaries
  FOR EACH STATEMENT EXECUTE FUNCTION sourcebound.refuse_truncate();
--> statement-breakpoint
CREATE TRIGGER conversation_summary_attempts_no_truncate BEFORE TRUNCATE ON sourcebound.conversation_summary_attempts
  FOR EACH STATEMENT EXECUTE FUNCTION sourcebound.refuse_truncate();
