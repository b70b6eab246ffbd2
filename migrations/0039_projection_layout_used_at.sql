-- Invariant: a stored layout is kept only while the prompt cache can still
-- hold it. A provider keeps a cached prefix for a lifetime after its last
-- use (5 minutes by default, 1 hour with the longer TTL); a request after
-- that pays a write whatever the layout is, so keeping an old head then buys
-- nothing and costs fidelity. used_at records when a request last sent the
-- layout, in the app's clock (the projection's `now`), so the projection can
-- lay a conversation out afresh when it resumes after the cache expired.
ALTER TABLE "sourcebound"."projection_layouts" ADD COLUMN "used_at" timestamp with time zone DEFAULT now() NOT NULL;
--> statement-breakpoint
DROP FUNCTION sourcebound.projection_layout(uuid, text, integer);
--> statement-breakpoint
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
