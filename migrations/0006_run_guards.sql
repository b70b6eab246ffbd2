-- Run guards: the run history (System 2) is append-only and its receipts are
-- facts; the database refuses any write that would rewrite what happened.

-- Shared by every run-history guard: a delete is allowed only while cascading
-- from the Run or its conversation, i.e. when the parent row is already gone.
CREATE FUNCTION sourcebound.run_parent_alive(p_run_id uuid)
RETURNS boolean LANGUAGE sql STABLE AS $$
  SELECT EXISTS (
    SELECT 1 FROM sourcebound.runs r
    JOIN sourcebound.conversations c ON c.id = r.conversation_id
    WHERE r.id = p_run_id)
$$;
--> statement-breakpoint
-- Invariant: a Run's history is append-only and starts with its request. The
-- initial request (revision 0), the corrections (revisions 1, 2, ... without
-- gaps) and the model turns are never changed or deleted; they go only with
-- their Run, by cascade. The request and corrections are carried verbatim into
-- every next request and model turns are bound to checkpoints by source hash:
-- an edit would silently rewrite what happened. A correction racing another
-- writer gets run_correction_revision (src/run/record.ts retries it).
CREATE FUNCTION sourcebound.run_turns_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v_next integer;
BEGIN
  IF TG_OP = 'DELETE' THEN
    IF sourcebound.run_parent_alive(OLD.run_id) THEN
      RAISE EXCEPTION 'sourcebound: run history entry % cannot be deleted; delete its run to erase it', OLD.seq
        USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_turn_delete';
    END IF;
    RETURN OLD;
  END IF;
  IF TG_OP = 'UPDATE' THEN
    RAISE EXCEPTION 'sourcebound: run history entry % is immutable', OLD.seq
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_turn_immutable';
  END IF;
  IF NEW.kind = 'request' THEN
    IF EXISTS (SELECT 1 FROM sourcebound.run_turns WHERE run_id = NEW.run_id) THEN
      RAISE EXCEPTION 'sourcebound: the initial request must be the first entry of run %', NEW.run_id
        USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_request_not_first';
    END IF;
    RETURN NEW;
  END IF;
  SELECT max(revision) + 1 INTO v_next FROM sourcebound.run_turns WHERE run_id = NEW.run_id AND revision IS NOT NULL;
  IF v_next IS NULL THEN
    RAISE EXCEPTION 'sourcebound: run % has no initial request; record it first', NEW.run_id
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_request_missing';
  END IF;
  IF NEW.kind = 'correction' AND NEW.revision <> v_next THEN
    RAISE EXCEPTION 'sourcebound: the next correction of run % is revision %, not %', NEW.run_id, v_next, NEW.revision
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_correction_revision';
  END IF;
  RETURN NEW;
END
$$;
--> statement-breakpoint
CREATE TRIGGER run_turns_guard BEFORE INSERT OR UPDATE OR DELETE ON sourcebound.run_turns
  FOR EACH ROW EXECUTE FUNCTION sourcebound.run_turns_guard();
--> statement-breakpoint
-- Invariant: the receipt of a model request is a fact that never changes; it
-- goes only with its Run.
CREATE FUNCTION sourcebound.run_model_requests_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    IF sourcebound.run_parent_alive(OLD.run_id) THEN
      RAISE EXCEPTION 'sourcebound: model request receipt % cannot be deleted; delete its run to erase it', OLD.id
        USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_model_request_delete';
    END IF;
    RETURN OLD;
  END IF;
  RAISE EXCEPTION 'sourcebound: model request receipt % is immutable', OLD.id
    USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_model_request_immutable';
END
$$;
--> statement-breakpoint
CREATE TRIGGER run_model_requests_guard BEFORE UPDATE OR DELETE ON sourcebound.run_model_requests
  FOR EACH ROW EXECUTE FUNCTION sourcebound.run_model_requests_guard();
--> statement-breakpoint
-- Invariant: a tool call and its result are one unit, one row, created with
-- its model turn as `proposed`; it only moves forward (proposed -> dispatched
-- -> settled | failed | unknown, or straight to a final state), its dispatch
-- identity never changes once given, its identity (turn, position, proposal,
-- tool, input) never changes, and a final unit is immutable: an `unknown`
-- effect stays unknown. Its result is a result of the same Run.
CREATE FUNCTION sourcebound.run_tool_units_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    IF sourcebound.run_parent_alive(OLD.run_id) THEN
      RAISE EXCEPTION 'sourcebound: tool unit % cannot be deleted; delete its run to erase it', OLD.proposal_id
        USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_tool_unit_delete';
    END IF;
    RETURN OLD;
  END IF;
  IF TG_OP = 'INSERT' THEN
    IF NEW.status <> 'proposed' THEN
      RAISE EXCEPTION 'sourcebound: tool unit % must start as proposed', NEW.proposal_id
        USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_tool_unit_not_proposed';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM sourcebound.run_turns WHERE seq = NEW.turn_seq AND run_id = NEW.run_id AND kind = 'model') THEN
      RAISE EXCEPTION 'sourcebound: tool unit % must belong to a model turn of its run', NEW.proposal_id
        USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_tool_unit_turn';
    END IF;
    RETURN NEW;
  END IF;
  IF OLD.status IN ('settled', 'failed', 'unknown') THEN
    RAISE EXCEPTION 'sourcebound: tool unit % is % and immutable', OLD.proposal_id, OLD.status
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_tool_unit_immutable';
  END IF;
  IF NEW.run_id <> OLD.run_id OR NEW.turn_seq <> OLD.turn_seq OR NEW.position <> OLD.position
     OR NEW.proposal_id <> OLD.proposal_id OR NEW.tool_name <> OLD.tool_name OR NEW.input <> OLD.input
     OR NEW.created_at <> OLD.created_at THEN
    RAISE EXCEPTION 'sourcebound: the identity of tool unit % cannot change', OLD.proposal_id
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_tool_unit_identity';
  END IF;
  IF OLD.dispatch_id IS NOT NULL AND NEW.dispatch_id IS DISTINCT FROM OLD.dispatch_id THEN
    RAISE EXCEPTION 'sourcebound: tool unit % was dispatched as %; its dispatch identity cannot change', OLD.proposal_id, OLD.dispatch_id
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_tool_unit_dispatch_identity';
  END IF;
  IF NEW.status = 'proposed' OR (OLD.status = 'dispatched' AND NEW.status = 'dispatched') THEN
    RAISE EXCEPTION 'sourcebound: tool unit % cannot go from % to %', OLD.proposal_id, OLD.status, NEW.status
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_tool_unit_transition';
  END IF;
  IF NEW.result_id IS NOT NULL AND NOT EXISTS (
    SELECT 1 FROM sourcebound.run_results
    WHERE id = NEW.result_id AND version = NEW.result_version AND run_id = NEW.run_id) THEN
    RAISE EXCEPTION 'sourcebound: the result of tool unit % must be a result of its run', OLD.proposal_id
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_tool_unit_result_run';
  END IF;
  RETURN NEW;
END
$$;
--> statement-breakpoint
CREATE TRIGGER run_tool_units_guard BEFORE INSERT OR UPDATE OR DELETE ON sourcebound.run_tool_units
  FOR EACH ROW EXECUTE FUNCTION sourcebound.run_tool_units_guard();
--> statement-breakpoint
-- Invariant: a stored result version is immutable and described truthfully.
-- The model rereads a result by id and exact version, so a version never
-- changes; its byte size (UTF-8), line count (newlines + 1, 0 when empty),
-- size as a JSON string (the escapes of JSON.stringify) and SHA-256 are
-- computed here from the content, never taken from a caller; the versions of
-- one id are consecutive and stay in one Run.
CREATE FUNCTION sourcebound.run_results_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    IF sourcebound.run_parent_alive(OLD.run_id) THEN
      RAISE EXCEPTION 'sourcebound: result % version % cannot be deleted; delete its run to erase it', OLD.id, OLD.version
        USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_result_delete';
    END IF;
    RETURN OLD;
  END IF;
  IF TG_OP = 'UPDATE' THEN
    RAISE EXCEPTION 'sourcebound: result % version % is immutable; store a new version', OLD.id, OLD.version
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_result_immutable';
  END IF;
  IF NEW.version > 1 AND NOT EXISTS (
    SELECT 1 FROM sourcebound.run_results
    WHERE id = NEW.id AND version = NEW.version - 1 AND run_id = NEW.run_id AND kind = NEW.kind) THEN
    RAISE EXCEPTION 'sourcebound: result % version % must follow version % of the same run', NEW.id, NEW.version, NEW.version - 1
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_result_version_gap';
  END IF;
  NEW.byte_size := octet_length(NEW.content);
  NEW.line_count := CASE WHEN NEW.content = '' THEN 0
                         ELSE length(NEW.content) - length(replace(NEW.content, E'\n', '')) + 1 END;
  NEW.json_bytes := octet_length(to_json(NEW.content)::text);
  NEW.sha256 := encode(sha256(convert_to(NEW.content, 'UTF8')), 'hex');
  RETURN NEW;
END
$$;
--> statement-breakpoint
CREATE TRIGGER run_results_guard BEFORE INSERT OR UPDATE OR DELETE ON sourcebound.run_results
  FOR EACH ROW EXECUTE FUNCTION sourcebound.run_results_guard();
--> statement-breakpoint
-- Invariant: a summary request is accounted for exactly once. Its receipt is
-- committed before the model call (`dispatched`) and settled once, to ok |
-- invalid | deferred | unknown | config; a settled receipt and its identity
-- never change (an unknown outcome stays unknown). One candidate identity has
-- at most two dispatches that spent or may spend an attempt, so an unknown
-- outcome is never retried without bound.
CREATE FUNCTION sourcebound.run_summary_requests_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    IF sourcebound.run_parent_alive(OLD.run_id) THEN
      RAISE EXCEPTION 'sourcebound: summary request % cannot be deleted; delete its run to erase it', OLD.id
        USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_summary_request_delete';
    END IF;
    RETURN OLD;
  END IF;
  IF TG_OP = 'INSERT' THEN
    IF NEW.status <> 'dispatched' THEN
      RAISE EXCEPTION 'sourcebound: a summary request receipt is written before dispatch, as dispatched'
        USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_summary_request_not_dispatched';
    END IF;
    IF (SELECT count(*) FROM sourcebound.run_summary_requests
        WHERE identity_key = NEW.identity_key AND (status = 'dispatched' OR spent)) >= 2 THEN
      RAISE EXCEPTION 'sourcebound: summary identity % has spent its two attempts', NEW.identity_key
        USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_summary_attempts_spent';
    END IF;
    RETURN NEW;
  END IF;
  IF OLD.status <> 'dispatched' THEN
    RAISE EXCEPTION 'sourcebound: summary request % is settled (%) and immutable', OLD.id, OLD.status
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_summary_request_immutable';
  END IF;
  IF NEW.status = 'dispatched' THEN
    RAISE EXCEPTION 'sourcebound: summary request % can only be settled', OLD.id
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_summary_request_settle_only';
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
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_summary_request_identity';
  END IF;
  RETURN NEW;
END
$$;
--> statement-breakpoint
CREATE TRIGGER run_summary_requests_guard BEFORE INSERT OR UPDATE OR DELETE ON sourcebound.run_summary_requests
  FOR EACH ROW EXECUTE FUNCTION sourcebound.run_summary_requests_guard();
--> statement-breakpoint
-- Invariant: a checkpoint is an immutable, non-overlapping link in its Run's
-- chain, bound to a genuine summary. On insert: it follows the Run's newest
-- checkpoint (segment + 1, that predecessor), its range starts after the
-- predecessor's with no model turn left between them, its compacted turns are
-- model turns of the Run, strictly increasing, spanning exactly
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
        USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_checkpoint_delete';
    END IF;
    RETURN OLD;
  END IF;
  IF TG_OP = 'UPDATE' THEN
    RAISE EXCEPTION 'sourcebound: checkpoint % is immutable', OLD.id
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_checkpoint_immutable';
  END IF;

  SELECT * INTO v_last FROM sourcebound.run_checkpoints WHERE run_id = NEW.run_id ORDER BY segment DESC LIMIT 1;
  IF FOUND THEN
    IF NEW.predecessor_id IS DISTINCT FROM v_last.id OR NEW.segment <> v_last.segment + 1 THEN
      RAISE EXCEPTION 'sourcebound: checkpoint must follow the newest checkpoint % of run %', v_last.id, NEW.run_id
        USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_checkpoint_chain';
    END IF;
    v_after := v_last.to_seq;
  ELSIF NEW.predecessor_id IS NOT NULL OR NEW.segment <> 1 THEN
    RAISE EXCEPTION 'sourcebound: the first checkpoint of run % has segment 1 and no predecessor', NEW.run_id
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_checkpoint_first';
  END IF;
  IF NEW.from_seq <= v_after THEN
    RAISE EXCEPTION 'sourcebound: checkpoint range %..% overlaps the range before it (ending at %)', NEW.from_seq, NEW.to_seq, v_after
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_checkpoint_overlap';
  END IF;
  IF NEW.compacted_seqs[1] <> NEW.from_seq OR NEW.compacted_seqs[v_n] <> NEW.to_seq
     OR EXISTS (SELECT 1 FROM generate_series(1, v_n - 1) i WHERE NEW.compacted_seqs[i + 1] <= NEW.compacted_seqs[i]) THEN
    RAISE EXCEPTION 'sourcebound: compacted turns must increase strictly from from_seq to to_seq'
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_checkpoint_turn_order';
  END IF;
  IF (SELECT count(*) FROM sourcebound.run_turns
      WHERE run_id = NEW.run_id AND kind = 'model' AND seq = ANY (NEW.compacted_seqs)) <> v_n
     OR EXISTS (SELECT 1 FROM sourcebound.run_turns
                WHERE run_id = NEW.run_id AND kind = 'model' AND seq > v_after AND seq <= NEW.to_seq
                  AND seq <> ALL (NEW.compacted_seqs)) THEN
    RAISE EXCEPTION 'sourcebound: compacted turns must be every model turn of run % from % to %', NEW.run_id, v_after + 1, NEW.to_seq
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_checkpoint_turns';
  END IF;
  IF EXISTS (SELECT 1 FROM sourcebound.run_tool_units
             WHERE run_id = NEW.run_id AND turn_seq = ANY (NEW.compacted_seqs)
               AND status NOT IN ('settled', 'failed', 'unknown')) THEN
    RAISE EXCEPTION 'sourcebound: a checkpoint cannot compact a tool unit that is not settled'
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_checkpoint_unsettled_tool';
  END IF;

  SELECT * INTO v_req FROM sourcebound.run_summary_requests WHERE id = NEW.summary_request_id;
  IF NOT FOUND OR v_req.run_id <> NEW.run_id OR v_req.status <> 'ok'
     OR v_req.predecessor_id IS DISTINCT FROM NEW.predecessor_id
     OR v_req.from_seq <> NEW.from_seq OR v_req.to_seq <> NEW.to_seq OR v_req.compacted_seqs <> NEW.compacted_seqs
     OR v_req.source_hash <> NEW.source_hash OR v_req.hash_version <> NEW.hash_version
     OR v_req.prompt_version <> NEW.prompt_version OR v_req.summary <> NEW.summary THEN
    RAISE EXCEPTION 'sourcebound: checkpoint must be bound to an ok summary request of the same run, range and source'
      USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_checkpoint_summary';
  END IF;
  RETURN NEW;
END
$$;
--> statement-breakpoint
CREATE TRIGGER run_checkpoints_guard BEFORE INSERT OR UPDATE OR DELETE ON sourcebound.run_checkpoints
  FOR EACH ROW EXECUTE FUNCTION sourcebound.run_checkpoints_guard();
--> statement-breakpoint
CREATE TRIGGER run_turns_no_truncate BEFORE TRUNCATE ON sourcebound.run_turns
  FOR EACH STATEMENT EXECUTE FUNCTION sourcebound.refuse_truncate();
--> statement-breakpoint
CREATE TRIGGER run_tool_units_no_truncate BEFORE TRUNCATE ON sourcebound.run_tool_units
  FOR EACH STATEMENT EXECUTE FUNCTION sourcebound.refuse_truncate();
--> statement-breakpoint
CREATE TRIGGER run_results_no_truncate BEFORE TRUNCATE ON sourcebound.run_results
  FOR EACH STATEMENT EXECUTE FUNCTION sourcebound.refuse_truncate();
--> statement-breakpoint
CREATE TRIGGER run_summary_requests_no_truncate BEFORE TRUNCATE ON sourcebound.run_summary_requests
  FOR EACH STATEMENT EXECUTE FUNCTION sourcebound.refuse_truncate();
--> statement-breakpoint
CREATE TRIGGER run_checkpoints_no_truncate BEFORE TRUNCATE ON sourcebound.run_checkpoints
  FOR EACH STATEMENT EXECUTE FUNCTION sourcebound.refuse_truncate();
