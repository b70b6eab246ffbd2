-- Invariant: a Run's history is append-only and starts with its request;
-- the receipts of its model requests are facts that never change.
-- The initial request (revision 0), the corrections (revisions 1, 2, ...
-- without gaps) and the model turns are never changed or deleted; they go
-- only with their Run (or its conversation), by cascade. The request and the
-- corrections are carried verbatim into every next request and the model turns
-- are bound to checkpoints by source hash: an edit would silently rewrite
-- what happened, so the database refuses it.
--
-- sourcebound.run_parent_alive() is shared by every run-compaction guard: a
-- delete is allowed only while cascading from the Run or its conversation,
-- i.e. when the parent row is already gone.
CREATE FUNCTION sourcebound.run_parent_alive(p_run_id uuid)
RETURNS boolean LANGUAGE sql STABLE AS $$
  SELECT EXISTS (
    SELECT 1 FROM sourcebound.runs r
    JOIN sourcebound.conversations c ON c.id = r.conversation_id
    WHERE r.id = p_run_id)
$$;
--> statement-breakpoint
CREATE FUNCTION sourcebound.run_turns_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v_next integer;
BEGIN
  IF TG_OP = 'DELETE' THEN
    IF sourcebound.run_parent_alive(OLD.run_id) THEN
      RAISE EXCEPTION 'sourcebound: run history entry % cannot be deleted; delete its run to erase it', OLD.seq
        USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN OLD;
  END IF;
  IF TG_OP = 'UPDATE' THEN
    RAISE EXCEPTION 'sourcebound: run history entry % is immutable', OLD.seq
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  IF NEW.kind = 'request' THEN
    IF EXISTS (SELECT 1 FROM sourcebound.run_turns WHERE run_id = NEW.run_id) THEN
      RAISE EXCEPTION 'sourcebound: the initial request must be the first entry of run %', NEW.run_id
        USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
  END IF;
  SELECT max(revision) + 1 INTO v_next FROM sourcebound.run_turns WHERE run_id = NEW.run_id AND revision IS NOT NULL;
  IF v_next IS NULL THEN
    RAISE EXCEPTION 'sourcebound: run % has no initial request; record it first', NEW.run_id
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  IF NEW.kind = 'correction' AND NEW.revision <> v_next THEN
    RAISE EXCEPTION 'sourcebound: the next correction of run % is revision %, not %', NEW.run_id, v_next, NEW.revision
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  RETURN NEW;
END
$$;
--> statement-breakpoint
CREATE TRIGGER run_turns_guard BEFORE INSERT OR UPDATE OR DELETE ON sourcebound.run_turns
  FOR EACH ROW EXECUTE FUNCTION sourcebound.run_turns_guard();
--> statement-breakpoint
CREATE FUNCTION sourcebound.run_model_requests_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    IF sourcebound.run_parent_alive(OLD.run_id) THEN
      RAISE EXCEPTION 'sourcebound: model request receipt % cannot be deleted; delete its run to erase it', OLD.id
        USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN OLD;
  END IF;
  RAISE EXCEPTION 'sourcebound: model request receipt % is immutable', OLD.id
    USING ERRCODE = 'integrity_constraint_violation';
END
$$;
--> statement-breakpoint
CREATE TRIGGER run_model_requests_guard BEFORE UPDATE OR DELETE ON sourcebound.run_model_requests
  FOR EACH ROW EXECUTE FUNCTION sourcebound.run_model_requests_guard();
