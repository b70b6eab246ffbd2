-- Only the commit path makes a run summary authentic (System 2, issue 36).
--
-- Run compaction runs in the app's process, which until now settled summary
-- requests and inserted checkpoints with its own grants: a direct UPDATE could
-- set a request `ok` with any text and no grounding verdict, and a direct
-- INSERT could make it a checkpoint. From here, the app only inserts a
-- request as `dispatched`, naming its identity (no other runtime role writes
-- one); it is settled and its checkpoint written only by the functions below,
-- which run with their owner's rights and a fixed search_path:
--   run_summary_settle()    every outcome but an accepted answer; `ok` only
--                           for an answer that is refused (with its reason)
--                           and carries its grounding verdict;
--   run_checkpoint_commit() settles the request `ok` with its grounding
--                           verdict and inserts its checkpoint, in one call;
--                           what the checkpoint binds is taken from the
--                           request and the run's stored rows, not the caller;
--   run_summary_expire()    settles a run's requests whose lease ran out as
--                           `unknown`.
-- Each takes the scope; a request or run of another scope reads exactly like
-- one that does not exist. Whether an attempt is spent follows from its
-- outcome here, never from the caller.

-- The request of p_scope, locked; another scope's reads like a missing one.
CREATE FUNCTION sourcebound.run_summary_request_in_scope(p_scope text, p_request_id uuid)
RETURNS sourcebound.run_summary_requests
LANGUAGE plpgsql SET search_path = sourcebound, pg_temp AS $$
DECLARE
  v_req sourcebound.run_summary_requests;
BEGIN
  SELECT * INTO v_req FROM sourcebound.run_summary_requests WHERE id = p_request_id AND scope = p_scope FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'sourcebound: no summary request % in scope %', p_request_id, p_scope
      USING ERRCODE = 'no_data_found', CONSTRAINT = 'run_summary_request_in_scope';
  END IF;
  RETURN v_req;
END
$$;
--> statement-breakpoint
-- An `ok` settlement carries its answer and its grounding verdict (the facts
-- checked, and those not in the material: src/grounding/index.ts).
CREATE FUNCTION sourcebound.run_summary_ok_verdict(p_summary text, p_checked text[], p_ungrounded text[]) RETURNS void
LANGUAGE plpgsql IMMUTABLE SET search_path = sourcebound, pg_temp AS $$
BEGIN
  IF p_summary IS NULL OR p_checked IS NULL OR p_ungrounded IS NULL THEN
    RAISE EXCEPTION 'sourcebound: an ok summary request is settled with its answer and its grounding verdict'
      USING CONSTRAINT = 'run_summary_ok_verdict';
  END IF;
END
$$;
--> statement-breakpoint
-- Moves a settled request's reservation to the budget's used amounts.
CREATE FUNCTION sourcebound.run_budget_charge(p_run_id uuid, p_reserved_requests integer, p_reserved_tokens bigint,
  p_charged_requests integer, p_charged_tokens bigint) RETURNS void
LANGUAGE sql SET search_path = sourcebound, pg_temp AS $$
  UPDATE sourcebound.run_budgets b
  SET requests_reserved = b.requests_reserved - p_reserved_requests, tokens_reserved = b.tokens_reserved - p_reserved_tokens,
      requests_used = b.requests_used + p_charged_requests, tokens_used = b.tokens_used + p_charged_tokens, updated_at = now()
  WHERE b.run_id = p_run_id
$$;
--> statement-breakpoint
-- Settles a request still `dispatched`. False when it was already settled
-- (presumed lost after its lease by another preparer): nothing changes. `ok`
-- here is an answer that was refused (the net-benefit gate, a stale
-- candidate): it names its reason and carries its grounding verdict, and it
-- never becomes a checkpoint (run_checkpoint_commit() settles a request only
-- from `dispatched`).
CREATE FUNCTION sourcebound.run_summary_settle(
  p_scope text, p_request_id uuid, p_status text, p_reason text, p_summary text, p_answer_model text,
  p_provider_request_id text, p_usage jsonb, p_charged_requests integer, p_charged_tokens bigint,
  p_not_before timestamp with time zone, p_grounding_checked text[], p_grounding_ungrounded text[])
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = sourcebound, pg_temp AS $$
DECLARE
  v_req sourcebound.run_summary_requests := sourcebound.run_summary_request_in_scope(p_scope, p_request_id);
BEGIN
  IF p_status IS NULL OR p_status NOT IN ('ok', 'invalid', 'deferred', 'unknown', 'config') THEN
    RAISE EXCEPTION 'sourcebound: a summary request is settled as ok, invalid, deferred, unknown or config, not %', p_status
      USING CONSTRAINT = 'run_summary_outcome_unknown';
  END IF;
  IF p_status = 'ok' THEN
    PERFORM sourcebound.run_summary_ok_verdict(p_summary, p_grounding_checked, p_grounding_ungrounded);
    IF p_reason IS NULL THEN
      RAISE EXCEPTION 'sourcebound: an accepted answer is settled with its checkpoint (run_checkpoint_commit); settled alone, an ok names why it was refused'
        USING CONSTRAINT = 'run_summary_ok_refused_only';
    END IF;
  END IF;
  IF v_req.status <> 'dispatched' THEN
    RETURN false;
  END IF;
  UPDATE sourcebound.run_summary_requests
  SET status = p_status, spent = p_status IN ('ok', 'invalid', 'unknown'), reason = p_reason,
      summary = CASE WHEN p_status = 'ok' THEN p_summary END,
      answer_model = p_answer_model, provider_request_id = p_provider_request_id, usage = p_usage,
      charged_requests = p_charged_requests, charged_tokens = p_charged_tokens, not_before = p_not_before, settled_at = now(),
      grounding_checked = p_grounding_checked, grounding_ungrounded = p_grounding_ungrounded
  WHERE id = v_req.id;
  PERFORM sourcebound.run_budget_charge(v_req.run_id, v_req.reserved_requests, v_req.reserved_tokens, p_charged_requests, p_charged_tokens);
  RETURN true;
END
$$;
--> statement-breakpoint
-- Settles as `unknown` every request of the run still in flight after its
-- lease (p_now): the process that sent it is presumed lost. The reservation
-- is charged in full (the request may have been processed). A run of another
-- scope, like a missing one, has none.
CREATE FUNCTION sourcebound.run_summary_expire(p_scope text, p_run_id uuid, p_now timestamp with time zone)
RETURNS SETOF uuid
LANGUAGE sql SECURITY DEFINER SET search_path = sourcebound, pg_temp AS $$
  WITH e AS (
    UPDATE sourcebound.run_summary_requests
    SET status = 'unknown', spent = true, settled_at = now(),
        reason = 'lease_expired: unsettled after its deadline; the process that sent it was lost',
        charged_requests = reserved_requests, charged_tokens = reserved_tokens
    WHERE run_id = p_run_id AND scope = p_scope AND status = 'dispatched' AND lease_expires_at < p_now
    RETURNING id, reserved_requests, reserved_tokens
  ), b AS (
    UPDATE sourcebound.run_budgets b
    SET requests_reserved = b.requests_reserved - t.r, tokens_reserved = b.tokens_reserved - t.t,
        requests_used = b.requests_used + t.r, tokens_used = b.tokens_used + t.t, updated_at = now()
    FROM (SELECT sum(reserved_requests)::int AS r, sum(reserved_tokens)::bigint AS t FROM e) t
    WHERE b.run_id = p_run_id AND t.r IS NOT NULL
    RETURNING 1
  )
  SELECT id FROM e ORDER BY id
$$;
--> statement-breakpoint
-- The source hash of a run range from its work groups' hashes (version 1,
-- src/run/run-hash.ts sourceHashOf): SHA-256 of "sourcebound/run-source\0",
-- u32be(1), u32be(group count) and each group hash as a length-prefixed field.
CREATE FUNCTION sourcebound.run_source_hash_v1(p_group_hashes text[]) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE SET search_path = sourcebound, pg_temp AS $$
  SELECT encode(sha256(convert_to('sourcebound/run-source', 'UTF8') || '\x00'::bytea || int4send(1)
    || int4send(coalesce(cardinality(p_group_hashes), 0))
    || coalesce((SELECT string_agg(sourcebound.source_hash_v1_field(h), ''::bytea ORDER BY o)
                 FROM unnest(p_group_hashes) WITH ORDINALITY AS x(h, o)), ''::bytea)), 'hex')
$$;
--> statement-breakpoint
-- A request's identity key (the key its attempts are counted against, at
-- most two) is computed here from the request's own columns, as
-- src/run/run-hash.ts identityKeyOf does: SHA-256 of
-- "sourcebound/run-candidate\0", u32be(1) and, as length-prefixed fields, the
-- run id, predecessor id (or empty), from seq, to seq, source hash, model and
-- prompt version. A request under a made-up key would escape the bound.
CREATE FUNCTION sourcebound.run_summary_requests_identity() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = sourcebound, pg_temp AS $$
BEGIN
  IF NEW.identity_key IS DISTINCT FROM encode(sha256(convert_to('sourcebound/run-candidate', 'UTF8') || '\x00'::bytea || int4send(1)
       || sourcebound.source_hash_v1_field(NEW.run_id::text) || sourcebound.source_hash_v1_field(coalesce(NEW.predecessor_id::text, ''))
       || sourcebound.source_hash_v1_field(NEW.from_seq::text) || sourcebound.source_hash_v1_field(NEW.to_seq::text)
       || sourcebound.source_hash_v1_field(NEW.source_hash) || sourcebound.source_hash_v1_field(NEW.model)
       || sourcebound.source_hash_v1_field(NEW.prompt_version)), 'hex') THEN
    RAISE EXCEPTION 'sourcebound: summary request identity % is not the identity of its run, predecessor, range, source, model and prompt', NEW.identity_key
      USING CONSTRAINT = 'run_summary_request_identity_key';
  END IF;
  RETURN NEW;
END
$$;
--> statement-breakpoint
CREATE TRIGGER run_summary_requests_identity BEFORE INSERT ON sourcebound.run_summary_requests
  FOR EACH ROW EXECUTE FUNCTION sourcebound.run_summary_requests_identity();
--> statement-breakpoint
-- Settles the request `ok` with its answer and grounding verdict, and inserts
-- its checkpoint, in one call: no `ok` request is left for a checkpoint to be
-- made of later, and no checkpoint is made of anything but this answer. False
-- when the request was already settled (then nothing changes).
--
-- The checkpoint's run, conversation, scope, predecessor, range, compacted
-- turns, source hash, hash and prompt versions come from the request; its
-- segment from its predecessor; its tool result references from the run's
-- tool units of those turns. The caller gives what only it knows: the answer,
-- the work groups' hashes (their source hash must be the request's), the
-- correction revision it was made under (one of the run's) and the model route.
-- run_checkpoints_guard then checks the chain, the range against the run's
-- model turns and that every tool unit of them is settled; its refusals
-- (integrity_constraint_violation) undo the settlement too.
CREATE FUNCTION sourcebound.run_checkpoint_commit(
  p_scope text, p_request_id uuid, p_checkpoint_id uuid, p_summary text, p_answer_model text,
  p_provider_request_id text, p_usage jsonb, p_charged_requests integer, p_charged_tokens bigint,
  p_grounding_checked text[], p_grounding_ungrounded text[],
  p_source_hashes text[], p_correction_revision integer, p_model_route text)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = sourcebound, pg_temp AS $$
DECLARE
  v_req sourcebound.run_summary_requests := sourcebound.run_summary_request_in_scope(p_scope, p_request_id);
BEGIN
  PERFORM sourcebound.run_summary_ok_verdict(p_summary, p_grounding_checked, p_grounding_ungrounded);
  IF v_req.status <> 'dispatched' THEN
    RETURN false;
  END IF;
  IF v_req.hash_version <> 1 THEN
    RAISE EXCEPTION 'sourcebound: run source hash version % cannot be computed here', v_req.hash_version
      USING CONSTRAINT = 'run_source_hash_version_unknown';
  END IF;
  IF cardinality(p_source_hashes) IS DISTINCT FROM cardinality(v_req.compacted_seqs)
     OR sourcebound.run_source_hash_v1(p_source_hashes) <> v_req.source_hash THEN
    RAISE EXCEPTION 'sourcebound: the work groups'' hashes of summary request % are not its source', v_req.id
      USING CONSTRAINT = 'run_checkpoint_source_hashes';
  END IF;
  IF NOT EXISTS (SELECT 1 FROM sourcebound.run_turns
                 WHERE run_id = v_req.run_id AND revision = p_correction_revision) THEN
    RAISE EXCEPTION 'sourcebound: run % has no revision %', v_req.run_id, p_correction_revision
      USING CONSTRAINT = 'run_checkpoint_revision';
  END IF;

  UPDATE sourcebound.run_summary_requests
  SET status = 'ok', spent = true, reason = NULL, summary = p_summary, answer_model = p_answer_model,
      provider_request_id = p_provider_request_id, usage = p_usage,
      charged_requests = p_charged_requests, charged_tokens = p_charged_tokens, not_before = NULL, settled_at = now(),
      grounding_checked = p_grounding_checked, grounding_ungrounded = p_grounding_ungrounded
  WHERE id = v_req.id;
  PERFORM sourcebound.run_budget_charge(v_req.run_id, v_req.reserved_requests, v_req.reserved_tokens, p_charged_requests, p_charged_tokens);

  INSERT INTO sourcebound.run_checkpoints (
    id, run_id, conversation_id, scope, segment, predecessor_id, correction_revision, model_route, from_seq, to_seq,
    compacted_seqs, source_hashes, source_hash, hash_version, tool_result_refs, summary_request_id, summary_model,
    prompt_version, summary, summary_bytes)
  SELECT p_checkpoint_id, v_req.run_id, v_req.conversation_id, v_req.scope,
    coalesce((SELECT k.segment FROM sourcebound.run_checkpoints k WHERE k.id = v_req.predecessor_id), 0) + 1,
    v_req.predecessor_id, p_correction_revision, p_model_route, v_req.from_seq, v_req.to_seq, v_req.compacted_seqs,
    p_source_hashes, v_req.source_hash, v_req.hash_version,
    (SELECT coalesce(jsonb_agg(jsonb_build_object(
        'proposalId', u.proposal_id, 'tool', u.tool_name, 'settlement', u.status, 'dispatchId', u.dispatch_id,
        'resultId', u.result_id, 'version', u.result_version) ORDER BY u.turn_seq, u.position), '[]'::jsonb)
     FROM sourcebound.run_tool_units u WHERE u.run_id = v_req.run_id AND u.turn_seq = ANY (v_req.compacted_seqs)),
    v_req.id, p_answer_model, v_req.prompt_version, p_summary, octet_length(p_summary);
  RETURN true;
END
$$;
--> statement-breakpoint

-- The grants: as 0007's, except that System 2's summary requests and
-- checkpoints are no runtime role's to write. The app inserts a request as
-- `dispatched` (its identity columns only) and reads both tables; it settles
-- and commits through the functions above, which the worker and the reader
-- cannot call (neither writes runs).
CREATE OR REPLACE FUNCTION sourcebound.grant_runtime_roles() RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v_have text[] := ARRAY(SELECT rolname::text FROM pg_roles
                         WHERE rolname IN ('sourcebound_app', 'sourcebound_worker', 'sourcebound_reader'));
  v_fn text;
  v_role text;
  -- The functions that only read: the reader's, and (less the two that read whole ranges) the app's.
  v_reads text[] := ARRAY['projection_read(uuid,text,integer,integer,integer,integer,bigint)', 'projection_layout(uuid,text,integer)', 'projection_pair_count(uuid,text)',
        'projection_pairs_page(uuid,text,integer,integer,bigint)', 'projection_summaries(uuid,text,integer,integer)',
        'plannable_range_count(integer)', 'range_needs_work(uuid,integer)', 'ranges_needing_work(uuid)',
        'range_source(uuid,integer)', 'pairs_drift(uuid)', 'pair_of_run(uuid)', 'run_parent_alive(uuid)',
        'source_hash_v1(uuid[],text[],uuid[],text[])', 'source_hash_v1_field(text)', 'source_hash_v1_of(integer,bytea)',
        'source_hash_v1_pair(uuid,text,uuid,text)', 'current_scope()', 'in_current_scope(uuid)', 'run_in_current_scope(uuid)'];
  -- System 2's settle and commit path: the app's only.
  v_run_commit text[] := ARRAY[
        'run_summary_settle(text,uuid,text,text,text,text,text,jsonb,integer,bigint,timestamp with time zone,text[],text[])',
        'run_checkpoint_commit(text,uuid,uuid,text,text,text,jsonb,integer,bigint,text[],text[],text[],integer,text)',
        'run_summary_expire(text,uuid,timestamp with time zone)',
        'run_summary_request_in_scope(text,uuid)', 'run_summary_ok_verdict(text,text[],text[])',
        'run_budget_charge(uuid,integer,bigint,integer,bigint)'];
BEGIN
  -- What 0007 granted and no runtime role keeps: writing a summary request's
  -- settlement or a checkpoint (a role granted these by hand loses them too).
  -- Revoked first: revoking INSERT on the table revokes the app's column
  -- grant too, which is given again below.
  FOREACH v_role IN ARRAY v_have LOOP
    EXECUTE format('REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON sourcebound.run_checkpoints, sourcebound.run_summary_requests FROM %I', v_role);
  END LOOP;

  IF 'sourcebound_reader' = ANY (v_have) THEN
    GRANT USAGE ON SCHEMA sourcebound TO sourcebound_reader;
    GRANT SELECT ON ALL TABLES IN SCHEMA sourcebound TO sourcebound_reader;
    FOREACH v_fn IN ARRAY v_reads LOOP
      EXECUTE format('GRANT EXECUTE ON FUNCTION sourcebound.%s TO sourcebound_reader', v_fn);
    END LOOP;
  END IF;

  IF 'sourcebound_app' = ANY (v_have) THEN
    GRANT USAGE ON SCHEMA sourcebound TO sourcebound_app;
    GRANT SELECT, INSERT, UPDATE, DELETE ON sourcebound.conversations, sourcebound.runs, sourcebound.messages,
      sourcebound.projection_layouts, sourcebound.run_budgets, sourcebound.run_model_requests,
      sourcebound.run_results, sourcebound.run_tool_units, sourcebound.run_turns
      TO sourcebound_app;
    GRANT SELECT ON sourcebound.conversation_summaries, sourcebound.conversation_summary_attempts, sourcebound.pairs,
      sourcebound.eligible_pairs, sourcebound.run_checkpoints, sourcebound.run_summary_requests TO sourcebound_app;
    -- A request is written before its call, as `dispatched`: its identity, never its settlement.
    GRANT INSERT (run_id, conversation_id, scope, identity_key, attempt, predecessor_id, from_seq, to_seq, compacted_seqs,
      source_hash, hash_version, model, prompt_version, max_chars, input_bytes, reserved_requests, reserved_tokens,
      lease_expires_at) ON sourcebound.run_summary_requests TO sourcebound_app;
    GRANT USAGE ON ALL SEQUENCES IN SCHEMA sourcebound TO sourcebound_app;
    -- The reads, and enqueue by scope (range_source and pairs_drift read whole ranges: the reader's only).
    FOREACH v_fn IN ARRAY array_remove(array_remove(v_reads, 'range_source(uuid,integer)'), 'pairs_drift(uuid)') || 'enqueue_compaction(text,uuid)'::text LOOP
      EXECUTE format('GRANT EXECUTE ON FUNCTION sourcebound.%s TO sourcebound_app', v_fn);
    END LOOP;
    FOREACH v_fn IN ARRAY v_run_commit[1:3] LOOP
      EXECUTE format('GRANT EXECUTE ON FUNCTION sourcebound.%s TO sourcebound_app', v_fn);
    END LOOP;
  END IF;

  IF 'sourcebound_worker' = ANY (v_have) THEN
    GRANT USAGE ON SCHEMA sourcebound TO sourcebound_worker;
    GRANT SELECT ON ALL TABLES IN SCHEMA sourcebound TO sourcebound_worker;
    GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA sourcebound TO sourcebound_worker;
    REVOKE EXECUTE ON FUNCTION sourcebound.row_security(boolean), sourcebound.grant_runtime_roles() FROM sourcebound_worker;
    FOREACH v_fn IN ARRAY v_run_commit LOOP
      EXECUTE format('REVOKE EXECUTE ON FUNCTION sourcebound.%s FROM sourcebound_worker', v_fn);
    END LOOP;
    -- graphile-worker's queue: the worker runs jobs; graphile-worker's own
    -- migrations are the owner's (sourcebound migrate).
    IF EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'graphile_worker') THEN
      GRANT USAGE ON SCHEMA graphile_worker TO sourcebound_worker;
      GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA graphile_worker TO sourcebound_worker;
      GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA graphile_worker TO sourcebound_worker;
      GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA graphile_worker TO sourcebound_worker;
      -- graphile-worker turns row security on for its private tables (no
      -- policy: only their owner reaches them); the worker role is let in.
      FOR v_fn IN SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                  WHERE n.nspname = 'graphile_worker' AND c.relkind = 'r' AND c.relrowsecurity
                    AND NOT EXISTS (SELECT 1 FROM pg_policies p WHERE p.schemaname = 'graphile_worker'
                                    AND p.tablename = c.relname AND p.policyname = 'sourcebound_worker_all') LOOP
        EXECUTE format('CREATE POLICY sourcebound_worker_all ON graphile_worker.%I TO sourcebound_worker USING (true) WITH CHECK (true)', v_fn);
      END LOOP;
    END IF;
  END IF;

  -- With row security on, the worker and reader see every row.
  FOR v_fn IN SELECT sourcebound.row_security_tables() LOOP
    IF 'sourcebound_worker' = ANY (v_have) AND NOT EXISTS (SELECT 1 FROM pg_policies
         WHERE schemaname = 'sourcebound' AND tablename = v_fn AND policyname = 'worker_all') THEN
      EXECUTE format('CREATE POLICY worker_all ON sourcebound.%I TO sourcebound_worker USING (true)', v_fn);
    END IF;
    IF 'sourcebound_reader' = ANY (v_have) AND NOT EXISTS (SELECT 1 FROM pg_policies
         WHERE schemaname = 'sourcebound' AND tablename = v_fn AND policyname = 'reader_all') THEN
      EXECUTE format('CREATE POLICY reader_all ON sourcebound.%I TO sourcebound_reader USING (true)', v_fn);
    END IF;
  END LOOP;
END
$$;
--> statement-breakpoint
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA sourcebound FROM PUBLIC;
--> statement-breakpoint
SELECT sourcebound.grant_runtime_roles();
