-- Invariant: unchanged from 0016/0023 (sourcebound.pairs holds exactly what
-- sourcebound.pair_of_run() defines, under every change, each change reported
-- to pairs_changed() with the pairs it touched; the lock protocol of 0003).
-- This migration only makes the application's write path cheaper (bench P1,
-- issue 14). Measured with callgrind on one pair transaction (run running,
-- user message, assistant streaming, assistant completed, run completed):
-- the triggers cost 1.16M instructions over 1.11M without them, and most of
-- it was not the work but its setup, paid by every statement:
--   - a WHEN clause is read back from its stored node text and planned once
--     per statement (TriggerEnabled, about 30 instructions per character):
--     the three WHEN clauses of 0016 (1,878 + 3,772 + 3,450 characters, the
--     whitespace regex and the status arrays) cost about 480K a pair, more
--     than the trigger bodies. They are now a few comparisons; what they
--     filtered is decided in the functions, after the cheap cases;
--   - each PL/pgSQL call costs about 50K before its first statement: the
--     run's completion no longer calls refresh_pair() and pairs_changed()
--     below a crossing, it appends the pair itself in one statement.
-- After: 0.73M over the same 1.11M (bench/README.md, P1).
--
-- Why a user message insert still enters PL/pgSQL once (and the assistant's
-- completion once): whether it can complete a pair depends on its run's
-- status, another row, which no WHEN clause can read (a SQL function in the
-- WHEN clause was measured: planned per statement, dearer than the trigger).
-- The trigger reads it under the conversation's lock (0019) and returns.

-- The run side. A status change that keeps the run eligible (or not) changes
-- nothing. The common change, a run becoming eligible as the newest run of
-- its conversation with no pair yet, appends its pair at the end in one
-- statement (the definition, the place and the insert) and reports to
-- pairs_changed() only when that append crosses to a new plannable range
-- (an appended pair is always in the raw tail, never inside a planned range).
-- Everything else (a pair that exists, a later run already paired, a move,
-- an id or seq change, a run leaving eligibility, a delete) takes the general
-- path of 0016/0023, unchanged.
CREATE OR REPLACE FUNCTION sourcebound.runs_refresh_pair() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v_index integer;
BEGIN
  IF TG_OP = 'UPDATE' AND NEW.id = OLD.id AND NEW.conversation_id = OLD.conversation_id AND NEW.seq = OLD.seq THEN
    IF (OLD.status IN ('completed', 'partial', 'clarify_pending')) = (NEW.status IN ('completed', 'partial', 'clarify_pending')) THEN
      RETURN NULL;
    END IF;
    IF NEW.status IN ('completed', 'partial', 'clarify_pending') THEN
      -- The lock comes before the definition is read (0003).
      PERFORM pg_advisory_xact_lock(74201, hashtext(NEW.conversation_id::text));
      -- Pair indexes are dense and in run order, so the pair with the highest
      -- index is the one with the latest run: if it is older than this run,
      -- this pair goes right after it and nothing shifts.
      INSERT INTO sourcebound.pairs (run_id, conversation_id, run_seq, pair_index, user_message_id, assistant_message_id)
      SELECT d.run_id, d.conversation_id, d.run_seq, coalesce(last.pair_index + 1, 0), d.user_message_id, d.assistant_message_id
      FROM sourcebound.pair_of_run(NEW.id) d
      LEFT JOIN LATERAL (
        SELECT x.pair_index, x.run_seq FROM sourcebound.pairs x
        WHERE x.conversation_id = d.conversation_id ORDER BY x.pair_index DESC LIMIT 1
      ) last ON true
      WHERE (last.run_seq IS NULL OR last.run_seq < d.run_seq)
        AND NOT EXISTS (SELECT 1 FROM sourcebound.pairs x WHERE x.run_id = d.run_id)
      RETURNING pair_index INTO v_index;
      IF FOUND THEN
        IF sourcebound.plannable_range_count(v_index + 1) > sourcebound.plannable_range_count(v_index) THEN
          PERFORM sourcebound.pairs_changed(NEW.conversation_id, v_index, v_index + 1, v_index, v_index);
        END IF;
        RETURN NULL;
      END IF;
    END IF;
  END IF;
  IF TG_OP = 'UPDATE' AND OLD.conversation_id IS DISTINCT FROM NEW.conversation_id THEN
    PERFORM sourcebound.pairs_lock(OLD.conversation_id, NEW.conversation_id);
  END IF;
  PERFORM sourcebound.refresh_pair(OLD.conversation_id, OLD.id, false);
  IF TG_OP = 'UPDATE' AND (NEW.id IS DISTINCT FROM OLD.id OR NEW.conversation_id IS DISTINCT FROM OLD.conversation_id) THEN
    PERFORM sourcebound.refresh_pair(NEW.conversation_id, NEW.id, false);
  END IF;
  RETURN NULL;
END
$$;
--> statement-breakpoint
-- Any change of the row reaches the function, which decides (above): a short
-- WHEN clause costs less than the one it replaces, and a status change
-- between two non-eligible states (queued -> running) returns at once.
DROP TRIGGER runs_refresh_pair_upd ON sourcebound.runs;
--> statement-breakpoint
CREATE TRIGGER runs_refresh_pair_upd AFTER UPDATE ON sourcebound.runs
  FOR EACH ROW WHEN (OLD.* IS DISTINCT FROM NEW.*) EXECUTE FUNCTION sourcebound.runs_refresh_pair();
--> statement-breakpoint
-- The message side, as in 0019, plus: a message without a run returns at once
-- (the WHEN clause no longer filters it).
CREATE OR REPLACE FUNCTION sourcebound.messages_refresh_pair() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v_conversation uuid;
  v_eligible boolean;
  v_indexed boolean;
BEGIN
  IF TG_OP = 'INSERT' AND NEW.run_id IS NULL THEN
    RETURN NULL;
  END IF;
  IF TG_OP = 'INSERT'
     OR (TG_OP = 'UPDATE' AND NEW.run_id IS NOT DISTINCT FROM OLD.run_id AND NEW.conversation_id IS NOT DISTINCT FROM OLD.conversation_id) THEN
    PERFORM pg_advisory_xact_lock(74201, hashtext(NEW.conversation_id::text));
    SELECT r.conversation_id, r.status IN ('completed', 'partial', 'clarify_pending'),
           EXISTS (SELECT 1 FROM sourcebound.pairs p WHERE p.run_id = r.id)
    INTO v_conversation, v_eligible, v_indexed
    FROM sourcebound.runs r WHERE r.id = NEW.run_id;
    -- Its run is here, not eligible and not indexed: no pair to make, change or remove.
    IF v_conversation = NEW.conversation_id AND NOT v_eligible AND NOT v_indexed THEN
      RETURN NULL;
    END IF;
  END IF;
  IF TG_OP = 'UPDATE' AND OLD.conversation_id IS DISTINCT FROM NEW.conversation_id THEN
    -- Its run moves with it (foreign key): both conversations, in lock order.
    PERFORM sourcebound.pairs_lock(OLD.conversation_id, NEW.conversation_id);
  END IF;
  IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.run_id IS NOT NULL THEN
    PERFORM sourcebound.refresh_pair(OLD.conversation_id, OLD.run_id,
      TG_OP = 'UPDATE' AND OLD.content IS DISTINCT FROM NEW.content);
  END IF;
  IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.run_id IS NOT NULL
     AND (TG_OP = 'INSERT' OR NEW.run_id IS DISTINCT FROM OLD.run_id) THEN
    PERFORM sourcebound.refresh_pair(NEW.conversation_id, NEW.run_id, false);
  END IF;
  RETURN NULL;
END
$$;
--> statement-breakpoint
-- Inserts: an assistant message that is not completed cannot complete a pair
-- (a run has one assistant message); that is the streaming assistant of
-- every live run, which now costs a two-comparison WHEN clause. Whitespace-
-- only text and messages without a run are decided in the function.
DROP TRIGGER messages_refresh_pair_ins ON sourcebound.messages;
--> statement-breakpoint
CREATE TRIGGER messages_refresh_pair_ins AFTER INSERT ON sourcebound.messages
  FOR EACH ROW WHEN (NEW.role = 'user' OR NEW.status = 'completed')
  EXECUTE FUNCTION sourcebound.messages_refresh_pair();
--> statement-breakpoint
-- Updates: an assistant message that is not completed before and not after
-- is in no pair before and none after, whatever else changed (its run, id,
-- text): token-by-token streaming updates skip PL/pgSQL. Every other update
-- reaches the function. (0016's clause skipped streaming -> streaming text
-- changes of any role, including a user message's, which can be in a pair:
-- the definition does not look at the user message's status.)
DROP TRIGGER messages_refresh_pair_upd ON sourcebound.messages;
--> statement-breakpoint
CREATE TRIGGER messages_refresh_pair_upd AFTER UPDATE ON sourcebound.messages
  FOR EACH ROW WHEN (OLD.status = 'completed' OR NEW.status = 'completed' OR OLD.role = 'user' OR NEW.role = 'user')
  EXECUTE FUNCTION sourcebound.messages_refresh_pair();
--> statement-breakpoint
-- Enqueue (0021), plus the case of the second crossing (pair 40, 50...) while
-- the first one's job still waits: a waiting job with the key that has not
-- failed yet (attempts 0, not locked) is exactly what preserve_run_at would
-- leave it as (its run_at kept, the same payload and settings: the key is
-- ours), so nothing needs writing. Locking its row (FOR KEY SHARE) keeps a
-- worker from starting it before this transaction's changes are visible:
-- graphile-worker takes jobs FOR UPDATE SKIP LOCKED, so it takes this one
-- after our commit and sees them. A job that is running, or waiting after a
-- failed attempt, takes the 0021 path unchanged.
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
