-- Invariant: the pair index and the compaction marks follow the messages and
-- runs they are derived from, TRUNCATE included. Row triggers do not fire on
-- TRUNCATE, so `TRUNCATE sourcebound.messages` left every pair of every
-- conversation in the index: a conversation's next pairs were appended after
-- its vanished ones (35 gone, the next three indexed 35-37), its plannable
-- count counted them, and every claim of its ranges found fewer than ten
-- pairs and left it alone until an operator ran `sourcebound repair` on each
-- conversation.
-- Every pair names two messages, so with the messages gone no pair and no
-- plannable range is left anywhere: the index and the marks are emptied in
-- the same transaction. Summary records stay (they are immutable and bind
-- sources that no longer exist, so projection never uses them); erasing them
-- still takes deleting their conversation. The runs need no such trigger:
-- the run history's tables reference them and refuse TRUNCATE (0013), so
-- they cannot be truncated, with CASCADE or without.
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
