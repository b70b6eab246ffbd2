-- The pair index: sourcebound.pairs, the trigger-maintained materialization of
-- the one definition of an eligible pair (pair_of_run), and its upkeep.

-- The ONE definition of an eligible pair; everything else reads it
-- (sourcebound.pairs materializes it, eligible_pairs is what code reads).
-- A pair is the user and the assistant message of one run when the run is
-- completed, partial or clarify_pending, the assistant message is completed,
-- both belong to that run and its conversation, and both hold text.
-- "Text" is anything String.prototype.trim would not remove (WhiteSpace and
-- LineTerminator, spelled out): \S follows the server's locale, and the
-- summarizer (JavaScript) must agree with the database on every server.
CREATE FUNCTION sourcebound.pair_of_run(p_run_id uuid)
RETURNS TABLE (conversation_id uuid, run_id uuid, run_seq bigint, user_message_id uuid, assistant_message_id uuid)
LANGUAGE sql STABLE AS $$
  SELECT r.conversation_id, r.id, r.seq, u.id, a.id
  FROM sourcebound.runs r
  JOIN sourcebound.messages u
    ON u.run_id = r.id AND u.role = 'user' AND u.conversation_id = r.conversation_id
  JOIN sourcebound.messages a
    ON a.run_id = r.id AND a.role = 'assistant' AND a.conversation_id = r.conversation_id
  WHERE r.id = p_run_id
    AND r.status IN ('completed', 'partial', 'clarify_pending')
    AND a.status = 'completed'
    AND u.content ~ '[^\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]'
    AND a.content ~ '[^\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]'
$$;
--> statement-breakpoint
-- Pair indexes are unique per conversation. DEFERRABLE so that shifting the
-- indexes after an insertion or removal in the middle is one UPDATE checked at
-- the end of the statement, not row by row.
ALTER TABLE sourcebound.pairs
  ADD CONSTRAINT pairs_conversation_index_key UNIQUE (conversation_id, pair_index) DEFERRABLE INITIALLY IMMEDIATE;
--> statement-breakpoint
-- What code reads for pairs. It re-checks what the index claims (both
-- messages in the pair's run and conversation, with their roles), so an index
-- row written around the triggers is a gap the projection reports, never
-- another conversation's text.
CREATE VIEW sourcebound.eligible_pairs AS
  SELECT p.conversation_id,
         p.pair_index,
         p.run_id,
         p.run_seq,
         p.user_message_id,
         u.content AS user_text,
         p.assistant_message_id,
         a.content AS assistant_text
  FROM sourcebound.pairs p
  JOIN sourcebound.messages u
    ON u.id = p.user_message_id AND u.run_id = p.run_id AND u.conversation_id = p.conversation_id AND u.role = 'user'
  JOIN sourcebound.messages a
    ON a.id = p.assistant_message_id AND a.run_id = p.run_id AND a.conversation_id = p.conversation_id AND a.role = 'assistant';
--> statement-breakpoint
-- Recomputes a conversation's pairs from pair_of_run() alone and returns every
-- row where sourcebound.pairs differs (missing, extra, wrong_index,
-- wrong_messages). Empty means the index is exact. For tests, `sourcebound
-- inspect` and repair: it reads the whole conversation.
CREATE FUNCTION sourcebound.pairs_drift(p_conversation_id uuid)
RETURNS TABLE (run_id uuid, expected_index bigint, actual_index integer, problem text)
LANGUAGE sql STABLE AS $$
  WITH expected AS (
    SELECT d.run_id, d.user_message_id, d.assistant_message_id,
           row_number() OVER (ORDER BY d.run_seq) - 1 AS pair_index
    FROM sourcebound.runs r
    CROSS JOIN LATERAL sourcebound.pair_of_run(r.id) d
    WHERE r.conversation_id = p_conversation_id
  ), actual AS (
    SELECT * FROM sourcebound.pairs WHERE conversation_id = p_conversation_id
  )
  SELECT coalesce(e.run_id, a.run_id), e.pair_index, a.pair_index,
         CASE WHEN a.run_id IS NULL THEN 'missing'
              WHEN e.run_id IS NULL THEN 'extra'
              WHEN e.pair_index <> a.pair_index THEN 'wrong_index'
              ELSE 'wrong_messages' END
  FROM expected e FULL JOIN actual a ON a.run_id = e.run_id
  WHERE e.run_id IS NULL OR a.run_id IS NULL OR e.pair_index <> a.pair_index
     OR e.user_message_id <> a.user_message_id OR e.assistant_message_id <> a.assistant_message_id
$$;
--> statement-breakpoint
-- The pair locks (advisory class 74201, src/db/locks.ts) of one or two
-- conversations, in ascending lock-key order, so two transactions moving runs
-- between the same two conversations in opposite directions queue instead of
-- deadlocking.
CREATE FUNCTION sourcebound.pairs_lock(p_a uuid, p_b uuid) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  v_a integer := hashtext(p_a::text);
  v_b integer := hashtext(p_b::text);
BEGIN
  IF v_a IS NULL OR v_b IS NULL OR v_a = v_b THEN
    IF v_a IS NOT NULL THEN PERFORM pg_advisory_xact_lock(74201, v_a); END IF;
    IF v_b IS NOT NULL AND v_b IS DISTINCT FROM v_a THEN PERFORM pg_advisory_xact_lock(74201, v_b); END IF;
  ELSIF v_a < v_b THEN
    PERFORM pg_advisory_xact_lock(74201, v_a);
    PERFORM pg_advisory_xact_lock(74201, v_b);
  ELSE
    PERFORM pg_advisory_xact_lock(74201, v_b);
    PERFORM pg_advisory_xact_lock(74201, v_a);
  END IF;
END
$$;
--> statement-breakpoint
-- Raised by the pair triggers when a write they must read for runs outside
-- READ COMMITTED. The index is computed from the latest committed rows under
-- the conversation's lock; a transaction snapshot (REPEATABLE READ,
-- SERIALIZABLE) misses what the previous lock holder committed and would index
-- stale rows (a gap, a duplicate key, a pair left out for good). SQLSTATE
-- 0A000, not 40001: a retry at the same level would fail the same way.
CREATE FUNCTION sourcebound.pair_write_refused() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'sourcebound: the runs and messages of a conversation are written under READ COMMITTED, not %', upper(current_setting('transaction_isolation'))
    USING ERRCODE = 'feature_not_supported', CONSTRAINT = 'pair_write_isolation',
          DETAIL = 'The pair index is computed from the latest committed rows; a transaction snapshot (REPEATABLE READ, SERIALIZABLE) misses what another writer committed after it was taken.',
          HINT = 'Write them in a READ COMMITTED transaction (PostgreSQL''s default).';
END
$$;
--> statement-breakpoint
-- Invariant: sourcebound.pairs holds exactly the pairs pair_of_run() defines,
-- each conversation's pair_index dense and in run order (pairs_drift() empty),
-- under every change the tables allow (moves between conversations, seq and id
-- changes, deletes, status flips), and every change is reported to
-- pairs_changed() with the pair indexes it touched.
-- Concurrency: every change that can alter a conversation's pairs takes the
-- conversation's advisory lock (74201) BEFORE it evaluates the definition, so
-- two transactions that each complete half of a pair cannot both miss it, and
-- pair_index assignment is serialized (a crossing to 30 pairs always enqueues).
-- A change spanning two conversations takes both via pairs_lock().
-- Row triggers run after the statement changed all its rows, so a removal
-- whose next pairs have left their places too takes them all out and renumbers
-- the rest once (a whole thread deleted or moved is linear, not cubic).
CREATE FUNCTION sourcebound.refresh_pair(p_conversation_id uuid, p_run_id uuid, p_content_changed boolean)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
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
  v_gone integer;
  v_next integer; -- later pairs (of the next eight) no longer in their place
  v_batched boolean := false;
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
      -- A message id changed: same place, new identity.
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
      -- Row triggers run once the whole statement has changed its rows.
      -- When one of the next eight pairs has left its place too (gone, moved
      -- to another conversation or to a new seq), the statement is taking
      -- several: every later pair of the conversation no longer in its place
      -- leaves now and the rest is renumbered once. Their own triggers find
      -- them unindexed and index them where they now belong, if anywhere.
      -- The usual removal or move of one pair costs eight probes more.
      SELECT count(*) INTO v_next
      FROM (SELECT p.run_id, p.conversation_id, p.run_seq FROM sourcebound.pairs p
            WHERE p.conversation_id = v_cur_conversation AND p.pair_index > v_cur_index
            ORDER BY p.pair_index LIMIT 8) p
      WHERE NOT EXISTS (SELECT 1 FROM sourcebound.pair_of_run(p.run_id) d WHERE d.conversation_id = p.conversation_id AND d.run_seq = p.run_seq);
      IF v_next = 0 THEN
        DELETE FROM sourcebound.pairs WHERE run_id = p_run_id;
        UPDATE sourcebound.pairs SET pair_index = pair_index - 1
        WHERE conversation_id = v_cur_conversation AND pair_index > v_cur_index;
        v_gone := 1;
      ELSE
        WITH gone AS (
          DELETE FROM sourcebound.pairs p
          WHERE p.conversation_id = v_cur_conversation AND p.pair_index >= v_cur_index
            AND (p.run_id = p_run_id OR NOT EXISTS (
              SELECT 1 FROM sourcebound.pair_of_run(p.run_id) d WHERE d.conversation_id = p.conversation_id AND d.run_seq = p.run_seq))
          RETURNING 1)
        SELECT count(*) INTO v_gone FROM gone;
        UPDATE sourcebound.pairs p SET pair_index = n.pair_index
        FROM (SELECT x.run_id, v_cur_index - 1 + row_number() OVER (ORDER BY x.pair_index) AS pair_index
              FROM sourcebound.pairs x WHERE x.conversation_id = v_cur_conversation AND x.pair_index > v_cur_index) n
        WHERE p.run_id = n.run_id;
        v_batched := true;
      END IF;
      IF v_batched OR v_new_conversation IS DISTINCT FROM v_cur_conversation THEN
        PERFORM sourcebound.pairs_changed(v_cur_conversation, v_count, v_count - v_gone, v_cur_index);
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
    IF v_new_conversation IS NOT DISTINCT FROM v_cur_conversation AND NOT v_batched THEN
      -- Moved within the conversation (a new seq): the count is unchanged.
      -- Only the pairs between its old and its new place shifted.
      PERFORM sourcebound.pairs_changed(v_new_conversation, v_count + 1, v_count + 1, least(v_cur_index, v_index), greatest(v_cur_index, v_index));
    ELSE
      -- Into another conversation, or back after a removal of several (reported above).
      PERFORM sourcebound.pairs_changed(v_new_conversation, v_count, v_count + 1, v_index);
    END IF;
  END IF;
END
$function$;
--> statement-breakpoint
-- The message side of the pair index. Cheap cases first (a message that cannot
-- complete or break a pair returns at once); whether a user message can
-- complete a pair depends on its run's status, another row no WHEN clause can
-- read, so it is read here under the conversation's lock. Anything that may
-- change a pair goes to refresh_pair().
CREATE FUNCTION sourcebound.messages_refresh_pair()
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
  -- A message of a run: what follows reads other rows (see pair_write_refused). Erasing a
  -- conversation (its messages go by cascade) reads nothing that matters.
  -- Two IFs: the outer test alone is a simple expression, which PL/pgSQL
  -- evaluates without the executor; with the EXISTS in the same expression
  -- every message write paid an executor run (4-5% of a write).
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
CREATE TRIGGER messages_refresh_pair_ins AFTER INSERT ON sourcebound.messages
  FOR EACH ROW WHEN (ARRAY[NEW.role, NEW.status] && '{user,completed}'::text[])
  EXECUTE FUNCTION sourcebound.messages_refresh_pair();
--> statement-breakpoint
CREATE TRIGGER messages_refresh_pair_upd AFTER UPDATE ON sourcebound.messages
  FOR EACH ROW WHEN (ARRAY[OLD.role, OLD.status, NEW.role, NEW.status] && '{user,completed}'::text[])
  EXECUTE FUNCTION sourcebound.messages_refresh_pair();
--> statement-breakpoint
CREATE TRIGGER messages_refresh_pair_del AFTER DELETE ON sourcebound.messages
  FOR EACH ROW WHEN (OLD.run_id IS NOT NULL) EXECUTE FUNCTION sourcebound.messages_refresh_pair();
--> statement-breakpoint
-- The run side of the pair index. A status change that keeps the run eligible
-- (or not) changes nothing. The common change, a run becoming eligible as the
-- newest run of its conversation, appends its pair at the end in one statement
-- (messages read and tested as pair_of_run() does) and reports to
-- pairs_changed() only when the append crosses to a new plannable range; an
-- appended pair is never inside a planned range. Everything else takes
-- refresh_pair().
-- The WHEN clauses of these triggers are short on purpose: PostgreSQL re-reads
-- and plans a WHEN clause on every statement, at a cost per character.
CREATE FUNCTION sourcebound.runs_refresh_pair()
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
      -- The lock comes before the definition is read (see refresh_pair).
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
  -- Erasing a conversation (its runs go by cascade) reads nothing that matters.
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
CREATE TRIGGER runs_refresh_pair_upd AFTER UPDATE ON sourcebound.runs
  FOR EACH ROW EXECUTE FUNCTION sourcebound.runs_refresh_pair();
--> statement-breakpoint
CREATE TRIGGER runs_refresh_pair_del AFTER DELETE ON sourcebound.runs
  FOR EACH ROW EXECUTE FUNCTION sourcebound.runs_refresh_pair();
--> statement-breakpoint
-- Row triggers do not fire on TRUNCATE: with the messages gone no pair and no
-- plannable range is left anywhere, so the index and the marks are emptied in
-- the same transaction. Summary records stay (immutable; they bind sources
-- that no longer exist, so projection never uses them). Runs need no such
-- trigger: the run history references them and refuses TRUNCATE.
CREATE FUNCTION sourcebound.pairs_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  -- TRUNCATE holds the messages exclusively: no pair write can
  -- interleave. DELETE, not TRUNCATE: a claim or a projection holding the
  -- pairs while it waits for the messages would deadlock with an exclusive lock.
  DELETE FROM sourcebound.pairs;
  DELETE FROM sourcebound.compaction_marks;
  RETURN NULL;
END
$$;
--> statement-breakpoint
CREATE TRIGGER messages_truncate_pairs AFTER TRUNCATE ON sourcebound.messages
  FOR EACH STATEMENT EXECUTE FUNCTION sourcebound.pairs_truncated();
--> statement-breakpoint
-- Repair (`sourcebound repair <id>`): rebuilds a conversation's pair index from
-- the definition, under its lock and the locks of any other conversation whose
-- index holds one of its runs (rebuilt too), and reports the rebuild to
-- pairs_changed() at the lowest index that changed, so summaries that no longer
-- bind are redone. Returns how many rows pairs_drift() reported (0: nothing
-- written). Refused outside READ COMMITTED, as the triggers are.
CREATE FUNCTION sourcebound.pairs_rebuild(p_conversation_id uuid)
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
    RAISE EXCEPTION 'sourcebound: conversation % does not exist', p_conversation_id USING ERRCODE = 'no_data_found', CONSTRAINT = 'conversation_missing';
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
