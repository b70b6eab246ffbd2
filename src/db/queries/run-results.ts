/**
 * Result store statements of run compaction: versioned, immutable result bodies (the run_results_guard
 * trigger computes their sizes and hash).
 */
import type { Queryable } from '../queryable.ts';

export interface CatalogRow {
  resultId: string;
  version: number;
  bytes: number;
  lines: number;
  sha256: string;
  label: string | null;
}

/** Stores a new version of `resultId` (version 1 when new); size, lines and hash are computed by the database. */
export async function runResultInsert(
  db: Queryable,
  r: { runId: string; resultId: string; kind: 'external' | 'tool_result'; label: string | null; content: string },
): Promise<CatalogRow> {
  const { rows } = await db.query<CatalogRow>(
    `insert into sourcebound.run_results (id, version, run_id, kind, label, content)
     values ($1, coalesce((select max(version) + 1 from sourcebound.run_results where id = $1), 1), $2, $3, $4, $5)
     returning id as "resultId", version, byte_size as bytes, line_count as lines, sha256, label`,
    [r.resultId, r.runId, r.kind, r.label, r.content],
  );
  return rows[0]!;
}

/** The bodies of the given result versions of a Run, keyed `id:version`. */
export async function runResultBodies(
  db: Queryable,
  runId: string,
  refs: readonly { resultId: string; version: number }[],
): Promise<Map<string, string>> {
  const bodies = new Map<string, string>();
  if (refs.length === 0) return bodies;
  const { rows } = await db.query<{ id: string; version: number; content: string }>(
    `select x.id, x.version, x.content from sourcebound.run_results x
     join unnest($2::uuid[], $3::int[]) as w(id, version) on w.id = x.id and w.version = x.version
     where x.run_id = $1`,
    [runId, refs.map((r) => r.resultId), refs.map((r) => r.version)],
  );
  for (const r of rows) bodies.set(`${r.id}:${r.version}`, r.content);
  return bodies;
}

/** The first `chars` characters of the given result versions of a Run, keyed `id:version`. */
export async function runResultExcerpts(
  db: Queryable,
  runId: string,
  refs: readonly { resultId: string; version: number }[],
  chars: number,
): Promise<Map<string, string>> {
  const excerpts = new Map<string, string>();
  if (refs.length === 0) return excerpts;
  const { rows } = await db.query<{ id: string; version: number; excerpt: string }>(
    `select x.id, x.version, left(x.content, $4) as excerpt from sourcebound.run_results x
     join unnest($2::uuid[], $3::int[]) as w(id, version) on w.id = x.id and w.version = x.version
     where x.run_id = $1`,
    [runId, refs.map((r) => r.resultId), refs.map((r) => r.version), chars],
  );
  for (const r of rows) excerpts.set(`${r.id}:${r.version}`, r.excerpt);
  return excerpts;
}

/** Metadata of one result version of a Run. */
export async function runResultMetaGet(
  db: Queryable,
  runId: string,
  resultId: string,
  version: number,
): Promise<(CatalogRow & { kind: string }) | null> {
  const { rows } = await db.query<CatalogRow & { kind: string }>(
    `select id as "resultId", version, byte_size as bytes, line_count as lines, sha256, label, kind
     from sourcebound.run_results where run_id = $1 and id = $2 and version = $3`,
    [runId, resultId, version],
  );
  return rows[0] ?? null;
}

export type ResultSlice = { kind: 'all' } | { kind: 'bytes'; start: number; end: number } | { kind: 'lines'; from: number; to: number };

/** A result version (whole, a byte slice as raw bytes, or lines from..to, 1-based inclusive) of a Run in `scope`. */
export async function runResultRead(
  db: Queryable,
  runId: string,
  scope: string,
  resultId: string,
  version: number,
  slice: ResultSlice,
): Promise<(CatalogRow & { text: string | null; raw: Buffer | null; lineOffset: number | null }) | null> {
  const { rows } = await db.query<CatalogRow & { text: string | null; raw: Buffer | null; lineOffset: number | null }>(
    `select x.id as "resultId", x.version, x.byte_size as bytes, x.line_count as lines, x.sha256, x.label,
       case $5::text
         when 'all' then x.content
         when 'lines' then array_to_string((string_to_array(x.content, E'\\n'))[$6::int:$7::int], E'\\n')
       end as text,
       -- Where the first line asked for starts, in bytes (so a cut line range can go on by bytes).
       case when $5::text = 'lines' then
         case when $6::int <= 1 then 0
           else octet_length(array_to_string((string_to_array(x.content, E'\\n'))[1:$6::int - 1], E'\\n')) + 1 end
       end as "lineOffset",
       case when $5::text = 'bytes' then substring(convert_to(x.content, 'UTF8') from least($6::bigint + 1, 2147483647)::int for greatest($7::int - $6::int, 0)) end as raw
     from sourcebound.run_results x
     join sourcebound.runs r on r.id = x.run_id
     join sourcebound.conversations c on c.id = r.conversation_id
     where x.run_id = $1 and c.scope = $2 and x.id = $3 and x.version = $4`,
    [
      runId,
      scope,
      resultId,
      version,
      slice.kind,
      slice.kind === 'bytes' ? slice.start : slice.kind === 'lines' ? slice.from : null,
      slice.kind === 'bytes' ? slice.end : slice.kind === 'lines' ? slice.to : null,
    ],
  );
  return rows[0] ?? null;
}

/** The newest version of every result of a Run (for listing). */
export async function runResultsList(db: Queryable, runId: string): Promise<(CatalogRow & { kind: string })[]> {
  const { rows } = await db.query<CatalogRow & { kind: string }>(
    `select id as "resultId", version, byte_size as bytes, line_count as lines, sha256, label, kind
     from sourcebound.run_results where run_id = $1 order by created_at, id, version`,
    [runId],
  );
  return rows;
}

export interface ResultListRow {
  resultId: string;
  version: number;
  bytes: number;
  lines: number;
  label: string | null;
}

/** A page of the Run's stored results (newest version of each, in store order) and how many there are. */
export async function runResultCatalogPage(
  db: Queryable,
  runId: string,
  offset: number,
  limit: number,
): Promise<{ total: number; rows: ResultListRow[] }> {
  const { rows } = await db.query<ResultListRow & { total: number }>(
    `select x.id as "resultId", x.version, x.byte_size as bytes, x.line_count as lines, x.label, count(*) over ()::int as total
     from sourcebound.run_results x
     where x.run_id = $1 and x.kind = 'external'
       and x.version = (select max(y.version) from sourcebound.run_results y where y.id = x.id)
     order by x.created_at, x.id
     offset $2 limit $3`,
    [runId, offset, limit],
  );
  if (rows.length > 0) return { total: rows[0]!.total, rows };
  const { rows: count } = await db.query<{ total: number }>(
    `select count(distinct id)::int as total from sourcebound.run_results where run_id = $1 and kind = 'external'`,
    [runId],
  );
  return { total: count[0]!.total, rows: [] };
}

export interface CompactedCallRow {
  proposalId: string;
  tool: string;
  settlement: string;
  resultId: string | null;
  version: number | null;
  bytes: number | null;
  lines: number | null;
}

/** A page of the tool calls one checkpoint (by segment) covers, with their results' sizes; null when there is no such checkpoint. */
export async function runCheckpointCallsPage(
  db: Queryable,
  runId: string,
  segment: number,
  offset: number,
  limit: number,
): Promise<{ total: number; rows: CompactedCallRow[] } | null> {
  const { rows } = await db.query<{ total: number; calls: CompactedCallRow[] }>(
    `select jsonb_array_length(k.tool_result_refs)::int as total,
       (select coalesce(json_agg(json_build_object(
           'proposalId', r.v->>'proposalId', 'tool', r.v->>'tool', 'settlement', r.v->>'settlement',
           'resultId', r.v->>'resultId', 'version', (r.v->>'version')::int, 'bytes', x.byte_size, 'lines', x.line_count) order by r.ord), '[]')
        from (select v, ord from jsonb_array_elements(k.tool_result_refs) with ordinality as e(v, ord) order by ord offset $3 limit $4) r
        left join sourcebound.run_results x on x.id = (r.v->>'resultId')::uuid and x.version = (r.v->>'version')::int) as calls
     from sourcebound.run_checkpoints k where k.run_id = $1 and k.segment = $2`,
    [runId, segment, offset, limit],
  );
  if (rows.length === 0) return null;
  return { total: rows[0]!.total, rows: rows[0]!.calls };
}
