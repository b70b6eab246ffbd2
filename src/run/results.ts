import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { runInScopeGet } from '../db/queries/run-history.ts';
import { runResultInsert, runResultRead, type ResultSlice } from '../db/queries/run-results.ts';
import { historyErrorFrom, ResultNotFoundError, RunHistoryError, RunNotFoundError } from './run-errors.ts';
import { INT4_MAX, isInt4, isUuid, runIdOf, toStoredText } from './stored.ts';
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
 * Stores a result version of the Run and returns its catalog entry. The
 * content is stored as a text column holds it (toStoredText: a NUL or a lone
 * surrogate becomes U+FFFD); its sizes, hash and every reread are of that form.
 * @throws RunNotFoundError when the Run is not in `scope`.
 * @throws RunHistoryError when `resultId` belongs to another Run or is a tool result body.
 */
export async function storeResult(options: StoreResultOptions): Promise<ResultMeta> {
  const { pool, scope } = options;
  const runId = runIdOf(options.runId, scope);
  if (typeof options.content !== 'string') throw new RunHistoryError('storeResult: content must be a string');
  if (options.label !== undefined && options.label !== null && typeof options.label !== 'string')
    throw new RunHistoryError('storeResult: label must be a string');
  const content = toStoredText(options.content);
  const label = options.label === undefined || options.label === null ? null : toStoredText(options.label);
  if (!(await runInScopeGet(pool, runId, scope))) throw new RunNotFoundError(`run ${runId} not found in scope ${scope}`);
  try {
    const row = await runResultInsert(pool, { runId, resultId: options.resultId ?? randomUUID(), kind: 'external', label, content });
    return { resultId: row.resultId, version: row.version, bytes: row.bytes, lines: row.lines, sha256: row.sha256, label: row.label };
  } catch (error) {
    throw historyErrorFrom(error, 'storeResult');
  }
}

/**
 * A byte range [start, end) of the UTF-8 encoding, or lines from..to (1-based,
 * inclusive; lines split on "\n"). A start or a first line past 2147483647 is
 * refused (no result is that large); an end or a last line past the result
 * means its end.
 */
export type ResultRange = { bytes: { start: number; end?: number } } | { lines: { from: number; to?: number } };

/** The most bytes one reread returns unless told otherwise: the default inline limit, so a reread recorded as a tool result still shows whole. */
export const READ_MAX_BYTES = 32 * 1024;

export interface ReadResultOptions {
  pool: pg.Pool;
  runId: string;
  scope: string;
  resultId: string;
  version: number;
  range?: ResultRange;
  /** The most UTF-8 bytes returned, whatever the range (a line range of one long line included). (Default: 32768) */
  maxBytes?: number;
}

export interface ReadResult extends ResultMeta {
  content: string;
  /** What `content` is: the whole version, the bytes actually returned (cut to whole characters), or the lines. */
  range: { kind: 'all' } | { kind: 'bytes'; start: number; end: number } | { kind: 'lines'; from: number; to: number };
  /** The range asked for held more than `maxBytes`: `content` is its beginning, cut at a character boundary. */
  truncated: boolean;
  /**
   * Where to go on reading when truncated, else null: a byte range of the whole
   * version that ends where the range asked for ends (a cut line range goes on
   * to the end of its last line, never into the lines after it).
   */
  next: ResultRange | null;
}

/**
 * Reads an exact result version, whole or a range, never more than
 * `maxBytes` (a reread recorded as a tool result must not bring a whole
 * 300 KB body back inline). A byte range is narrowed to whole UTF-8
 * characters and the range actually returned is reported; a cut read says
 * where to go on (`next`).
 * @throws ResultNotFoundError when the version does not exist in this Run and scope (an id that is not a uuid, or a
 * version that is not an integer from 1 to 2147483647, never does).
 * @throws RangeError for an unusable range or maxBytes.
 */
export async function readResult(options: ReadResultOptions): Promise<ReadResult> {
  const { pool, runId, scope, resultId, version, range } = options;
  const maxBytes = options.maxBytes ?? READ_MAX_BYTES;
  if (!Number.isSafeInteger(maxBytes) || maxBytes < 4) throw new RangeError(`maxBytes must be an integer of at least 4, got ${maxBytes}`);
  let slice: ResultSlice = { kind: 'all' };
  // Positions are integer columns' values in the query: a start past INT4_MAX is refused, an end is clamped to it.
  if (range && 'bytes' in range) {
    const start = range.bytes.start;
    const end = range.bytes.end ?? Number.MAX_SAFE_INTEGER;
    if (!isInt4(start) || !Number.isSafeInteger(end) || end < start)
      throw new RangeError(`invalid byte range ${start}..${end} (start from 0 to ${INT4_MAX})`);
    // At most maxBytes from start (the cut to whole characters may return a few less).
    slice = { kind: 'bytes', start, end: Math.min(end, start + maxBytes, INT4_MAX) };
  } else if (range && 'lines' in range) {
    const from = range.lines.from;
    const to = range.lines.to ?? INT4_MAX;
    if (!isInt4(from, 1) || !Number.isSafeInteger(to) || to < from)
      throw new RangeError(`invalid line range ${from}..${to} (from 1 to ${INT4_MAX})`);
    slice = { kind: 'lines', from, to: Math.min(to, INT4_MAX) };
  }
  const row =
    isUuid(runId) && isUuid(resultId) && isInt4(version, 1) ? await runResultRead(pool, runId, scope, resultId, version, slice) : null;
  if (!row) throw new ResultNotFoundError(`result ${resultId} version ${version} not found in run ${runId}`);
  const meta: ResultMeta = {
    resultId: row.resultId,
    version: row.version,
    bytes: row.bytes,
    lines: row.lines,
    sha256: row.sha256,
    label: row.label,
  };
  if (slice.kind === 'bytes') {
    const raw = row.raw ?? Buffer.alloc(0);
    const { from, to } = wholeCharacters(raw);
    const start = Math.min(slice.start, row.bytes) + from;
    const end = start + (to - from);
    const asked = Math.min(range && 'bytes' in range ? (range.bytes.end ?? row.bytes) : row.bytes, row.bytes);
    const truncated = end < asked;
    return {
      ...meta,
      content: raw.toString('utf8', from, to),
      range: { kind: 'bytes', start, end },
      truncated,
      next: truncated
        ? { bytes: { start: end, ...(range && 'bytes' in range && range.bytes.end !== undefined ? { end: range.bytes.end } : {}) } }
        : null,
    };
  }
  const text = row.text ?? '';
  const cut = cutToBytes(text, maxBytes);
  const offset = slice.kind === 'lines' ? (row.lineOffset ?? 0) : 0;
  // A cut line range goes on by bytes up to the end of its last line (`text` is exactly the lines asked for).
  const next: ResultRange | null =
    cut === null
      ? null
      : slice.kind === 'lines'
        ? { bytes: { start: offset + cut.bytes, end: offset + Buffer.byteLength(text, 'utf8') } }
        : { bytes: { start: cut.bytes } };
  const content = cut === null ? text : cut.text;
  if (slice.kind === 'lines') {
    return {
      ...meta,
      content,
      range: { kind: 'lines', from: slice.from, to: Math.min(slice.to, Math.max(row.lines, slice.from)) },
      truncated: cut !== null,
      next,
    };
  }
  return { ...meta, content, range: { kind: 'all' }, truncated: cut !== null, next };
}

/** `text` cut to at most `maxBytes` UTF-8 bytes at a character boundary, or null when it fits. */
function cutToBytes(text: string, maxBytes: number): { text: string; bytes: number } | null {
  if (text.length * 3 <= maxBytes) return null;
  const buf = Buffer.from(text, 'utf8');
  if (buf.length <= maxBytes) return null;
  let end = maxBytes;
  while (end > 0 && (buf[end]! & 0xc0) === 0x80) end--;
  return { text: buf.toString('utf8', 0, end), bytes: end };
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
