-- Invariant: a conversation that gains a plannable range gets a
-- compact_conversation job in the same transaction, and one that does not gets
-- none. Every graphile_worker.add_job also sends a NOTIFY, which takes a global
-- lock at commit, so jobs are added only when a range is actually gained or an
-- already-plannable range changes: never per message.

-- Planning (DESIGN.md "Planning"): range k (pairs 10k..10k+9) is plannable when
-- 10k + 9 < count - 20, i.e. the first at 30 pairs, one more every 10 pairs, and
-- the newest 20 pairs never in a target. src/plan.ts implements the same rule
-- and test/plan.test.ts checks the two agree.
CREATE FUNCTION sourcebound.plannable_range_count(p_pair_count integer)
RETURNS integer LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN p_pair_count < 30 THEN 0 ELSE (p_pair_count - 30) / 10 + 1 END
$$;
--> statement-breakpoint
-- Manual or trigger enqueue. The job key dedupes per conversation: a waiting
-- job absorbs further enqueues, and preserve_run_at keeps a deferred job's
-- backoff (a provider that refused us is not asked again early). If the keyed
-- job is already running, graphile-worker adds a second one; the claim makes
-- that harmless.
CREATE FUNCTION sourcebound.enqueue_compaction(p_conversation_id uuid)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM sourcebound.conversations WHERE id = p_conversation_id) THEN
    RAISE EXCEPTION 'sourcebound: conversation % does not exist', p_conversation_id
      USING ERRCODE = 'no_data_found';
  END IF;
  PERFORM graphile_worker.add_job(
    'compact_conversation',
    json_build_object('conversationId', p_conversation_id),
    job_key := 'sourcebound:compact:' || p_conversation_id::text,
    job_key_mode := 'preserve_run_at'
  );
END
$$;
--> statement-breakpoint
-- Called by the pair maintenance (0003) after it changed a conversation's
-- pairs: p_changed_at is the lowest pair index whose pair was added, removed or
-- edited (null when none). Enqueues when a range was gained, or when a change
-- fell inside a plannable range (its summary, if any, no longer binds).
CREATE FUNCTION sourcebound.pairs_changed(p_conversation_id uuid, p_old_count integer, p_new_count integer, p_changed_at integer)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  v_ranges integer := sourcebound.plannable_range_count(p_new_count);
BEGIN
  IF v_ranges > sourcebound.plannable_range_count(p_old_count)
     OR (p_changed_at IS NOT NULL AND p_changed_at < 10 * v_ranges) THEN
    PERFORM sourcebound.enqueue_compaction(p_conversation_id);
  END IF;
END
$$;
