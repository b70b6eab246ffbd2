/**
 * Result store statements of run compaction: versioned, immutable result bodies (migration 0009
 * computes their sizes and hash).
 */
import type { Queryable } from './run-history.ts';

export interface CatalogRow {
  resultId: string;
  version: number;
  bytes: number;
  lines: number;
  sha256: string;
  label: string | null;
}

/** Stores a new version of `resultId` (version 1 when new); size, lines and hash are computed by the database. */
export async function runResultInsert(db: Queryable, r: { runId: string; resultId: string; kind: 'external' | 'tool_result'; label: string | null; content: string }): Promise<CatalogRow> {
  const { rows } = await db.query<CatalogRow>(
    `insert into sourcebound.run_results (id, version, run_id, kind, label, content)
     values ($1, coalesce((select max(version) + 1 from sourcebound.run_results where id = $1), 1), $2, $3, $4, $5)
     returning id as "resultId", version, byte_size as bytes, line_count as lines, sha256, label`,
    [r.resultId, r.runId, r.kind, r.label, r.content]);
  return rows[0]!;
}

/** The bodies of the given result versions of a Run, keyed `id:version`. */
export async function runResultBodies(db: Queryable, runId: string, refs: readonly { resultId: string; version: number }[]): Promise<Map<string, string>> {
  const bodies = new Map<string, string>();
  if (refs.length === 0) return bodies;
  const { rows } = await db.query<{ id: string; version: number; content: string }>(
    `select x.id, x.version, x.content from sourcebound.run_results x
     join unnest($2::uuid[], $3::int[]) as w(id, version) on w.id = x.id and w.version = x.version
     where x.run_id = $1`, [runId, refs.map((r) => r.resultId), refs.map((r) => r.version)]);
  for (const r of rows) bodies.set(`${r.id}:${r.version}`, r.content);
  return bodies;
}

/** The first `chars` characters of the given result versions of a Run, keyed `id:version`. */
export async function runResultExcerpts(db: Queryable, runId: string, refs: readonly { resultId: string; version: number }[], chars: number): Promise<Map<string, string>> {
  const excerpts = new Map<string, string>();
  if (refs.length === 0) return excerpts;
  const { rows } = await db.query<{ id: string; version: number; excerpt: string }>(
    `select x.id, x.version, left(x.content, $4) as excerpt from sourcebound.run_results x
     join unnest($2::uuid[], $3::int[]) as w(id, version) on w.id = x.id and w.version = x.version
     where x.run_id = $1`, [runId, refs.map((r) => r.resultId), refs.map((r) => r.version), chars]);
  for (const r of rows) excerpts.set(`${r.id}:${r.version}`, r.excerpt);
  return excerpts;
}

/** Metadata of one result version of a Run. */
export async function runResultMetaGet(db: Queryable, runId: string, resultId: string, version: number): Promise<(CatalogRow & { kind: string }) | null> {
  const { rows } = await db.query<CatalogRow & { kind: string }>(
    `select id as "resultId", version, byte_size as bytes, line_count as lines, sha256, label, kind
     from sourcebound.run_results where run_id = $1 and id = $2 and version = $3`, [runId, resultId, version]);
  return rows[0] ?? null;
}

export type ResultSlice =
  | { kind: 'all' }
  | { kind: 'bytes'; start: number; end: number }
  | { kind: 'lines'; from: number; to: number };

/** A result version (whole, a byte slice as raw bytes, or lines from..to, 1-based inclusive) of a Run in `scope`. */
export async function runResultRead(db: Queryable, runId: string, scope: string, resultId: string, version: number, slice: ResultSlice): Promise<(CatalogRow & { text: string | null; raw: Buffer | null; lineOffset: number | null }) | null> {
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
       case when $5::text = 'bytes' then substring(convert_to(x.content, 'UTF8') from $6::int + 1 for greatest($7::int - $6::int, 0)) end as raw
     from sourcebound.run_results x
     join sourcebound.runs r on r.id = x.run_id
     join sourcebound.conversations c on c.id = r.conversation_id
     where x.run_id = $1 and c.scope = $2 and x.id = $3 and x.version = $4`,
    [runId, scope, resultId, version, slice.kind,
      slice.kind === 'bytes' ? slice.start : slice.kind === 'lines' ? slice.from : null,
      slice.kind === 'bytes' ? slice.end : slice.kind === 'lines' ? slice.to : null]);
  return rows[0] ?? null;
}

/** The newest version of every result of a Run (for listing). */
export async function runResultsList(db: Queryable, runId: string): Promise<(CatalogRow & { kind: string })[]> {
  const { rows } = await db.query<CatalogRow & { kind: string }>(
    `select id as "resultId", version, byte_size as bytes, line_count as lines, sha256, label, kind
     from sourcebound.run_results where run_id = $1 order by created_at, id, version`, [runId]);
  return rows;
}
