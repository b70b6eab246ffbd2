-- Invariant: every plannable range without a completed or failed record that
-- binds its current source (ids and source hash) has a row in
-- sourcebound.compaction_marks (0022), written in the transaction of the
-- change that made it need work. A compaction job reads the marks and nothing
-- else to find work, and the sweep enqueues conversations whose marks have no
-- live job, so both cost what needs work, not the length of history. A mark is
-- removed only by a claim or commit that has just seen a completed or failed
-- record bind the range's source, and only if its generation did not move
-- since that look (an edit racing the removal keeps it).
--
-- The claim and the commit are one statement each (functions below), so a
-- range costs a few round trips, not thirteen. They compute the source hash
-- here: sourcebound.source_hash_v1() is the SQL twin of src/hash.ts (version
-- 1), tested for byte equality on the real data and on hostile text
-- (test/compaction/source-hash.test.ts). Why a twin and not SQL alone: the
-- projection re-checks every binding in the application, on texts it has read
-- anyway; and a mismatch between the two can only ever make a summary unusable
-- (never projected), not make a wrong one usable.

-- Source hash, version 1 (src/hash.ts): SHA-256 over
--   "sourcebound/conversation-source\0" || u32be(1) || u32be(pairs)
--   || for each pair: field(user id) field(user text) field(assistant id) field(assistant text)
-- with field(v) = u32be(octet length of its UTF-8) || its UTF-8, ids as lowercase canonical UUID text.
-- PostgreSQL text cannot hold NUL or lone surrogates (node-postgres sends a
-- lone surrogate as U+FFFD, as Buffer.from does in src/hash.ts), so the UTF-8
-- bytes here are the ones the application hashes.
-- PL/pgSQL, not SQL: a SQL function that cannot be inlined is planned again
-- on every call (PostgreSQL 15-17), eight times the cost of this loop.
CREATE FUNCTION sourcebound.source_hash_v1(p_user_ids uuid[], p_user_texts text[], p_assistant_ids uuid[], p_assistant_texts text[])
RETURNS text LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  v_bytes bytea := '\x736f75726365626f756e642f636f6e766572736174696f6e2d736f7572636500'::bytea
    || int4send(1) || int4send(coalesce(cardinality(p_user_ids), 0));
  v_text bytea;
  i integer;
BEGIN
  FOR i IN 1 .. coalesce(cardinality(p_user_ids), 0) LOOP
    v_text := convert_to(p_user_texts[i], 'UTF8');
    v_bytes := v_bytes || int4send(36) || convert_to(p_user_ids[i]::text, 'UTF8') || int4send(octet_length(v_text)) || v_text;
    v_text := convert_to(p_assistant_texts[i], 'UTF8');
    v_bytes := v_bytes || int4send(36) || convert_to(p_assistant_ids[i]::text, 'UTF8') || int4send(octet_length(v_text)) || v_text;
  END LOOP;
  RETURN encode(sha256(v_bytes), 'hex');
END
$$;
--> statement-breakpoint
-- The current source of range p_from_pair..p_from_pair+9, from the one
-- eligibility definition: how many of its pairs exist, its 20 message ids in
-- pair order, its hash, and the assistant replies the summarizer is given.
CREATE FUNCTION sourcebound.range_source(p_conversation_id uuid, p_from_pair integer)
RETURNS TABLE (pairs integer, source_message_ids uuid[], source_hash text, assistant_ids uuid[], assistant_texts text[], input_chars integer)
LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_user_ids uuid[];
  v_user_texts text[];
  i integer;
BEGIN
  -- The rows of sourcebound.eligible_pairs (0016), written so that the only
  -- way to a message is its primary key: the view's other conditions are
  -- the same, but as IS NOT DISTINCT FROM (the columns are NOT NULL, so it
  -- means =) they give the planner no path through messages_conversation_idx,
  -- which reads every message of the conversation (a plan it picked on stale
  -- statistics). test/compaction/source-hash.test.ts checks both agree.
  SELECT count(*)::int,
         array_agg(p.user_message_id ORDER BY p.pair_index), array_agg(u.content ORDER BY p.pair_index),
         array_agg(p.assistant_message_id ORDER BY p.pair_index), array_agg(a.content ORDER BY p.pair_index),
         coalesce(sum(char_length(a.content)), 0)::int
  INTO pairs, v_user_ids, v_user_texts, assistant_ids, assistant_texts, input_chars
  FROM sourcebound.pairs p
  JOIN sourcebound.messages u ON u.id = p.user_message_id
  JOIN sourcebound.messages a ON a.id = p.assistant_message_id
  WHERE p.conversation_id = p_conversation_id AND p.pair_index BETWEEN p_from_pair AND p_from_pair + 9
    AND u.run_id IS NOT DISTINCT FROM p.run_id AND u.conversation_id IS NOT DISTINCT FROM p.conversation_id AND u.role IS NOT DISTINCT FROM 'user'
    AND a.run_id IS NOT DISTINCT FROM p.run_id AND a.conversation_id IS NOT DISTINCT FROM p.conversation_id AND a.role IS NOT DISTINCT FROM 'assistant';
  source_message_ids := '{}';
  FOR i IN 1 .. coalesce(cardinality(v_user_ids), 0) LOOP
    source_message_ids := source_message_ids || v_user_ids[i] || assistant_ids[i];
  END LOOP;
  source_hash := sourcebound.source_hash_v1(v_user_ids, v_user_texts, assistant_ids, assistant_texts);
  RETURN NEXT;
END
$$;
--> statement-breakpoint
-- The definition the marks maintain (issue 11, item 5): a plannable range
-- needs work unless a completed or failed record binds its current source.
-- Reads and hashes the range, so it is for audits, tests and the backfill
-- below, not for every sweep (which reads the marks).
CREATE OR REPLACE FUNCTION sourcebound.range_needs_work(p_conversation_id uuid, p_from_pair integer)
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
-- Every plannable range of a conversation that needs work by the definition
-- above (the audit: tests check it is always covered by the marks).
CREATE FUNCTION sourcebound.ranges_needing_work(p_conversation_id uuid)
RETURNS SETOF integer LANGUAGE sql STABLE AS $$
  SELECT 10 * k
  FROM generate_series(0, sourcebound.plannable_range_count(
         (SELECT coalesce(max(pair_index) + 1, 0)::int FROM sourcebound.pairs WHERE conversation_id = p_conversation_id)) - 1) k
  WHERE sourcebound.range_needs_work(p_conversation_id, 10 * k)
$$;
--> statement-breakpoint
-- Called by the pair maintenance (refresh_pair) after it changed a
-- conversation's pairs. p_changed_at..p_changed_to are the pair indexes whose
-- pair was added, removed or edited (p_changed_at null: none; p_changed_to
-- null: every pair from p_changed_at on may have moved). Marks every plannable
-- range gained or touched, in this transaction, and enqueues the conversation
-- when it marked any; drops marks of ranges that are no longer plannable.
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
    -- fresh job costs one insert (0021).
    PERFORM sourcebound.enqueue_compaction(p_conversation_id);
  END IF;
END
$$;
--> statement-breakpoint
-- The four-argument form (0002) stays for callers that only know where a
-- change starts: every later pair may have moved.
CREATE OR REPLACE FUNCTION sourcebound.pairs_changed(p_conversation_id uuid, p_old_count integer, p_new_count integer, p_changed_at integer)
RETURNS void LANGUAGE sql AS $$
  SELECT sourcebound.pairs_changed(p_conversation_id, p_old_count, p_new_count, p_changed_at, NULL::integer)
$$;
--> statement-breakpoint
-- refresh_pair as in 0019, except that a change of one pair in place (a text
-- edit, a message id change) reports that one pair, and a move within the
-- conversation the span it shifted, so only those ranges are marked (the
-- four-argument calls mean "from here on").
CREATE OR REPLACE FUNCTION sourcebound.refresh_pair(p_conversation_id uuid, p_run_id uuid, p_content_changed boolean)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  v_locked uuid[] := ARRAY[p_conversation_id];
  v_run_conversation uuid;
  v_run_status text;
  v_cur_conversation uuid;
  v_cur_index integer;
  v_cur_seq bigint;
  v_cur_user uuid;
  v_cur_assistant uuid;
  v_new_conversation uuid;
  v_new_seq bigint;
  v_new_user uuid;
  v_new_assistant uuid;
  v_count integer;
  v_index integer;
  v_same_place boolean;
  v_new_count integer;
  v_new_index integer;
BEGIN
  PERFORM pg_advisory_xact_lock(74201, hashtext(p_conversation_id::text));

  LOOP
    -- One read: the run, its pair as indexed, and its pair as defined.
    SELECT r.conversation_id, r.status,
           p.conversation_id, p.pair_index, p.run_seq, p.user_message_id, p.assistant_message_id,
           d.conversation_id, d.run_seq, d.user_message_id, d.assistant_message_id,
           -- Where a new pair would go (before the first pair with a later run, else at the end).
           (SELECT coalesce(max(x.pair_index) + 1, 0) FROM sourcebound.pairs x WHERE x.conversation_id = d.conversation_id),
           (SELECT x.pair_index FROM sourcebound.pairs x WHERE x.conversation_id = d.conversation_id AND x.run_seq > d.run_seq
            ORDER BY x.run_seq LIMIT 1)
    INTO v_run_conversation, v_run_status,
         v_cur_conversation, v_cur_index, v_cur_seq, v_cur_user, v_cur_assistant,
         v_new_conversation, v_new_seq, v_new_user, v_new_assistant,
         v_new_count, v_new_index
    FROM (SELECT p_run_id AS id) k
    LEFT JOIN sourcebound.runs r ON r.id = k.id
    LEFT JOIN sourcebound.pairs p ON p.run_id = k.id
    LEFT JOIN LATERAL sourcebound.pair_of_run(k.id) d ON true;

    -- Not indexed and not a pair: nothing to do (a run in progress, the common case).
    IF v_cur_conversation IS NULL AND v_new_conversation IS NULL THEN
      RETURN;
    END IF;
    -- Everything involved is under our locks: go on. Otherwise (a move under
    -- way whose own trigger has not run yet, or an index that drifted) take
    -- the other conversations' locks too and read again.
    EXIT WHEN (v_cur_conversation IS NULL OR v_cur_conversation = ANY (v_locked))
          AND (v_new_conversation IS NULL OR v_new_conversation = ANY (v_locked));
    PERFORM sourcebound.pairs_lock(v_cur_conversation, v_new_conversation);
    v_locked := v_locked || v_cur_conversation || v_new_conversation;
  END LOOP;

  v_same_place := v_cur_conversation IS NOT NULL AND v_new_conversation IS NOT NULL
    AND v_cur_conversation = v_new_conversation AND v_cur_seq = v_new_seq;

  IF v_same_place THEN
    IF v_cur_user = v_new_user AND v_cur_assistant = v_new_assistant THEN
      -- Same pair; only its text may have changed.
      IF NOT p_content_changed THEN
        RETURN;
      END IF;
    ELSE
      -- A message id changed (0015): same place, new identity.
      UPDATE sourcebound.pairs SET user_message_id = v_new_user, assistant_message_id = v_new_assistant
      WHERE run_id = p_run_id;
    END IF;
    SELECT coalesce(max(pair_index) + 1, 0) INTO v_count FROM sourcebound.pairs WHERE conversation_id = v_cur_conversation;
    -- One pair changed in place: only its range.
    PERFORM sourcebound.pairs_changed(v_cur_conversation, v_count, v_count, v_cur_index, v_cur_index);
    RETURN;
  END IF;

  IF v_cur_conversation IS NOT NULL THEN
    IF NOT EXISTS (SELECT 1 FROM sourcebound.conversations WHERE id = v_cur_conversation) THEN
      -- A conversation being deleted takes its pairs with it by cascade: no
      -- shifting (quadratic) and nothing to report.
      DELETE FROM sourcebound.pairs WHERE run_id = p_run_id;
    ELSE
      SELECT coalesce(max(pair_index) + 1, 0) INTO v_count FROM sourcebound.pairs WHERE conversation_id = v_cur_conversation;
      DELETE FROM sourcebound.pairs WHERE run_id = p_run_id;
      UPDATE sourcebound.pairs SET pair_index = pair_index - 1
      WHERE conversation_id = v_cur_conversation AND pair_index > v_cur_index;
      IF v_new_conversation IS DISTINCT FROM v_cur_conversation THEN
        PERFORM sourcebound.pairs_changed(v_cur_conversation, v_count, v_count - 1, v_cur_index);
      END IF;
    END IF;
  END IF;

  IF v_new_conversation IS NOT NULL THEN
    IF v_new_conversation IS NOT DISTINCT FROM v_cur_conversation THEN
      -- It moved within the conversation (a new seq): its place is read again after the removal.
      SELECT (SELECT coalesce(max(pair_index) + 1, 0) FROM sourcebound.pairs WHERE conversation_id = v_new_conversation),
             (SELECT pair_index FROM sourcebound.pairs WHERE conversation_id = v_new_conversation AND run_seq > v_new_seq
              ORDER BY run_seq LIMIT 1)
      INTO v_count, v_index;
    ELSE
      -- Usually the newest run: it goes at the end and nothing shifts.
      v_count := v_new_count;
      v_index := v_new_index;
    END IF;
    IF v_index IS NULL THEN
      v_index := v_count;
    ELSE
      UPDATE sourcebound.pairs SET pair_index = pair_index + 1
      WHERE conversation_id = v_new_conversation AND pair_index >= v_index;
    END IF;
    INSERT INTO sourcebound.pairs (run_id, conversation_id, run_seq, pair_index, user_message_id, assistant_message_id)
    VALUES (p_run_id, v_new_conversation, v_new_seq, v_index, v_new_user, v_new_assistant);
    IF v_new_conversation IS NOT DISTINCT FROM v_cur_conversation THEN
      -- Moved within the conversation (a new seq): the count is unchanged.
      -- Only the pairs between its old and its new place shifted.
      PERFORM sourcebound.pairs_changed(v_new_conversation, v_count + 1, v_count + 1, least(v_cur_index, v_index), greatest(v_cur_index, v_index));
    ELSE
      PERFORM sourcebound.pairs_changed(v_new_conversation, v_count, v_count + 1, v_index);
    END IF;
  END IF;
END
$$;
--> statement-breakpoint
-- Removes a range's mark if its generation is still the one read before the
-- source was looked at (an edit since then moved it: the mark stays).
CREATE FUNCTION sourcebound.compaction_mark_clear(p_conversation_id uuid, p_from_pair integer, p_generation bigint)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM sourcebound.compaction_marks
  WHERE conversation_id = p_conversation_id AND from_pair = p_from_pair AND generation = p_generation;
END
$$;
--> statement-breakpoint
-- Claim (DESIGN.md "Job identity and claim"), one statement: under the
-- range's advisory lock (namespace 74202, src/db/locks.ts), read the range's
-- source from the eligibility definition, hash it, and insert or take over
-- the record of that identity under a lease, opening its next attempt. The
-- unique constraint on the identity stays the final arbiter.
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
  -- Read before the source: an edit committed after this read moves the
  -- generation, so clearing the mark below fails and the range is visited again.
  SELECT generation INTO v_generation FROM sourcebound.compaction_marks
  WHERE conversation_id = p_conversation_id AND from_pair = p_from_pair;

  SELECT scope INTO v_scope FROM sourcebound.conversations WHERE id = p_conversation_id;
  IF NOT FOUND THEN
    claim_kind := 'gone';
    RETURN NEXT;
    RETURN;
  END IF;
  SELECT coalesce(max(pair_index) + 1, 0) INTO v_count FROM sourcebound.pairs WHERE conversation_id = p_conversation_id;
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
-- Commit (DESIGN.md "Attempts, failure, immutability"), one statement: the
-- lease and the attempt must still be ours; an `ok` summary completes only if
-- the range's source, read again now, still hashes to the record's; a
-- dispatched call whose source changed is stale and has spent its attempt.
-- p_outcome: ok | invalid | unknown | deferred | config. The grounding check
-- (src/grounding.ts, made in TypeScript before this call) is stored with the
-- attempt of an ok, stale or invalid outcome (0020).
-- commit_kind: completed | stale | spent | deferred | config | lease_lost.
CREATE FUNCTION sourcebound.commit_summary(
  p_summary_id uuid, p_attempt_id bigint, p_worker_id text, p_outcome text,
  p_summary text, p_reason text, p_request_id text, p_usage jsonb, p_not_before_ms double precision,
  p_grounding_checked text[], p_grounding_ungrounded text[])
RETURNS TABLE (commit_kind text, rec sourcebound.conversation_summaries)
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
  RETURN NEXT;
END
$$;
--> statement-breakpoint
-- Invariant (0005, kept): a lost compaction job is repaired, not permanent.
-- The sweep reads only the marks: it enqueues each marked conversation that
-- has no fresh job waiting under its key (see compaction_enqueue_if_lost), in
-- conversation order from where the last run stopped, so more than p_limit of
-- them are all reached over a few runs.
-- graphile_worker._private_jobs is read for its `key` only (unique index).
-- A job waiting under the conversation's key that never failed (not locked,
-- no attempt made: new, or scheduled by us for a deferral or retry) will run
-- when it should: nothing is lost. Anything else is enqueued again, as 0005
-- did: a job that failed (its retry backoff grows to hours) is reset to run
-- now; a locked one proves nothing (a SIGKILLed worker's job stays locked for
-- hours), so add_job starts a new job beside it, which, if the holder is
-- alive, finds the range busy and only watches its lease.
CREATE FUNCTION sourcebound.compaction_enqueue_if_lost(p_conversation_id uuid)
RETURNS integer LANGUAGE plpgsql AS $$
BEGIN
  IF EXISTS (
    SELECT 1 FROM graphile_worker._private_jobs j
    WHERE j.key = 'sourcebound:compact:' || p_conversation_id::text
      AND j.locked_at IS NULL AND j.attempts = 0) THEN
    RETURN 0;
  END IF;
  PERFORM sourcebound.enqueue_compaction(p_conversation_id);
  RETURN 1;
END
$$;
--> statement-breakpoint
CREATE OR REPLACE FUNCTION sourcebound.sweep_compaction(p_limit integer DEFAULT 1000)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  v_after uuid;
  v_conversation uuid;
  v_last uuid;
  v_count integer := 0;
  v_seen integer := 0;
BEGIN
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
$$;
--> statement-breakpoint
-- Backfill: the ranges that need work now get their marks, by the definition
-- above; the sweep enqueues their conversations.
INSERT INTO sourcebound.compaction_marks (conversation_id, from_pair)
SELECT c.conversation_id, w.from_pair
FROM (SELECT DISTINCT conversation_id FROM sourcebound.pairs) c
CROSS JOIN LATERAL sourcebound.ranges_needing_work(c.conversation_id) AS w(from_pair)
ON CONFLICT DO NOTHING;
