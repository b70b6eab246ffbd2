-- Projection reads: what the projection reads of pairs, summaries and stored
-- layouts, and the edit stamp it needs to price cached prefixes.

-- Invariant: the projection never counts as cached a request that an edit has
-- changed since. messages.edited_at records when the content of a completed
-- message last changed; the WHEN clause (evaluated in C) holds only for such
-- an edit, so a streaming message completing, or a write that keeps the
-- content, does not enter PL/pgSQL.
CREATE FUNCTION sourcebound.messages_note_edit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.edited_at := now();
  RETURN NEW;
END
$$;
--> statement-breakpoint
CREATE TRIGGER messages_note_edit BEFORE UPDATE OF content ON sourcebound.messages
  FOR EACH ROW WHEN (OLD.status = 'completed' AND NEW.content IS DISTINCT FROM OLD.content)
  EXECUTE FUNCTION sourcebound.messages_note_edit();
--> statement-breakpoint
-- The projection's reads (src/db/queries/projection.ts) are PL/pgSQL functions
-- for their plans: a statement sent as text is parsed and planned on every
-- call, and these took longer to plan than to run; PL/pgSQL keeps each plan for
-- the connection's life. Named prepared statements would do the same but not
-- through a transaction pooler; a function call is a plain statement anywhere.
-- Source ids and ungrounded facts come as JSON (node-postgres parses text[] in
-- JavaScript, JSON natively). STABLE: they read in the caller's snapshot (the
-- projection's one REPEATABLE READ transaction).
-- This one: the pair count of a conversation in a scope (max(pair_index) + 1,
-- an index lookup), or null when there is no such conversation in the scope.
CREATE FUNCTION sourcebound.projection_pair_count(p_conversation_id uuid, p_scope text)
RETURNS integer LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_count integer;
BEGIN
  SELECT (SELECT coalesce(max(p.pair_index) + 1, 0) FROM sourcebound.pairs p WHERE p.conversation_id = c.id)::int
  INTO v_count
  FROM sourcebound.conversations c WHERE c.id = p_conversation_id AND c.scope = p_scope;
  RETURN v_count;
END
$$;
--> statement-breakpoint
-- Pairs p_from_pair..p_to_pair, oldest first; a pair's texts only when the two
-- together are at most p_max_text_bytes UTF-8 bytes (null: always).
CREATE FUNCTION sourcebound.projection_pairs_page(p_conversation_id uuid, p_scope text, p_from_pair integer, p_to_pair integer, p_max_text_bytes bigint)
RETURNS TABLE ("pairIndex" integer, "runId" uuid, "userMessageId" uuid, "assistantMessageId" uuid,
               "userText" text, "assistantText" text)
LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN QUERY
  SELECT e.pair_index, e.run_id, e.user_message_id, e.assistant_message_id,
         CASE WHEN p_max_text_bytes IS NULL OR octet_length(e.user_text)::bigint + octet_length(e.assistant_text) <= p_max_text_bytes
              THEN e.user_text END,
         CASE WHEN p_max_text_bytes IS NULL OR octet_length(e.user_text)::bigint + octet_length(e.assistant_text) <= p_max_text_bytes
              THEN e.assistant_text END
  FROM sourcebound.eligible_pairs e
  JOIN sourcebound.conversations c ON c.id = e.conversation_id AND c.scope = p_scope
  WHERE e.conversation_id = p_conversation_id AND e.pair_index BETWEEN p_from_pair AND p_to_pair
  ORDER BY e.pair_index;
END
$$;
--> statement-breakpoint
-- Completed and failed records whose from_pair lies in p_from_pair..p_to_pair,
-- by from_pair, newest first within a range, with the facts the last ok
-- attempt's grounding check did not find (the `flag` policy's label).
CREATE FUNCTION sourcebound.projection_summaries(p_conversation_id uuid, p_scope text, p_from_pair integer, p_to_pair integer)
RETURNS TABLE (id uuid, "fromPair" integer, "toPair" integer, "sourceMessageIds" json, "sourceHash" text, "hashVersion" integer,
               model text, "promptVersion" text, status text, summary text, "completedAt" timestamptz, "createdAt" timestamptz,
               ungrounded json)
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
BEGIN
  RETURN QUERY
  SELECT s.id, s.from_pair, s.to_pair, to_json(s.source_message_ids), s.source_hash, s.hash_version, s.model, s.prompt_version,
         s.status, s.summary, s.completed_at, s.created_at,
         to_json((SELECT a.grounding_ungrounded FROM sourcebound.conversation_summary_attempts a
                  WHERE a.summary_id = s.id AND a.outcome = 'ok' ORDER BY a.id DESC LIMIT 1))
  FROM sourcebound.conversation_summaries s
  WHERE s.conversation_id = p_conversation_id AND s.scope = p_scope
    AND s.from_pair BETWEEN p_from_pair AND p_to_pair
    AND s.status IN ('completed', 'failed')
  ORDER BY s.from_pair, s.completed_at DESC NULLS LAST, s.created_at DESC, s.id;
END
$$;
--> statement-breakpoint
-- The stored layout of a conversation in a scope at a budget (no row: none),
-- with its ledger (savedCost, savesBytes), the head's own hash (headSha256,
-- null when the layout has no gap: an edit after the head leaves the head
-- cached) and usedAt (when a request last sent it, in the app's clock: a
-- layout is kept only while the prompt cache can still hold it).
CREATE FUNCTION sourcebound.projection_layout(p_conversation_id uuid, p_scope text, p_budget_bytes integer)
RETURNS TABLE ("startPair" integer, "endPair" integer, summaries jsonb, gaps jsonb, "prefixSha256" text, "prefixBytes" integer,
               "savedCost" double precision, "savesBytes" double precision, "headSha256" text, "usedAt" timestamp with time zone)
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
BEGIN
  RETURN QUERY
  SELECT l.start_pair, l.end_pair, l.summaries, l.gaps, l.prefix_sha256, l.prefix_bytes, l.saved_cost, l.saves_bytes::float8, l.head_sha256,
         l.used_at
  FROM sourcebound.projection_layouts l
  JOIN sourcebound.conversations c ON c.id = l.conversation_id AND c.scope = p_scope
  WHERE l.conversation_id = p_conversation_id AND l.budget_bytes = p_budget_bytes;
END
$$;
--> statement-breakpoint

-- The request path in one round trip: projectConversationHistory runs before
-- every model request, where an app without sourcebound sends one SELECT.
-- sourcebound.projection_read() returns what a call that keeps its
-- stored layout needs, in one statement: the pair count, the stored layout
-- (at this budget, else the nearest one within NEAR_BUDGET, as
-- projectionLayoutNearRead chose it), the pairs from the layout's start to the
-- newest (without a layout, the newest p_first_page), and the completed and
-- failed records of the ranges the layout shows as summaries (without a
-- layout, of every range the pairs read touch). One statement reads in one
-- snapshot (a STABLE function's queries see its caller's), so no transaction
-- is needed; a call that must read further (a rewrite) reads again inside one
-- (src/projection/project.ts).
-- Same rows and columns as projection_pair_count, projection_layout,
-- projection_pairs_page and projection_summaries : a first row
-- whose `read` holds the count, the layout and the records as JSON (small),
-- then the pairs as rows, oldest first (`read` NULL): texts as JSON cost an
-- escape in the server and a parse in the client, where a column is a plain
-- copy (measured: 2x the CPU at 40 pairs). No row: no conversation with this
-- id in this scope. PL/pgSQL: its plans are kept per connection.
-- Every statement costs its plan's start-up whether or not it finds rows, so
-- the common call runs few: the count and the layout stored at this very
-- budget in one (the near layout only when there is none), the ranges and
-- their records only when the layout shows summaries.
CREATE FUNCTION sourcebound.projection_read(
  p_conversation_id uuid, p_scope text,
  -- The budget whose layout to read (NULL: none, e.g. newest-first), and the range of budgets a near layout may have.
  p_layout_budget integer, p_near_low integer, p_near_high integer,
  -- Without a usable layout start: how many of the newest pairs to read; and the text limit of projection_pairs_page.
  p_first_page integer, p_max_text_bytes bigint)
RETURNS TABLE ("pairIndex" integer, "runId" uuid, "userMessageId" uuid, "assistantMessageId" uuid,
               "userText" text, "assistantText" text, read json)
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
DECLARE
  v_count integer;
  v_layout json;
  v_layout_budget integer;
  v_start integer;
  v_summaries jsonb;
  v_ranges integer[];
  v_from integer;
  v_records json := '[]'::json;
BEGIN
  -- The pair count (no row: no such conversation in this scope) and the layout stored at this very budget.
  SELECT (SELECT coalesce(max(p.pair_index) + 1, 0) FROM sourcebound.pairs p WHERE p.conversation_id = c.id)::int,
         CASE WHEN l.conversation_id IS NOT NULL THEN json_build_object(
           'startPair', l.start_pair, 'endPair', l.end_pair, 'summaries', l.summaries, 'gaps', l.gaps,
           'prefixSha256', l.prefix_sha256, 'prefixBytes', l.prefix_bytes, 'savedCost', l.saved_cost,
           'savesBytes', l.saves_bytes::float8, 'headSha256', l.head_sha256, 'usedAt', l.used_at) END,
         l.budget_bytes, l.start_pair, l.summaries
  INTO v_count, v_layout, v_layout_budget, v_start, v_summaries
  FROM sourcebound.conversations c
  LEFT JOIN sourcebound.projection_layouts l ON l.conversation_id = c.id AND l.budget_bytes = p_layout_budget
  WHERE c.id = p_conversation_id AND c.scope = p_scope;
  IF NOT FOUND THEN
    RETURN;
  END IF;

  IF v_layout IS NULL AND p_layout_budget IS NOT NULL THEN
    -- None at this budget: the nearest larger one up to p_near_high, else the nearest smaller one down to p_near_low.
    SELECT json_build_object(
             'startPair', l.start_pair, 'endPair', l.end_pair, 'summaries', l.summaries, 'gaps', l.gaps,
             'prefixSha256', l.prefix_sha256, 'prefixBytes', l.prefix_bytes, 'savedCost', l.saved_cost,
             'savesBytes', l.saves_bytes::float8, 'headSha256', l.head_sha256, 'usedAt', l.used_at),
           l.budget_bytes, l.start_pair, l.summaries
    INTO v_layout, v_layout_budget, v_start, v_summaries
    FROM sourcebound.projection_layouts l
    WHERE l.conversation_id = p_conversation_id AND l.budget_bytes BETWEEN p_near_low AND p_near_high
    ORDER BY l.budget_bytes < p_layout_budget, abs(l.budget_bytes - p_layout_budget)
    LIMIT 1;
  END IF;

  -- The pairs a kept layout shows (from its start), or the newest page.
  v_from := CASE WHEN v_start IS NOT NULL AND v_start BETWEEN 0 AND v_count THEN v_start ELSE greatest(0, v_count - p_first_page) END;
  -- The records of the ranges the layout shows as summaries; without a layout, of the ranges of the pairs read.
  -- (Ranges by number k: pairs 10k..10k+9; a record belongs to the range its from_pair lies in, aligned or not.)
  IF v_layout IS NULL THEN
    v_ranges := ARRAY(SELECT g FROM generate_series(v_from / 10, (v_count - 1) / 10) g WHERE v_count > 0);
  ELSIF jsonb_array_length(v_summaries) = 0 THEN
    v_ranges := '{}';
  ELSE
    v_ranges := ARRAY(SELECT DISTINCT floor((e ->> 'fromPair')::numeric / 10)::int FROM jsonb_array_elements(v_summaries) e ORDER BY 1);
  END IF;
  IF cardinality(v_ranges) > 0 THEN
  SELECT coalesce(json_agg(json_build_object(
           'id', s.id, 'fromPair', s.from_pair, 'toPair', s.to_pair, 'sourceMessageIds', to_json(s.source_message_ids),
           'sourceHash', s.source_hash, 'hashVersion', s.hash_version, 'model', s.model, 'promptVersion', s.prompt_version,
           'status', s.status, 'summary', s.summary, 'completedAt', s.completed_at, 'createdAt', s.created_at,
           'ungrounded', to_json((SELECT a.grounding_ungrounded FROM sourcebound.conversation_summary_attempts a
                                  WHERE a.summary_id = s.id AND a.outcome = 'ok' ORDER BY a.id DESC LIMIT 1)))
         ORDER BY s.from_pair, s.completed_at DESC NULLS LAST, s.created_at DESC, s.id), '[]'::json)
  INTO v_records
  FROM sourcebound.conversation_summaries s
  WHERE s.conversation_id = p_conversation_id AND s.scope = p_scope
    AND s.from_pair BETWEEN 10 * v_ranges[1] AND 10 * v_ranges[cardinality(v_ranges)] + 9
    AND floor(s.from_pair::numeric / 10)::int = ANY (v_ranges)
    AND s.status IN ('completed', 'failed');
  END IF;

  RETURN QUERY SELECT NULL::int, NULL::uuid, NULL::uuid, NULL::uuid, NULL::text, NULL::text,
    json_build_object('count', v_count, 'layout', v_layout, 'layoutBudget', v_layout_budget, 'fromPair', v_from,
                      'recordRanges', to_json(v_ranges), 'records', v_records,
                      -- What keeps history out of every pair, silently: messages with no run, replies still
                      -- streaming, runs not settled after ten minutes. Each count reads a partial index that
                      -- holds only such rows (0008_projection_problems), so it costs nothing when there are none.
                      'withoutRun', (SELECT count(*) FROM sourcebound.messages m WHERE m.conversation_id = p_conversation_id AND m.run_id IS NULL),
                      'streaming', (SELECT count(*) FROM sourcebound.messages m WHERE m.conversation_id = p_conversation_id AND m.status = 'streaming'),
                      'unsettledRuns', (SELECT count(*) FROM sourcebound.runs r
                                        WHERE r.conversation_id = p_conversation_id AND r.status IN ('queued', 'running')
                                          AND r.created_at < now() - interval '10 minutes'));
  RETURN QUERY
  SELECT e.pair_index, e.run_id, e.user_message_id, e.assistant_message_id,
         CASE WHEN p_max_text_bytes IS NULL OR octet_length(e.user_text)::bigint + octet_length(e.assistant_text) <= p_max_text_bytes
              THEN e.user_text END,
         CASE WHEN p_max_text_bytes IS NULL OR octet_length(e.user_text)::bigint + octet_length(e.assistant_text) <= p_max_text_bytes
              THEN e.assistant_text END,
         NULL::json
  FROM sourcebound.eligible_pairs e
  WHERE e.conversation_id = p_conversation_id AND e.pair_index >= v_from AND e.pair_index < v_count
  ORDER BY e.pair_index;
END
$$;
