-- Invariant: a checkpoint is an immutable, non-overlapping link in its Run's
-- chain, bound to a genuine summary. A checkpoint never changes and is deleted
-- only with its Run or conversation. On insert: it follows the Run's newest
-- checkpoint (segment + 1, that predecessor), its range starts after the
-- predecessor's range with no model turn left between them, its compacted
-- turns are model turns of the Run, strictly increasing, spanning exactly
-- from_seq..to_seq, every tool unit of them is settled, failed or unknown (a
-- call is never compacted without its result, nor while its effect is
-- pending), and its summary request is an `ok` receipt of the same Run,
-- predecessor, range, source hash and prompt version carrying the same text.
CREATE FUNCTION sourcebound.run_checkpoints_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v_last sourcebound.run_checkpoints%ROWTYPE;
  v_after bigint := 0;
  v_n integer := cardinality(NEW.compacted_seqs);
  v_req sourcebound.run_summary_requests%ROWTYPE;
BEGIN
  IF TG_OP = 'DELETE' THEN
    IF sourcebound.run_parent_alive(OLD.run_id) THEN
      RAISE EXCEPTION 'sourcebound: checkpoint % cannot be deleted; delete its run to erase it', OLD.id
        USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN OLD;
  END IF;
  IF TG_OP = 'UPDATE' THEN
    RAISE EXCEPTION 'sourcebound: checkpoint % is immutable', OLD.id
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;

  SELECT * INTO v_last FROM sourcebound.run_checkpoints WHERE run_id = NEW.run_id ORDER BY segment DESC LIMIT 1;
  IF FOUND THEN
    IF NEW.predecessor_id IS DISTINCT FROM v_last.id OR NEW.segment <> v_last.segment + 1 THEN
      RAISE EXCEPTION 'sourcebound: checkpoint must follow the newest checkpoint % of run %', v_last.id, NEW.run_id
        USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    v_after := v_last.to_seq;
  ELSIF NEW.predecessor_id IS NOT NULL OR NEW.segment <> 1 THEN
    RAISE EXCEPTION 'sourcebound: the first checkpoint of run % has segment 1 and no predecessor', NEW.run_id
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  IF NEW.from_seq <= v_after THEN
    RAISE EXCEPTION 'sourcebound: checkpoint range %..% overlaps the range before it (ending at %)', NEW.from_seq, NEW.to_seq, v_after
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  IF NEW.compacted_seqs[1] <> NEW.from_seq OR NEW.compacted_seqs[v_n] <> NEW.to_seq
     OR EXISTS (SELECT 1 FROM generate_series(1, v_n - 1) i WHERE NEW.compacted_seqs[i + 1] <= NEW.compacted_seqs[i]) THEN
    RAISE EXCEPTION 'sourcebound: compacted turns must increase strictly from from_seq to to_seq'
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  IF (SELECT count(*) FROM sourcebound.run_turns
      WHERE run_id = NEW.run_id AND kind = 'model' AND seq = ANY (NEW.compacted_seqs)) <> v_n
     OR EXISTS (SELECT 1 FROM sourcebound.run_turns
                WHERE run_id = NEW.run_id AND kind = 'model' AND seq > v_after AND seq <= NEW.to_seq
                  AND seq <> ALL (NEW.compacted_seqs)) THEN
    RAISE EXCEPTION 'sourcebound: compacted turns must be every model turn of run % from % to %', NEW.run_id, v_after + 1, NEW.to_seq
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  IF EXISTS (SELECT 1 FROM sourcebound.run_tool_units
             WHERE run_id = NEW.run_id AND turn_seq = ANY (NEW.compacted_seqs)
               AND status NOT IN ('settled', 'failed', 'unknown')) THEN
    RAISE EXCEPTION 'sourcebound: a checkpoint cannot compact a tool unit that is not settled'
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;

  SELECT * INTO v_req FROM sourcebound.run_summary_requests WHERE id = NEW.summary_request_id;
  IF NOT FOUND OR v_req.run_id <> NEW.run_id OR v_req.status <> 'ok'
     OR v_req.predecessor_id IS DISTINCT FROM NEW.predecessor_id
     OR v_req.from_seq <> NEW.from_seq OR v_req.to_seq <> NEW.to_seq OR v_req.compacted_seqs <> NEW.compacted_seqs
     OR v_req.source_hash <> NEW.source_hash OR v_req.hash_version <> NEW.hash_version
     OR v_req.prompt_version <> NEW.prompt_version OR v_req.summary <> NEW.summary THEN
    RAISE EXCEPTION 'sourcebound: checkpoint must be bound to an ok summary request of the same run, range and source'
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  RETURN NEW;
END
$$;
--> statement-breakpoint
CREATE TRIGGER run_checkpoints_guard BEFORE INSERT OR UPDATE OR DELETE ON sourcebound.run_checkpoints
  FOR EACH ROW EXECUTE FUNCTION sourcebound.run_checkpoints_guard();
