-- Invariant: a stored result version is immutable and described truthfully.
-- The model rereads a result by id and exact version, so a version never
-- changes; its byte size (UTF-8), line count (newlines + 1, 0 when empty),
-- size as a JSON string (what it adds to a serialized request; the same
-- escapes as JavaScript's JSON.stringify) and SHA-256 are computed here from
-- the content, never taken from a caller; the
-- versions of one id are consecutive and stay in one Run. Results go only with
-- their Run, by cascade.
CREATE FUNCTION sourcebound.run_results_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    IF sourcebound.run_parent_alive(OLD.run_id) THEN
      RAISE EXCEPTION 'sourcebound: result % version % cannot be deleted; delete its run to erase it', OLD.id, OLD.version
        USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN OLD;
  END IF;
  IF TG_OP = 'UPDATE' THEN
    RAISE EXCEPTION 'sourcebound: result % version % is immutable; store a new version', OLD.id, OLD.version
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  IF NEW.version > 1 AND NOT EXISTS (
    SELECT 1 FROM sourcebound.run_results
    WHERE id = NEW.id AND version = NEW.version - 1 AND run_id = NEW.run_id AND kind = NEW.kind) THEN
    RAISE EXCEPTION 'sourcebound: result % version % must follow version % of the same run', NEW.id, NEW.version, NEW.version - 1
      USING ERRCODE = 'integrity_constraint_violation';
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
