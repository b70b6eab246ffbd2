-- Trust boundaries the database enforces, whoever writes.
--
-- Roles. Three group roles (NOLOGIN) carry every runtime privilege; a login
-- role gets one by membership (GRANT sourcebound_app TO my_app). The role that
-- migrates owns every object and is never a runtime role:
--   sourcebound_app     writes conversations, runs and messages (and System 2's
--                       run records), reads the projection, enqueues work;
--   sourcebound_worker  claims, commits and sweeps ranges, runs graphile-worker;
--   sourcebound_reader  reads everything (inspect), writes nothing.
-- Derived and private tables (pairs, compaction marks, summaries, attempts,
-- graphile-worker's queue) are written only by functions that run with their
-- owner's rights (SECURITY DEFINER, fixed search_path), so no runtime role
-- needs a grant on them.
--
-- Roles are cluster-wide; creating them needs CREATEROLE. Where the migrating
-- role lacks it, the roles are skipped with a notice and
-- sourcebound.grant_runtime_roles() can be run once they exist.

DO $$
DECLARE
  v_role text;
BEGIN
  FOREACH v_role IN ARRAY ARRAY['sourcebound_app', 'sourcebound_worker', 'sourcebound_reader'] LOOP
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = v_role) THEN
      BEGIN
        EXECUTE format('CREATE ROLE %I NOLOGIN', v_role);
      EXCEPTION
        WHEN duplicate_object THEN NULL; -- another database's migration made it first
        WHEN insufficient_privilege THEN
          RAISE NOTICE 'sourcebound: cannot create role % (needs CREATEROLE); create it and run select sourcebound.grant_runtime_roles()', v_role;
      END;
    END IF;
  END LOOP;
END
$$;
--> statement-breakpoint

-- Functions are executable by PUBLIC unless revoked: none of ours is.
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA sourcebound FROM PUBLIC;
--> statement-breakpoint

-- Functions that write derived or private tables run as their owner, with a
-- search_path no caller can change (a caller's schema cannot shadow ours).
DO $$
DECLARE
  v_fn regprocedure;
BEGIN
  FOR v_fn IN
    SELECT p.oid::regprocedure FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
    WHERE n.nspname = 'sourcebound' AND p.proname = ANY (ARRAY[
      -- triggers
      'conversation_summaries_guard', 'conversation_summary_attempts_guard', 'messages_note_edit',
      'messages_refresh_pair', 'runs_refresh_pair', 'pair_write_refused', 'pairs_truncated', 'refuse_truncate',
      'run_checkpoints_guard', 'run_model_requests_guard', 'run_results_guard', 'run_summary_requests_guard',
      'run_tool_units_guard', 'run_turns_guard',
      -- the pair index and the compaction queue
      'refresh_pair', 'pairs_lock', 'pairs_rebuild',
      'compaction_enqueue_if_lost', 'compaction_job_at', 'compaction_mark_clear',
      'enqueue_compaction',
      -- the claim and commit path
      'claim_range', 'commit_summary', 'sweep_compaction',
      -- the projection's reads: they filter by the scope they are given
      -- (row security, when on, would hide the rows from an app role whose
      -- transaction names no scope)
      'projection_read', 'projection_layout', 'projection_pair_count', 'projection_pairs_page', 'projection_summaries'])
  LOOP
    EXECUTE format('ALTER FUNCTION %s SECURITY DEFINER SET search_path = sourcebound, pg_temp', v_fn);
  END LOOP;
END
$$;
--> statement-breakpoint

-- Tenants: a conversation's scope is fixed once written, and nothing moves
-- between conversations of different scopes.
CREATE FUNCTION sourcebound.scope_fixed() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = sourcebound, pg_temp AS $$
BEGIN
  IF TG_TABLE_NAME = 'conversations' THEN
    RAISE EXCEPTION 'sourcebound: the scope and id of a conversation are fixed once written'
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'conversation_scope_fixed';
  END IF;
  IF (SELECT scope FROM sourcebound.conversations WHERE id = OLD.conversation_id)
     IS DISTINCT FROM (SELECT scope FROM sourcebound.conversations WHERE id = NEW.conversation_id) THEN
    RAISE EXCEPTION 'sourcebound: a % row cannot move to a conversation of another scope', TG_TABLE_NAME
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'conversation_scope_fixed';
  END IF;
  RETURN NEW;
END
$$;
--> statement-breakpoint
CREATE TRIGGER conversations_scope_fixed BEFORE UPDATE OF id, scope ON sourcebound.conversations
  FOR EACH ROW WHEN (NEW.scope IS DISTINCT FROM OLD.scope OR NEW.id IS DISTINCT FROM OLD.id)
  EXECUTE FUNCTION sourcebound.scope_fixed();
--> statement-breakpoint
CREATE TRIGGER runs_scope_fixed BEFORE UPDATE OF conversation_id ON sourcebound.runs
  FOR EACH ROW WHEN (NEW.conversation_id IS DISTINCT FROM OLD.conversation_id)
  EXECUTE FUNCTION sourcebound.scope_fixed();
--> statement-breakpoint
CREATE TRIGGER messages_scope_fixed BEFORE UPDATE OF conversation_id ON sourcebound.messages
  FOR EACH ROW WHEN (NEW.conversation_id IS DISTINCT FROM OLD.conversation_id)
  EXECUTE FUNCTION sourcebound.scope_fixed();
--> statement-breakpoint

-- Only the commit path makes a summary authentic: no runtime role may write
-- conversation_summaries or their attempts (grants below); claim_range() and
-- commit_summary() write them with their owner's rights, and commit_summary()
-- completes a summary only after its ok attempt, with its grounding verdict,
-- is recorded. The owner (the migrating role) can write anything: it is never
-- a runtime role.

-- Limits: a message's content is at most sourcebound.max_message_bytes bytes
-- of UTF-8 (default 1 MiB, at least 64 KiB), set per database or role by the
-- owner (ALTER DATABASE ... SET sourcebound.max_message_bytes = '4194304').
-- The WHEN clause lets every message under 64 KiB through without a function
-- call. It guards against mistakes (a pasted dump, a runaway tool output); a
-- session that sends raw SQL can raise its own setting.
CREATE FUNCTION sourcebound.message_size_limit() RETURNS trigger
LANGUAGE plpgsql SET search_path = sourcebound, pg_temp AS $$
DECLARE
  v_limit bigint := greatest(65536, coalesce(nullif(current_setting('sourcebound.max_message_bytes', true), '')::bigint, 1048576));
  v_bytes bigint := octet_length(NEW.content);
BEGIN
  IF v_bytes > v_limit THEN
    RAISE EXCEPTION 'sourcebound: % message of % bytes is over the limit of % bytes (sourcebound.max_message_bytes)',
      CASE NEW.role WHEN 'assistant' THEN 'an assistant' ELSE 'a ' || NEW.role END, v_bytes, v_limit
      USING ERRCODE = 'program_limit_exceeded', CONSTRAINT = 'message_size_limit';
  END IF;
  RETURN NEW;
END
$$;
--> statement-breakpoint
CREATE TRIGGER messages_size_limit BEFORE INSERT OR UPDATE OF content ON sourcebound.messages
  FOR EACH ROW WHEN (octet_length(NEW.content) > 65536)
  EXECUTE FUNCTION sourcebound.message_size_limit();
--> statement-breakpoint

-- Every SQL entry point an app calls names the conversation's scope. A
-- conversation of another scope and one that does not exist get the same
-- answer: no error confirms another tenant's ids.
CREATE FUNCTION sourcebound.enqueue_compaction(p_scope text, p_conversation_id uuid) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = sourcebound, pg_temp AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM sourcebound.conversations WHERE id = p_conversation_id AND scope = p_scope) THEN
    RAISE EXCEPTION 'sourcebound: no conversation % in scope %', p_conversation_id, p_scope
      USING ERRCODE = 'no_data_found', CONSTRAINT = 'conversation_in_scope';
  END IF;
  PERFORM sourcebound.enqueue_compaction(p_conversation_id);
END
$$;
--> statement-breakpoint
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA sourcebound FROM PUBLIC;
--> statement-breakpoint

-- Row-level security, optional: off by default; `select
-- sourcebound.row_security(true)` (as the owner) turns it on. Then the app
-- role sees and writes only the rows of the scope its transaction names:
--   select set_config('sourcebound.scope', 'tenant-a', true);
-- The worker and reader roles see every row. Functions that take a scope set
-- it themselves for their own statement.
CREATE FUNCTION sourcebound.current_scope() RETURNS text
LANGUAGE sql STABLE AS $$ SELECT nullif(current_setting('sourcebound.scope', true), '') $$;
--> statement-breakpoint
-- A row of a conversation (or a run) is in the session's scope when its
-- conversation's scope is the session's: a PL/pgSQL function called per row,
-- because a policy runs in every write of every turn and the function's plan
-- is kept for the session. The alternatives cost a turn's writes more: a
-- scalar subquery in the policy is planned again in each statement (4x); so is
-- a SQL function, and SECURITY DEFINER with SET adds a configuration change a
-- call (5x, and twice the cost a row read). A long read would be cheaper
-- through the subquery (a quarter of the cost a row); every turn writes. Not
-- EXISTS or IN: the planner may hash every conversation of the scope instead,
-- in each statement, whatever rows it reads (0.4 s for one conversation's
-- messages among 350,000 conversations). The functions run with the caller's
-- rights (no SECURITY DEFINER, no SET: a session that shadows an operator
-- misleads only its own reads, and it holds the app's credentials anyway),
-- under conversations' own policy. Tables that carry the scope (bound to their
-- conversation's by foreign key) compare their own column.
CREATE FUNCTION sourcebound.in_current_scope(p_conversation_id uuid) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN (SELECT c.scope = sourcebound.current_scope() FROM sourcebound.conversations c WHERE c.id = p_conversation_id);
END
$$;
--> statement-breakpoint
CREATE FUNCTION sourcebound.run_in_current_scope(p_run_id uuid) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN (SELECT c.scope = sourcebound.current_scope()
          FROM sourcebound.runs r JOIN sourcebound.conversations c ON c.id = r.conversation_id WHERE r.id = p_run_id);
END
$$;
--> statement-breakpoint
DO $$
DECLARE
  v_table text;
BEGIN
  FOREACH v_table IN ARRAY ARRAY['conversations', 'run_checkpoints', 'run_summary_requests'] LOOP
    EXECUTE format('CREATE POLICY app_scope ON sourcebound.%I TO PUBLIC USING (scope = sourcebound.current_scope()) WITH CHECK (scope = sourcebound.current_scope())', v_table);
  END LOOP;
  CREATE POLICY app_scope ON sourcebound.conversation_summaries TO PUBLIC
    USING (scope = sourcebound.current_scope());
  -- Read only (the app writes no attempt): a scalar subquery, never hashed.
  CREATE POLICY app_scope ON sourcebound.conversation_summary_attempts TO PUBLIC
    USING ((SELECT s.scope = sourcebound.current_scope() FROM sourcebound.conversation_summaries s WHERE s.id = summary_id));
  FOREACH v_table IN ARRAY ARRAY['runs', 'messages', 'pairs', 'projection_layouts'] LOOP
    EXECUTE format('CREATE POLICY app_scope ON sourcebound.%I TO PUBLIC USING (sourcebound.in_current_scope(conversation_id)) WITH CHECK (sourcebound.in_current_scope(conversation_id))', v_table);
  END LOOP;
  FOREACH v_table IN ARRAY ARRAY['run_budgets', 'run_model_requests', 'run_results', 'run_tool_units', 'run_turns'] LOOP
    EXECUTE format('CREATE POLICY app_scope ON sourcebound.%I TO PUBLIC USING (sourcebound.run_in_current_scope(run_id)) WITH CHECK (sourcebound.run_in_current_scope(run_id))', v_table);
  END LOOP;
END
$$;
--> statement-breakpoint
CREATE FUNCTION sourcebound.row_security_tables() RETURNS SETOF text
LANGUAGE sql IMMUTABLE AS $$
  SELECT unnest(ARRAY['conversations', 'conversation_summaries', 'conversation_summary_attempts', 'runs', 'messages', 'pairs', 'projection_layouts',
                      'run_budgets', 'run_checkpoints', 'run_model_requests', 'run_results', 'run_summary_requests',
                      'run_tool_units', 'run_turns'])
$$;
--> statement-breakpoint
CREATE FUNCTION sourcebound.row_security(p_on boolean) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v_table text;
BEGIN
  FOR v_table IN SELECT sourcebound.row_security_tables() LOOP
    EXECUTE format('ALTER TABLE sourcebound.%I %s ROW LEVEL SECURITY', v_table, CASE WHEN p_on THEN 'ENABLE' ELSE 'DISABLE' END);
  END LOOP;
END
$$;
--> statement-breakpoint
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA sourcebound FROM PUBLIC;
--> statement-breakpoint

-- The grants. Rerunnable: the migration calls it, and so can an operator
-- once the roles exist (managed PostgreSQL without CREATEROLE for the
-- migrating role).
CREATE FUNCTION sourcebound.grant_runtime_roles() RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v_have text[] := ARRAY(SELECT rolname::text FROM pg_roles
                         WHERE rolname IN ('sourcebound_app', 'sourcebound_worker', 'sourcebound_reader'));
  v_fn text;
  -- The functions that only read: the reader's, and (less the two that read whole ranges) the app's.
  v_reads text[] := ARRAY['projection_read(uuid,text,integer,integer,integer,integer,bigint)', 'projection_layout(uuid,text,integer)', 'projection_pair_count(uuid,text)',
        'projection_pairs_page(uuid,text,integer,integer,bigint)', 'projection_summaries(uuid,text,integer,integer)',
        'plannable_range_count(integer)', 'range_needs_work(uuid,integer)', 'ranges_needing_work(uuid)',
        'range_source(uuid,integer)', 'pairs_drift(uuid)', 'pair_of_run(uuid)', 'run_parent_alive(uuid)',
        'source_hash_v1(uuid[],text[],uuid[],text[])', 'source_hash_v1_field(text)', 'source_hash_v1_of(integer,bytea)',
        'source_hash_v1_pair(uuid,text,uuid,text)', 'current_scope()', 'in_current_scope(uuid)', 'run_in_current_scope(uuid)'];
BEGIN
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
      sourcebound.projection_layouts, sourcebound.run_budgets, sourcebound.run_checkpoints, sourcebound.run_model_requests,
      sourcebound.run_results, sourcebound.run_summary_requests, sourcebound.run_tool_units, sourcebound.run_turns
      TO sourcebound_app;
    GRANT SELECT ON sourcebound.conversation_summaries, sourcebound.conversation_summary_attempts, sourcebound.pairs,
      sourcebound.eligible_pairs TO sourcebound_app;
    GRANT USAGE ON ALL SEQUENCES IN SCHEMA sourcebound TO sourcebound_app;
    -- The reads, and enqueue by scope (range_source and pairs_drift read whole ranges: the reader's only).
    FOREACH v_fn IN ARRAY array_remove(array_remove(v_reads, 'range_source(uuid,integer)'), 'pairs_drift(uuid)') || 'enqueue_compaction(text,uuid)'::text LOOP
      EXECUTE format('GRANT EXECUTE ON FUNCTION sourcebound.%s TO sourcebound_app', v_fn);
    END LOOP;
  END IF;

  IF 'sourcebound_worker' = ANY (v_have) THEN
    GRANT USAGE ON SCHEMA sourcebound TO sourcebound_worker;
    GRANT SELECT ON ALL TABLES IN SCHEMA sourcebound TO sourcebound_worker;
    GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA sourcebound TO sourcebound_worker;
    REVOKE EXECUTE ON FUNCTION sourcebound.row_security(boolean), sourcebound.grant_runtime_roles() FROM sourcebound_worker;
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
