-- Invariants kept (0023, unchanged): a summary completes only for the source
-- its commit re-read and re-hashed; a mark is cleared only by a claim or
-- commit that has just seen a completed or failed record bind the range's
-- source, and only if its generation did not move since that look; the
-- source hash here equals src/hash.ts byte for byte
-- (test/compaction/source-hash.test.ts, on real and hostile text, through
-- range_source() as the claim and commit use it).
--
-- What changes is the cost of the claim path (issue 14, P3/P4), measured on
-- PostgreSQL 15 with track_functions: range_source() took 0.77 ms of the
-- claim's 2.1 ms, mostly PL/pgSQL: a loop interleaving the ids and a loop
-- concatenating bytea per pair in source_hash_v1 (each `||` copies what came
-- before). Here the source is one set-based SQL query (sha256() over
-- string_agg of the length-prefixed fields), and range_source() is a SQL
-- function the planner inlines into its caller's statement (STABLE, one
-- SELECT, not strict), so PL/pgSQL callers plan it once per session instead
-- of it being planned again on every call. And the job no longer reads its
-- marks in a statement of its own: claim_range() has a second form that
-- takes the conversation's first mark the job has not left in place and
-- claims it, and commit_summary() says whether any mark is left, so a
-- one-range job is two statements (claim, commit) between graphile-worker's
-- own, not four.

-- One field of the version-1 encoding: u32be(octet length of its UTF-8) || its UTF-8.
-- STABLE (convert_to is) so that it inlines into range_source().
CREATE FUNCTION sourcebound.source_hash_v1_field(p_value text)
RETURNS bytea LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT int4send(octet_length(convert_to(p_value, 'UTF8'))) || convert_to(p_value, 'UTF8')
$$;
--> statement-breakpoint
-- One pair's four fields: user id, user text, assistant id, assistant text
-- (ids as lowercase canonical UUID text, which is what uuid::text gives).
CREATE FUNCTION sourcebound.source_hash_v1_pair(p_user_id uuid, p_user_text text, p_assistant_id uuid, p_assistant_text text)
RETURNS bytea LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT sourcebound.source_hash_v1_field(p_user_id::text) || sourcebound.source_hash_v1_field(p_user_text)
      || sourcebound.source_hash_v1_field(p_assistant_id::text) || sourcebound.source_hash_v1_field(p_assistant_text)
$$;
--> statement-breakpoint
-- The hash of `p_pairs` pairs whose encoded fields, in pair order, are
-- p_fields: "sourcebound/conversation-source\0" || u32be(1) || u32be(pairs) || fields.
CREATE FUNCTION sourcebound.source_hash_v1_of(p_pairs integer, p_fields bytea)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT encode(sha256('\x736f75726365626f756e642f636f6e766572736174696f6e2d736f7572636500'::bytea
    || int4send(1) || int4send(p_pairs) || coalesce(p_fields, ''::bytea)), 'hex')
$$;
--> statement-breakpoint
-- The twin of src/hash.ts on arrays (what the equality tests call), from the
-- same two helpers as range_source(). No longer PL/pgSQL: one query.
CREATE OR REPLACE FUNCTION sourcebound.source_hash_v1(p_user_ids uuid[], p_user_texts text[], p_assistant_ids uuid[], p_assistant_texts text[])
RETURNS text LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT sourcebound.source_hash_v1_of(coalesce(cardinality(p_user_ids), 0),
           string_agg(sourcebound.source_hash_v1_pair(x.u, x.ut, x.a, x.at), ''::bytea ORDER BY x.o))
  FROM unnest(p_user_ids, p_user_texts, p_assistant_ids, p_assistant_texts) WITH ORDINALITY AS x(u, ut, a, at, o)
$$;
--> statement-breakpoint
-- The current source of range p_from_pair..p_from_pair+9 (as in 0023): how
-- many of its pairs exist, its 20 message ids in pair order, its hash, and the
-- assistant replies the summarizer is given. One aggregate over the rows of
-- sourcebound.eligible_pairs (0016), written so that the only way to a
-- message is its primary key (IS NOT DISTINCT FROM, on NOT NULL columns, is =
-- but gives the planner no path through messages_conversation_idx, which
-- reads every message of the conversation: a plan it picked on stale
-- statistics). Always one row, as before (zero pairs: empty arrays' hash).
CREATE OR REPLACE FUNCTION sourcebound.range_source(p_conversation_id uuid, p_from_pair integer)
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
-- Claim of one range (0023), the same steps and outcomes; the mark's
-- generation, the scope and the pair count in one read.
-- claim_kind: claimed | done | failed | busy | deferred | gone.
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
    PERFORM sourcebound.compaction_mark_clear(p_conversation_id, p_from_pair, v_generation);
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
      PERFORM sourcebound.compaction_mark_clear(p_conversation_id, p_from_pair, v_generation);
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
        SET status = 'failed', attempts_spent = attempts_spent + 1, failure_reason = 'two attempts spent (the last: lease expired)',
            lease_owner = NULL, lease_expires_at = NULL, not_before = NULL
        WHERE id = v_rec.id RETURNING * INTO v_rec;
        PERFORM sourcebound.compaction_mark_clear(p_conversation_id, p_from_pair, v_generation);
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
    SET status = 'running', lease_owner = p_worker_id, lease_expires_at = now() + make_interval(secs => p_lease_ms / 1000), not_before = NULL,
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
-- Claim of the next marked range, one statement: what a job did as "read the
-- marks" then "claim" (two round trips). The range is the conversation's
-- first mark after p_after that is not one of the marks the job already
-- visited and left in place (p_skip_from / p_skip_generation, pairwise: a
-- mark whose generation moved since is new work); when there is none and
-- p_wrap, the first such mark from the start (the job's next pass). Then
-- exactly the claim above, which reads the mark's generation again for
-- itself. claim_from_pair and claim_generation say which mark was taken, as
-- read before the claim. claim_kind 'none': no such mark.
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
-- Commit (0023), the same steps and outcomes, plus marks_remain: whether the
-- conversation has any mark left after this commit, so a job whose last
-- range just completed stops without reading the marks again. (Return type
-- changed: dropped and created; callers select its columns by name.)
DROP FUNCTION sourcebound.commit_summary(uuid, bigint, text, text, text, text, text, jsonb, double precision, text[], text[]);
--> statement-breakpoint
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
      PERFORM graphile_worker.add_job('compact_conversation', json_build_object('conversationId', v_rec.conversation_id),
        run_at := v_rec.not_before, job_key := 'sourcebound:compact:' || v_rec.conversation_id::text, job_key_mode := 'preserve_run_at');
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
