-- Invariant: a settled summary record is immutable. A completed summary can
-- never be updated or deleted; a failed one is final too (no further model
-- call for that identity). A stale record (its source changed before commit)
-- stays open: if the source returns to exactly that state, the same identity
-- may be claimed again. The only way such a row disappears is the
-- cascade from erasing its conversation. Enforced here, not only in code, so an
-- operator's stray UPDATE or a buggy client cannot rewrite history.
CREATE FUNCTION sourcebound.conversation_summaries_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    -- During the cascade from DELETE FROM conversations the parent row is
    -- already gone; any other delete finds it and is refused.
    IF EXISTS (SELECT 1 FROM sourcebound.conversations WHERE id = OLD.conversation_id) THEN
      RAISE EXCEPTION 'sourcebound: summary record % cannot be deleted; delete its conversation to erase it', OLD.id
        USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN OLD;
  END IF;
  IF OLD.status IN ('completed', 'failed') THEN
    RAISE EXCEPTION 'sourcebound: summary record % is % and immutable', OLD.id, OLD.status
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  -- The identity and the spent attempts of an open record never go back.
  IF NEW.conversation_id <> OLD.conversation_id OR NEW.scope <> OLD.scope
     OR NEW.from_pair <> OLD.from_pair OR NEW.to_pair <> OLD.to_pair
     OR NEW.source_message_ids <> OLD.source_message_ids OR NEW.source_hash <> OLD.source_hash
     OR NEW.hash_version <> OLD.hash_version OR NEW.model <> OLD.model
     OR NEW.prompt_version <> OLD.prompt_version THEN
    RAISE EXCEPTION 'sourcebound: the identity of summary record % cannot change', OLD.id
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  IF NEW.attempts_spent < OLD.attempts_spent THEN
    RAISE EXCEPTION 'sourcebound: spent attempts of summary record % cannot decrease', OLD.id
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  NEW.updated_at := now();
  RETURN NEW;
END
$$;
--> statement-breakpoint
CREATE TRIGGER conversation_summaries_guard BEFORE UPDATE OR DELETE ON sourcebound.conversation_summaries
  FOR EACH ROW EXECUTE FUNCTION sourcebound.conversation_summaries_guard();
--> statement-breakpoint
-- Invariant: every attempt is kept. A settled attempt row is never changed and
-- attempt rows are never deleted except with their conversation.
CREATE FUNCTION sourcebound.conversation_summary_attempts_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    IF EXISTS (SELECT 1 FROM sourcebound.conversation_summaries WHERE id = OLD.summary_id) THEN
      RAISE EXCEPTION 'sourcebound: attempt % cannot be deleted', OLD.id
        USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN OLD;
  END IF;
  IF OLD.outcome IS NOT NULL THEN
    RAISE EXCEPTION 'sourcebound: attempt % is settled (%) and immutable', OLD.id, OLD.outcome
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  IF NEW.summary_id <> OLD.summary_id OR NEW.worker_id <> OLD.worker_id OR NEW.started_at <> OLD.started_at THEN
    RAISE EXCEPTION 'sourcebound: attempt % cannot change its identity', OLD.id
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  RETURN NEW;
END
$$;
--> statement-breakpoint
CREATE TRIGGER conversation_summary_attempts_guard BEFORE UPDATE OR DELETE ON sourcebound.conversation_summary_attempts
  FOR EACH ROW EXECUTE FUNCTION sourcebound.conversation_summary_attempts_guard();
