-- Invariant: the pair index (and the marks and jobs it drives) is computed
-- from the latest committed messages and runs of a conversation. Its
-- triggers serialize the writers of one conversation with an advisory lock
-- (74201) and then read, which is exact only when each of their statements
-- sees what the previous lock holder committed: READ COMMITTED, PostgreSQL's
-- default. Under REPEATABLE READ and SERIALIZABLE the whole transaction reads
-- one snapshot, taken at its first statement, so a trigger computed from
-- rows as they were before any writer that committed meanwhile (the one it
-- waited for on the lock, or one that finished just before). SERIALIZABLE
-- catches that only when every writer is SERIALIZABLE: an application's
-- READ COMMITTED write, `sourcebound repair` or the demo is not.
-- Measured on a 31-pair conversation: a session began, read, then another
-- ended a run in the middle (its pair left, the later ones shifted down), then
-- the first session completed a new run; its pair was indexed 31 with
-- nothing at 30 (pairs_drift: wrong_index), under REPEATABLE READ and under
-- SERIALIZABLE alike, and every range over the gap was 'gone' for the claim
-- until a repair. Two completions at once under REPEATABLE READ failed the
-- second with a duplicate key on sourcebound.pairs; an assistant message
-- written while another transaction completed its run is left out of the
-- index for good.
-- A trigger cannot know cheaply that its snapshot missed a commit, so a write
-- the pair triggers must read for is refused outside READ COMMITTED, loudly,
-- instead of indexed from stale rows (SQLSTATE 0A000, not 40001: a retry at
-- the same isolation level would fail the same way). Writes the triggers read
-- nothing for are not refused: a run's status change that keeps its
-- eligibility, a message outside any run, erasing a conversation (its runs
-- and messages go by cascade). `sourcebound repair` (pairs_rebuild) is
-- refused the same way.
CREATE FUNCTION sourcebound.pair_write_refused() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'sourcebound: the runs and messages of a conversation are written under READ COMMITTED, not %', upper(current_setting('transaction_isolation'))
    USING ERRCODE = 'feature_not_supported',
          DETAIL = 'The pair index is computed from the latest committed rows; a transaction snapshot (REPEATABLE READ, SERIALIZABLE) misses what another writer committed after it was taken.',
          HINT = 'Write them in a READ COMMITTED transaction (PostgreSQL''s default).';
END
$$;
--> statement-breakpoint
CREATE OR REPLACE FUNCTION sourcebound.messages_refresh_pair()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_conversation uuid;
  v_eligible boolean;
BEGIN
  IF TG_OP = 'INSERT' AND NEW.run_id IS NULL THEN
    RETURN NULL;
  END IF;
  -- A message of a run: what follows reads other rows (0031). Erasing a
  -- conversation (its messages go by cascade) reads nothing that matters.
  -- Two IFs: the outer test alone is a simple expression, which PL/pgSQL
  -- evaluates without the executor; with the EXISTS in the same expression
  -- every message write paid an executor run (P1: 4-5% of a write).
  IF current_setting('transaction_isolation') IN ('repeatable read', 'serializable') THEN
    IF TG_OP = 'INSERT'
       OR TG_OP = 'UPDATE' AND (OLD.run_id IS NOT NULL OR NEW.run_id IS NOT NULL)
       OR TG_OP = 'DELETE' AND EXISTS (SELECT 1 FROM sourcebound.conversations WHERE id = OLD.conversation_id) THEN
      PERFORM sourcebound.pair_write_refused();
    END IF;
  END IF;
  IF TG_OP = 'INSERT'
     OR (TG_OP = 'UPDATE' AND NEW.run_id IS NOT DISTINCT FROM OLD.run_id AND NEW.conversation_id IS NOT DISTINCT FROM OLD.conversation_id) THEN
    PERFORM pg_advisory_xact_lock(74201, hashtext(NEW.conversation_id::text));
    SELECT r.conversation_id, r.status IN ('completed', 'partial', 'clarify_pending')
    INTO v_conversation, v_eligible
    FROM sourcebound.runs r WHERE r.id = NEW.run_id;
    -- Its run is here and not eligible: no pair to make, change or remove.
    IF v_conversation = NEW.conversation_id AND NOT v_eligible THEN
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
$function$;
--> statement-breakpoint
CREATE OR REPLACE FUNCTION sourcebound.runs_refresh_pair()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_index integer;
BEGIN
  IF TG_OP = 'UPDATE' AND NEW.id = OLD.id AND NEW.conversation_id = OLD.conversation_id AND NEW.seq = OLD.seq THEN
    IF (OLD.status IN ('completed', 'partial', 'clarify_pending')) = (NEW.status IN ('completed', 'partial', 'clarify_pending')) THEN
      RETURN NULL;
    END IF;
    IF current_setting('transaction_isolation') IN ('repeatable read', 'serializable') THEN
      PERFORM sourcebound.pair_write_refused();
    END IF;
    IF NEW.status IN ('completed', 'partial', 'clarify_pending') THEN
      -- The lock comes before the definition is read (0003).
      PERFORM pg_advisory_xact_lock(74201, hashtext(NEW.conversation_id::text));
      INSERT INTO sourcebound.pairs (run_id, conversation_id, run_seq, pair_index, user_message_id, assistant_message_id)
      SELECT NEW.id, NEW.conversation_id, NEW.seq, coalesce(last.pair_index + 1, 0), u.id, a.id
      FROM sourcebound.messages u
      JOIN sourcebound.messages a
        ON a.run_id = NEW.id AND a.role = 'assistant' AND a.conversation_id = NEW.conversation_id
      LEFT JOIN LATERAL (
        SELECT x.pair_index, x.run_seq FROM sourcebound.pairs x
        WHERE x.conversation_id = NEW.conversation_id ORDER BY x.pair_index DESC LIMIT 1
      ) last ON true
      WHERE u.run_id = NEW.id AND u.role = 'user' AND u.conversation_id = NEW.conversation_id
        AND a.status = 'completed'
        AND u.content ~ '[^\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]'
        AND a.content ~ '[^\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]'
        AND (last.run_seq IS NULL OR last.run_seq < NEW.seq)
      RETURNING pair_index INTO v_index;
      IF FOUND THEN
        IF sourcebound.plannable_range_count(v_index + 1) > sourcebound.plannable_range_count(v_index) THEN
          PERFORM sourcebound.pairs_changed(NEW.conversation_id, v_index, v_index + 1, v_index, v_index);
        END IF;
        RETURN NULL;
      END IF;
    END IF;
  END IF;
  -- Erasing a conversation (its runs go by cascade) reads nothing that matters (0031).
  IF current_setting('transaction_isolation') IN ('repeatable read', 'serializable') THEN
    IF TG_OP = 'UPDATE' OR EXISTS (SELECT 1 FROM sourcebound.conversations WHERE id = OLD.conversation_id) THEN
      PERFORM sourcebound.pair_write_refused();
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
$function$;
--> statement-breakpoint
CREATE OR REPLACE FUNCTION sourcebound.pairs_rebuild(p_conversation_id uuid)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_others uuid[];
  v_other uuid;
  v_key integer;
  v_wrong integer;
  v_changed integer;
  v_old integer;
  v_new integer;
BEGIN
  IF current_setting('transaction_isolation') IN ('repeatable read', 'serializable') THEN
    PERFORM sourcebound.pair_write_refused();
  END IF;
  IF NOT EXISTS (SELECT 1 FROM sourcebound.conversations WHERE id = p_conversation_id) THEN
    RAISE EXCEPTION 'sourcebound: conversation % does not exist', p_conversation_id USING ERRCODE = 'no_data_found';
  END IF;
  -- Conversations whose index holds a run of this one, and conversations
  -- owning a run this one's index holds.
  SELECT array_agg(DISTINCT o) INTO v_others FROM (
    SELECT p.conversation_id AS o
    FROM sourcebound.pairs p JOIN sourcebound.runs r ON r.id = p.run_id
    WHERE r.conversation_id = p_conversation_id AND p.conversation_id <> p_conversation_id
    UNION
    SELECT r.conversation_id
    FROM sourcebound.pairs p JOIN sourcebound.runs r ON r.id = p.run_id
    WHERE p.conversation_id = p_conversation_id AND r.conversation_id <> p_conversation_id
  ) s;
  FOR v_key IN
    SELECT DISTINCT hashtext(c::text) FROM unnest(ARRAY[p_conversation_id] || coalesce(v_others, '{}')) c ORDER BY 1
  LOOP
    PERFORM pg_advisory_xact_lock(74201, v_key);
  END LOOP;

  SELECT count(*), min(least(expected_index, actual_index)) INTO v_wrong, v_changed
  FROM sourcebound.pairs_drift(p_conversation_id);
  IF v_wrong > 0 THEN
    SELECT coalesce(max(pair_index) + 1, 0) INTO v_old FROM sourcebound.pairs WHERE conversation_id = p_conversation_id;
    DELETE FROM sourcebound.pairs
    WHERE conversation_id = p_conversation_id
       OR run_id IN (SELECT id FROM sourcebound.runs WHERE conversation_id = p_conversation_id);
    INSERT INTO sourcebound.pairs (run_id, conversation_id, run_seq, pair_index, user_message_id, assistant_message_id)
    SELECT d.run_id, d.conversation_id, d.run_seq, row_number() OVER (ORDER BY d.run_seq) - 1, d.user_message_id, d.assistant_message_id
    FROM sourcebound.runs r CROSS JOIN LATERAL sourcebound.pair_of_run(r.id) d
    WHERE r.conversation_id = p_conversation_id;
    SELECT coalesce(max(pair_index) + 1, 0) INTO v_new FROM sourcebound.pairs WHERE conversation_id = p_conversation_id;
    PERFORM sourcebound.pairs_changed(p_conversation_id, v_old, v_new, coalesce(v_changed, 0));
  END IF;
  -- The other side of the drift, rebuilt the same way (their locks are held).
  FOREACH v_other IN ARRAY coalesce(v_others, '{}') LOOP
    v_wrong := v_wrong + sourcebound.pairs_rebuild(v_other);
  END LOOP;
  RETURN v_wrong;
END
$function$;
