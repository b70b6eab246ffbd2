-- The projection's ledger (src/projection/cache.ts, layout.ts). A rewrite
-- of the layout that is not forced (summaries swapped in, or a fresh layout
-- chosen over the cached head) was taken when it paid back in the turns a
-- conversation is expected to still have. Replaying the 50 longest real
-- threads, 7 of 100 replays at 32 and 64 KiB then cost more with the
-- projection than sending the whole history (up to 1.158x): the bet was lost
-- when the conversation ended soon after. Each layout now carries what the
-- projection has saved so far against the whole history, cached (saved_cost,
-- in uncached-byte prices, up to the request that made it), and how many
-- bytes of the whole history it leaves out (saves_bytes: every request that
-- extends it saves reading them). A rewrite that is not forced must also
-- leave that ledger in credit. Existing rows start at zero: no optional
-- rewrite until the projection has saved its price.
ALTER TABLE "sourcebound"."projection_layouts" ADD COLUMN "saved_cost" double precision DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "sourcebound"."projection_layouts" ADD COLUMN "saves_bytes" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "sourcebound"."projection_layouts" ADD CONSTRAINT "projection_layouts_ledger" CHECK ("sourcebound"."projection_layouts"."saved_cost" > '-Infinity' and "sourcebound"."projection_layouts"."saved_cost" < 'Infinity' and "sourcebound"."projection_layouts"."saves_bytes" >= 0);
--> statement-breakpoint
-- The stored layout with its ledger (bigint as float8: node-postgres returns a bigint as text).
DROP FUNCTION sourcebound.projection_layout(uuid, text, integer);
--> statement-breakpoint
CREATE FUNCTION sourcebound.projection_layout(p_conversation_id uuid, p_scope text, p_budget_bytes integer)
RETURNS TABLE ("startPair" integer, "endPair" integer, summaries jsonb, gaps jsonb, "prefixSha256" text, "prefixBytes" integer,
               "savedCost" double precision, "savesBytes" double precision)
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
BEGIN
  RETURN QUERY
  SELECT l.start_pair, l.end_pair, l.summaries, l.gaps, l.prefix_sha256, l.prefix_bytes, l.saved_cost, l.saves_bytes::float8
  FROM sourcebound.projection_layouts l
  JOIN sourcebound.conversations c ON c.id = l.conversation_id AND c.scope = p_scope
  WHERE l.conversation_id = p_conversation_id AND l.budget_bytes = p_budget_bytes;
END
$$;
--> statement-breakpoint
-- The size of the whole history before p_before_pair, for the ledger: its
-- pairs, the UTF-8 bytes of their texts, and those of the newest pair's (a
-- lower bound on what sending it all costs: JSON only adds to a text). Read
-- only by a rewrite with no layout to extend (the first at a budget, or after
-- an edit in the prefix): a budget rewrite knows the size from the layout it
-- replaces and its ledger. Lengths come from the values' headers: no text is
-- read or decompressed, but every pair's rows are (about 0.1 s at 20,000
-- pairs).
CREATE FUNCTION sourcebound.projection_history_bytes(p_conversation_id uuid, p_scope text, p_before_pair integer)
RETURNS TABLE (pairs integer, "textBytes" double precision, "newestTextBytes" double precision)
LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN QUERY
  SELECT count(*)::int,
         coalesce(sum(octet_length(e.user_text)::float8 + octet_length(e.assistant_text)), 0),
         coalesce(max(octet_length(e.user_text)::float8 + octet_length(e.assistant_text)) FILTER (WHERE e.pair_index = p_before_pair - 1), 0)
  FROM sourcebound.eligible_pairs e
  JOIN sourcebound.conversations c ON c.id = e.conversation_id AND c.scope = p_scope
  WHERE e.conversation_id = p_conversation_id AND e.pair_index < p_before_pair;
END
$$;
