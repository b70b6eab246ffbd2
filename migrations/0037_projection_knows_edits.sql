-- Invariant: the projection never counts as cached a request that an edit
-- has changed since. The stored layout's own part is hash-checked on every
-- read (an edit there is a 'changed' rewrite), but the pairs appended since
-- the layout was stored are not: each request since put a cache entry at its
-- end, and the price model counted all of them as cached at the next budget
-- rewrite, also when a message among those pairs had been edited since (the
-- entries ending at or after it hold the old text). Replaying the real threads
-- with one user message edited ten pairs back at 70% of each, 8 of 400
-- replays cost more than sending the whole history (up to 1.106x), all of
-- this kind.
-- messages.edited_at records when the content of a completed message last
-- changed, set by a BEFORE UPDATE trigger whose WHEN clause (evaluated in C)
-- holds only for such an edit: a streaming message completing, or any write
-- that leaves the content as it was, does not enter it.
-- sourcebound.projection_edits() gives the pairs appended since the stored
-- layout whose cache entries an edit may have changed; the projection reads
-- it only when it prices a rewrite against them (a budget rewrite, a swap of
-- summaries).
-- And an edit inside the stored layout after its first gap (in the tail it
-- laid out) leaves its head as it was: the head is in
-- the cache up to the breakpoint at its end, which an edit after it does not
-- touch. The layout stores the head's own SHA-256 (head_sha256, null when the
-- layout has no gap), so that such a rewrite ('changed') reads the head
-- instead of writing everything again; projection_layout() returns it.
ALTER TABLE "sourcebound"."messages" ADD COLUMN "edited_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "sourcebound"."projection_layouts" ADD COLUMN "head_sha256" text;--> statement-breakpoint
ALTER TABLE "sourcebound"."projection_layouts" ADD CONSTRAINT "projection_layouts_head_hash_hex" CHECK ("sourcebound"."projection_layouts"."head_sha256" is null or "sourcebound"."projection_layouts"."head_sha256" ~ '^[0-9a-f]{64}$');
--> statement-breakpoint
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
-- The extension's pairs whose cache entries an edit may have changed: from
-- the first pair from p_from_pair on with a message edited after the layout
-- stored under p_budget_bytes was written ("firstEdit"; NULL: no such edit,
-- or no such layout) up to the first pair after it whose assistant message
-- was created after the last of those edits ("cleanFrom"; NULL: none). A
-- request ending at a pair of cleanFrom or later was made after every edit.
CREATE FUNCTION sourcebound.projection_edits(p_conversation_id uuid, p_scope text, p_budget_bytes integer, p_from_pair integer)
RETURNS TABLE ("firstEdit" integer, "cleanFrom" integer)
LANGUAGE sql STABLE AS $$
  WITH edits AS (
    SELECT p.pair_index, greatest(u.edited_at, a.edited_at) AS edited_at
    FROM sourcebound.projection_layouts l
    JOIN sourcebound.conversations c ON c.id = l.conversation_id AND c.scope = p_scope
    JOIN sourcebound.pairs p ON p.conversation_id = l.conversation_id AND p.pair_index >= p_from_pair
    JOIN sourcebound.messages u ON u.id = p.user_message_id
    JOIN sourcebound.messages a ON a.id = p.assistant_message_id
    WHERE l.conversation_id = p_conversation_id AND l.budget_bytes = p_budget_bytes
      AND (u.edited_at > l.rewritten_at OR a.edited_at > l.rewritten_at)
  )
  SELECT (SELECT min(e.pair_index) FROM edits e),
         (SELECT min(p.pair_index)
          FROM sourcebound.pairs p JOIN sourcebound.messages a ON a.id = p.assistant_message_id
          WHERE p.conversation_id = p_conversation_id
            AND p.pair_index > (SELECT min(e.pair_index) FROM edits e)
            AND a.created_at > (SELECT max(e.edited_at) FROM edits e))
$$;
--> statement-breakpoint
DROP FUNCTION sourcebound.projection_layout(uuid, text, integer);
--> statement-breakpoint
CREATE FUNCTION sourcebound.projection_layout(p_conversation_id uuid, p_scope text, p_budget_bytes integer)
RETURNS TABLE ("startPair" integer, "endPair" integer, summaries jsonb, gaps jsonb, "prefixSha256" text, "prefixBytes" integer,
               "savedCost" double precision, "savesBytes" double precision, "headSha256" text)
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
BEGIN
  RETURN QUERY
  SELECT l.start_pair, l.end_pair, l.summaries, l.gaps, l.prefix_sha256, l.prefix_bytes, l.saved_cost, l.saves_bytes::float8, l.head_sha256
  FROM sourcebound.projection_layouts l
  JOIN sourcebound.conversations c ON c.id = l.conversation_id AND c.scope = p_scope
  WHERE l.conversation_id = p_conversation_id AND l.budget_bytes = p_budget_bytes;
END
$$;
