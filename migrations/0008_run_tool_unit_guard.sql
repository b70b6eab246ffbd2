-- Invariant: a tool call and its result are one unit. The unit is one row,
-- created with its model turn as `proposed`; it only moves forward
-- (proposed -> dispatched -> settled | failed | unknown, or straight from
-- proposed to a final state), its dispatch identity never changes once given,
-- its identity (turn, position, proposal, tool, input) never changes, and a
-- final unit is immutable: an `unknown` effect stays unknown. Its result is a
-- result of the same Run. Units go only with their Run, by cascade.
CREATE FUNCTION sourcebound.run_tool_units_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    IF sourcebound.run_parent_alive(OLD.run_id) THEN
      RAISE EXCEPTION 'sourcebound: tool unit % cannot be deleted; delete its run to erase it', OLD.proposal_id
        USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN OLD;
  END IF;
  IF TG_OP = 'INSERT' THEN
    IF NEW.status <> 'proposed' THEN
      RAISE EXCEPTION 'sourcebound: tool unit % must start as proposed', NEW.proposal_id
        USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM sourcebound.run_turns WHERE seq = NEW.turn_seq AND run_id = NEW.run_id AND kind = 'model') THEN
      RAISE EXCEPTION 'sourcebound: tool unit % must belong to a model turn of its run', NEW.proposal_id
        USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
  END IF;
  IF OLD.status IN ('settled', 'failed', 'unknown') THEN
    RAISE EXCEPTION 'sourcebound: tool unit % is % and immutable', OLD.proposal_id, OLD.status
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  IF NEW.run_id <> OLD.run_id OR NEW.turn_seq <> OLD.turn_seq OR NEW.position <> OLD.position
     OR NEW.proposal_id <> OLD.proposal_id OR NEW.tool_name <> OLD.tool_name OR NEW.input <> OLD.input
     OR NEW.created_at <> OLD.created_at THEN
    RAISE EXCEPTION 'sourcebound: the identity of tool unit % cannot change', OLD.proposal_id
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  IF OLD.dispatch_id IS NOT NULL AND NEW.dispatch_id IS DISTINCT FROM OLD.dispatch_id THEN
    RAISE EXCEPTION 'sourcebound: tool unit % was dispatched as %; its dispatch identity cannot change', OLD.proposal_id, OLD.dispatch_id
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  IF NEW.status = 'proposed' OR (OLD.status = 'dispatched' AND NEW.status = 'dispatched') THEN
    RAISE EXCEPTION 'sourcebound: tool unit % cannot go from % to %', OLD.proposal_id, OLD.status, NEW.status
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  IF NEW.result_id IS NOT NULL AND NOT EXISTS (
    SELECT 1 FROM sourcebound.run_results
    WHERE id = NEW.result_id AND version = NEW.result_version AND run_id = NEW.run_id) THEN
    RAISE EXCEPTION 'sourcebound: the result of tool unit % must be a result of its run', OLD.proposal_id
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  RETURN NEW;
END
$$;
--> statement-breakpoint
CREATE TRIGGER run_tool_units_guard BEFORE INSERT OR UPDATE OR DELETE ON sourcebound.run_tool_units
  FOR EACH ROW EXECUTE FUNCTION sourcebound.run_tool_units_guard();
