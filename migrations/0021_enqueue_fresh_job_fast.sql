-- Invariant: unchanged from 0002 (a conversation that gains a plannable range
-- or changes inside one gets a compact_conversation job, deduplicated per
-- conversation by its job key with graphile-worker's preserve_run_at rules:
-- a waiting job absorbs the enqueue and keeps its backoff, a running one is
-- detached and a new job added). This migration only makes the common case
-- cheaper, because it is paid by the application's crossing write (bench P1,
-- pair 30 against pair 31): at a crossing there is usually no job with the
-- key at all, and graphile-worker's preserve_run_at path (add_jobs: five
-- statements over an array of specs) costs several times a plain insert.
--
-- So: first add_job in unsafe_dedupe mode, which is a single insert of the
-- job when none has the key (revision 0: ours, invisible to workers until we
-- commit, NOTIFY sent). When a job with the key already existed, that insert
-- only touched it (revision > 0, its row now locked by us) and we apply the
-- preserve_run_at rules to it at once with the ordinary add_job, exactly as
-- before; unsafe_dedupe's own "do nothing" is never the outcome.
CREATE OR REPLACE FUNCTION sourcebound.enqueue_compaction(p_conversation_id uuid)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  v_job graphile_worker._private_jobs;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM sourcebound.conversations WHERE id = p_conversation_id) THEN
    RAISE EXCEPTION 'sourcebound: conversation % does not exist', p_conversation_id
      USING ERRCODE = 'no_data_found';
  END IF;
  v_job := graphile_worker.add_job(
    'compact_conversation',
    json_build_object('conversationId', p_conversation_id),
    job_key := 'sourcebound:compact:' || p_conversation_id::text,
    job_key_mode := 'unsafe_dedupe'
  );
  IF v_job.revision > 0 THEN
    PERFORM graphile_worker.add_job(
      'compact_conversation',
      json_build_object('conversationId', p_conversation_id),
      job_key := 'sourcebound:compact:' || p_conversation_id::text,
      job_key_mode := 'preserve_run_at'
    );
  END IF;
END
$$;
