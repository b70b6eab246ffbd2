-- Invariant: unchanged from 0003 (sourcebound.pairs holds exactly what
-- sourcebound.pair_of_run() defines). A pair's identity is its two message
-- ids, so a change of a message's id is a change of the pair: the update
-- trigger of 0003 watched run_id, conversation_id, role, status and content,
-- not id, and `UPDATE sourcebound.messages SET id = ...` left the index
-- pointing at an id that no longer exists (eligible_pairs lost the row, the
-- pair count stayed, and projection and claims saw a gap for good).
-- refresh_pair() already treats different message ids as a new pair (it
-- replaces the row and reports the change at its index, so a summary of its
-- range no longer binds and the range is enqueued again): the trigger only
-- has to fire.
DROP TRIGGER messages_refresh_pair_upd ON sourcebound.messages;
--> statement-breakpoint
CREATE TRIGGER messages_refresh_pair_upd AFTER UPDATE ON sourcebound.messages
  FOR EACH ROW WHEN (
    OLD.id IS DISTINCT FROM NEW.id
    OR OLD.run_id IS DISTINCT FROM NEW.run_id
    OR OLD.conversation_id IS DISTINCT FROM NEW.conversation_id
    OR OLD.role IS DISTINCT FROM NEW.role
    OR OLD.status IS DISTINCT FROM NEW.status
    OR (NOT (OLD.status = 'streaming' AND NEW.status = 'streaming') AND OLD.content IS DISTINCT FROM NEW.content)
  ) EXECUTE FUNCTION sourcebound.messages_refresh_pair();
