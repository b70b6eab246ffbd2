CREATE TABLE "sourcebound"."scope_call_windows" (
	"scope" text NOT NULL,
	"hour_start" timestamp with time zone NOT NULL,
	"calls" integer NOT NULL,
	CONSTRAINT "scope_call_windows_pkey" PRIMARY KEY("scope","hour_start"),
	CONSTRAINT "scope_call_windows_calls_positive" CHECK ("sourcebound"."scope_call_windows"."calls" > 0)
);
--> statement-breakpoint
-- Admits one summarizer call for a scope (tenant) against its hourly limit,
-- across the fleet: counts it in the scope's row for this clock hour and
-- returns NULL; when the hour's calls are spent, counts nothing and returns
-- the start of the next hour (the range is deferred until then, no attempt
-- spent). One statement decides, so concurrent workers never admit more than
-- the limit. p_limit 0: no limit, nothing counted. The scope's older rows go
-- with its first call of an hour.
CREATE FUNCTION sourcebound.scope_call_admit(p_scope text, p_limit integer) RETURNS timestamp with time zone
LANGUAGE plpgsql SECURITY DEFINER SET search_path = sourcebound, pg_temp AS $$
DECLARE
  v_hour timestamptz := date_trunc('hour', now());
  v_calls integer;
BEGIN
  IF p_limit <= 0 THEN
    RETURN NULL;
  END IF;
  INSERT INTO sourcebound.scope_call_windows AS w (scope, hour_start, calls) VALUES (p_scope, v_hour, 1)
  ON CONFLICT (scope, hour_start) DO UPDATE SET calls = w.calls + 1 WHERE w.calls < p_limit
  RETURNING w.calls INTO v_calls;
  IF v_calls IS NULL THEN
    RETURN v_hour + interval '1 hour';
  END IF;
  IF v_calls = 1 THEN
    DELETE FROM sourcebound.scope_call_windows WHERE scope = p_scope AND hour_start < v_hour;
  END IF;
  RETURN NULL;
END
$$;
--> statement-breakpoint
REVOKE EXECUTE ON FUNCTION sourcebound.scope_call_admit(text, integer) FROM PUBLIC;
--> statement-breakpoint
SELECT sourcebound.grant_runtime_roles();
