import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { runInScopeGet } from '../db/queries/run-history.ts';
import { runResultInsert, runResultRead, type ResultSlice } from '../db/queries/run-results.ts';
import { historyErrorFrom, ResultNotFoundError, RunHistoryError, RunNotFoundError } from './errors.ts';
import type { ResultMeta } from './types.ts';

/**
 * The result store: large tool outputs and documents live here, versioned and
 * immutable; the request carries a catalog entry or a reference, and the
 * model rereads the exact version, or a byte or line range of it.
 */

export interface StoreResultOptions {
  pool: pg.Pool;
  runId: string;
  scope: string;
  content: string;
  /** Store a new version of this result (its next version number); omitted: a new result, version 1. */
  resultId?: string;
  /** A short description shown in the catalog. */
  label?: string | null;
}

/**
 * Stores a result version of the Run and returns its catalog entry.
 * @throws RunNotFoundError when the Run is not in `scope`.
 * @throws RunHistoryError when `resultId` belongs to another Run or is a tool result body.
 */
export async function storeResult(options: StoreResultOptions): Promise<ResultMeta> {
  const { pool, runId, scope, content } = options;
  if (typeof content !== 'string') throw new RunHistoryError('storeResult: content must be a string');
  if (!(await runInScopeGet(pool, runId, scope))) throw new RunNotFoundError(`run ${runId} not found in scope ${scope}`);
  try {
    const row = await runResultInsert(pool, { runId, resultId: options.resultId ?? randomUUID(), kind: 'external', label: options.label ?? null, content });
    return { resultId: row.resultId, version: row.version, bytes: row.bytes, lines: row.lines, sha256: row.sha256, label: row.label };
  } catch (error) {
    throw historyErrorFrom(error, 'storeResult');
  }
}

/** A byte range [start, end) of the UTF-8 encoding, or lines from..to (1-based, inclusive; lines split on "\n"). */
export type ResultRange = { bytes: { start: number; end?: number } } | { lines: { from: number; to?: number } };

export interface ReadResultOptions {
  pool: pg.Pool;
  runId: string;
  scope: string;
  resultId: string;
  version: number;
  range?: ResultRange;
}

export interface ReadResult extends ResultMeta {
  content: string;
  /** What `content` is: the whole version, the bytes actually returned (cut to whole characters), or the lines. */
  range: { kind: 'all' } | { kind: 'bytes'; start: number; end: number } | { kind: 'lines'; from: number; to: number };
}

/**
 * Reads an exact result version, whole or a range. A byte range is narrowed to
 * whole UTF-8 characters and the range actually returned is reported.
 * @throws ResultNotFoundError when the version does not exist in this Run and scope.
 */
export async function readResult(options: ReadResultOptions): Promise<ReadResult> {
  const { pool, runId, scope, resultId, version, range } = options;
  let slice: ResultSlice = { kind: 'all' };
  if (range && 'bytes' in range) {
    const start = range.bytes.start;
    const end = range.bytes.end ?? Number.MAX_SAFE_INTEGER;
    if (!Number.isSafeInteger(start) || start < 0 || !Number.isSafeInteger(end) || end < start) throw new RangeError(`invalid byte range ${start}..${end}`);
    slice = { kind: 'bytes', start, end: Math.min(end, 2 ** 31 - 1) };
  } else if (range && 'lines' in range) {
    const from = range.lines.from;
    const to = range.lines.to ?? 2 ** 31 - 1;
    if (!Number.isSafeInteger(from) || from < 1 || !Number.isSafeInteger(to) || to < from) throw new RangeError(`invalid line range ${from}..${to}`);
    slice = { kind: 'lines', from, to: Math.min(to, 2 ** 31 - 1) };
  }
  let row;
  try {
    row = await runResultRead(pool, runId, scope, resultId, version, slice);
  } catch (error) {
    if ((error as { code?: string }).code === '22P02') row = null; // not a uuid: no such result
    else throw error;
  }
  if (!row) throw new ResultNotFoundError(`result ${resultId} version ${version} not found in run ${runId}`);
  const meta: ResultMeta = { resultId: row.resultId, version: row.version, bytes: row.bytes, lines: row.lines, sha256: row.sha256, label: row.label };
  if (slice.kind === 'bytes') {
    const raw = row.raw ?? Buffer.alloc(0);
    const { from, to } = wholeCharacters(raw);
    const start = Math.min(slice.start, row.bytes) + from;
    return { ...meta, content: raw.toString('utf8', from, to), range: { kind: 'bytes', start, end: start + (to - from) } };
  }
  if (slice.kind === 'lines') {
    return { ...meta, content: row.text ?? '', range: { kind: 'lines', from: slice.from, to: Math.min(slice.to, Math.max(row.lines, slice.from)) } };
  }
  return { ...meta, content: row.text ?? '', range: { kind: 'all' } };
}

/** The part of `raw` that starts and ends on UTF-8 character boundaries. */
function wholeCharacters(raw: Buffer): { from: number; to: number } {
  let from = 0;
  while (from < raw.length && (raw[from]! & 0xc0) === 0x80) from++;
  let to = raw.length;
  // Find the last lead byte and drop its sequence if it is incomplete.
  let lead = to - 1;
  while (lead >= from && (raw[lead]! & 0xc0) === 0x80) lead--;
  if (lead >= from) {
    const b = raw[lead]!;
    const need = b < 0x80 ? 1 : b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : 2;
    if (lead + need > to) to = lead;
  }
  return { from, to };
}
