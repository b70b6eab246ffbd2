-- Invariant: a summary request is accounted for exactly once. Its receipt is
-- committed before the model call (status `dispatched`) and settled once, to
-- ok | invalid | deferred | unknown | config; a settled receipt never changes
-- (an unknown outcome stays unknown), and its identity never changes. One
-- candidate identity has at most two dispatches that spent or may spend an
-- attempt (in flight, ok, invalid, unknown), so an unknown outcome is never
-- retried without bound. Receipts go only with their Run, by cascade.
CREATE FUNCTION sourcebound.run_summary_requests_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    IF sourcebound.run_parent_alive(OLD.run_id) THEN
      RAISE EXCEPTION 'sourcebound: summary request % cannot be deleted; delete its run to erase it', OLD.id
        USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN OLD;
  END IF;
  IF TG_OP = 'INSERT' THEN
    IF NEW.status <> 'dispatched' THEN
      RAISE EXCEPTION 'sourcebound: a summary request receipt is written before dispatch, as dispatched'
        USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF (SELECT count(*) FROM sourcebound.run_summary_requests
        WHERE identity_key = NEW.identity_key AND (status = 'dispatched' OR spent)) >= 2 THEN
      RAISE EXCEPTION 'sourcebound: summary identity % has spent its two attempts', NEW.identity_key
        USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
  END IF;
  IF OLD.status <> 'dispatched' THEN
    RAISE EXCEPTION 'sourcebound: summary request % is settled (%) and immutable', OLD.id, OLD.status
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  IF NEW.status = 'dispatched' THEN
    RAISE EXCEPTION 'sourcebound: summary request % can only be settled', OLD.id
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  IF NEW.run_id <> OLD.run_id OR NEW.conversation_id <> OLD.conversation_id OR NEW.scope <> OLD.scope
     OR NEW.identity_key <> OLD.identity_key OR NEW.attempt <> OLD.attempt
     OR NEW.predecessor_id IS DISTINCT FROM OLD.predecessor_id
     OR NEW.from_seq <> OLD.from_seq OR NEW.to_seq <> OLD.to_seq OR NEW.compacted_seqs <> OLD.compacted_seqs
     OR NEW.source_hash <> OLD.source_hash OR NEW.hash_version <> OLD.hash_version
     OR NEW.model <> OLD.model OR NEW.prompt_version <> OLD.prompt_version
     OR NEW.reserved_requests <> OLD.reserved_requests OR NEW.reserved_tokens <> OLD.reserved_tokens
     OR NEW.dispatched_at <> OLD.dispatched_at THEN
    RAISE EXCEPTION 'sourcebound: the identity of summary request % cannot change', OLD.id
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  RETURN NEW;
END
$$;
--> statement-breakpoint
CREATE TRIGGER run_summary_requests_guard BEFORE INSERT OR UPDATE OR DELETE ON sourcebound.run_summary_requests
  FOR EACH ROW EXECUTE FUNCTION sourcebound.run_summary_requests_guard();
