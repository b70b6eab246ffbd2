import type pg from 'pg';
import { runInScopeGet } from '../db/queries/run-history.ts';
import { runCheckpointCallsPage, runResultCatalogPage } from '../db/queries/run-results.ts';
import { RunHistoryError, RunNotFoundError } from './run-errors.ts';
import { READ_MAX_BYTES, readResult, type ResultRange } from './results.ts';
import { INT4_MAX, runIdOf } from './stored.ts';

/**
 * The `read_result` tool: how the model rereads what the request shows only
 * by reference, excerpt or catalog line. The request's notes name it (the
 * catalog's "... and N older", a checkpoint's "list them with read_result
 * {"checkpoint": n}"), so an application that offers its schema and routes
 * its calls to readResultTool gets bounded rereads without writing any.
 * Every answer is at most `maxBytes` (32 KiB), and says how to go on.
 */

/** The tool schema to offer the model (Anthropic `tools` entry). */
export const READ_RESULT_TOOL = Object.freeze({
  name: 'read_result',
  description:
    'Reread a stored result by id and version: whole, a byte range (startByte, endByte) or a line range (fromLine, toLine, 1-based). ' +
    'Answers are at most 32 KiB; a cut answer says where to go on. {"catalog": {"offset": 0}} lists stored results; ' +
    '{"checkpoint": n} lists the tool calls a checkpoint summary covers, with their result ids.',
  input_schema: Object.freeze({
    type: 'object',
    properties: Object.freeze({
      resultId: { type: 'string' },
      version: { type: 'integer', minimum: 1 },
      startByte: { type: 'integer', minimum: 0 },
      endByte: { type: 'integer', minimum: 0 },
      fromLine: { type: 'integer', minimum: 1 },
      toLine: { type: 'integer', minimum: 1 },
      catalog: { type: 'object', properties: { offset: { type: 'integer', minimum: 0 }, limit: { type: 'integer', minimum: 1 } } },
      checkpoint: { type: 'integer', minimum: 1 },
      offset: { type: 'integer', minimum: 0 },
      limit: { type: 'integer', minimum: 1 },
    }),
  }),
});

export interface ReadResultToolOptions {
  pool: pg.Pool;
  runId: string;
  scope: string;
  /** The tool call's input, as the model sent it. */
  input: unknown;
  /** Most bytes of the answer, at least 516 (512 are kept for its header and its way on). (Default: 32768) */
  maxBytes?: number;
}

/** Entries one listing returns at most (each line is about 120 bytes: far under the answer's bound). */
const PAGE = 50;

/** Bytes of an answer kept for its header and its way on (together under 300 bytes: a uuid and a few integers). */
const FRAME_RESERVE = 512;
/** The least maxBytes: the reserve and a read of one character. */
const MIN_ANSWER_BYTES = FRAME_RESERVE + 4;

/**
 * Answers one `read_result` call as text for its tool result.
 * @throws RunHistoryError for an input that asks for nothing it can answer, or a number out of range (the call then failed).
 * @throws ResultNotFoundError / RunNotFoundError when the result or Run is not there.
 * @throws RangeError for a maxBytes that is not an integer of at least 516 (the answer could not keep to it).
 */
export async function readResultTool(options: ReadResultToolOptions): Promise<string> {
  const { pool, scope } = options;
  const runId = runIdOf(options.runId, scope);
  const maxBytes = options.maxBytes ?? READ_MAX_BYTES;
  // Under it the read was clamped to 4 bytes and the header and the way on broke the bound (maxBytes 200: 204 bytes).
  if (!Number.isSafeInteger(maxBytes) || maxBytes < MIN_ANSWER_BYTES)
    throw new RangeError(`maxBytes must be an integer of at least ${MIN_ANSWER_BYTES}, got ${String(maxBytes)}`);
  const input = (options.input ?? {}) as Record<string, unknown>;
  // The model's numbers end up in integer columns and positions: past INT4_MAX is its mistake, told as one
  // (an end, endByte or toLine, may be larger: past the result it means its end, as in readResult).
  const int = (v: unknown, name: string, min: number, max = INT4_MAX): number | undefined => {
    if (v === undefined || v === null) return undefined;
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min || v > max)
      throw new RunHistoryError(`read_result: ${name} must be an integer from ${min} to ${max}`);
    return v;
  };

  if (input.catalog !== undefined || input.checkpoint !== undefined) {
    if (!(await runInScopeGet(pool, runId, scope))) throw new RunNotFoundError(`run ${runId} not found in scope ${scope}`);
    const page = (typeof input.catalog === 'object' && input.catalog !== null ? input.catalog : input) as Record<string, unknown>;
    const offset = int(page.offset, 'offset', 0) ?? 0;
    const limit = Math.min(int(page.limit, 'limit', 1) ?? PAGE, PAGE);
    if (input.checkpoint !== undefined) {
      const segment = int(input.checkpoint, 'checkpoint', 1)!;
      const calls = await runCheckpointCallsPage(pool, runId, segment, offset, limit);
      if (calls === null) throw new RunHistoryError(`read_result: no checkpoint ${segment} in this run`);
      const lines = calls.rows.map(
        (c) =>
          `- ${c.proposalId} ${c.tool}: ${c.settlement}${c.resultId ? `, result ${c.resultId} v${c.version} (${c.bytes} bytes, ${c.lines} lines)` : ', no result'}`,
      );
      return bounded(
        `Tool calls of checkpoint ${segment}: ${offset + 1}-${offset + calls.rows.length} of ${calls.total}${more(offset, calls.rows.length, calls.total, segment)}\n${lines.join('\n')}`,
        maxBytes,
      );
    }
    const catalog = await runResultCatalogPage(pool, runId, offset, limit);
    const lines = catalog.rows.map(
      (c) =>
        `- ${c.resultId} v${c.version}: ${c.bytes} bytes, ${c.lines} lines${c.label ? `, ${c.label.replace(/\s+/g, ' ').slice(0, 80)}` : ''}`,
    );
    return bounded(
      `Stored results ${offset + 1}-${offset + catalog.rows.length} of ${catalog.total}${more(offset, catalog.rows.length, catalog.total, null)}\n${lines.join('\n')}`,
      maxBytes,
    );
  }

  if (typeof input.resultId !== 'string' || input.resultId === '')
    throw new RunHistoryError('read_result: give resultId and version, {"catalog": {}} or {"checkpoint": n}');
  const version = int(input.version, 'version', 1);
  if (version === undefined)
    throw new RunHistoryError('read_result: version is required (results are versioned; the catalog lists each version)');
  const startByte = int(input.startByte, 'startByte', 0);
  const endByte = int(input.endByte, 'endByte', 0, Number.MAX_SAFE_INTEGER);
  const fromLine = int(input.fromLine, 'fromLine', 1);
  const toLine = int(input.toLine, 'toLine', 1, Number.MAX_SAFE_INTEGER);
  let range: ResultRange | undefined;
  if (startByte !== undefined || endByte !== undefined)
    range = { bytes: { start: startByte ?? 0, ...(endByte === undefined ? {} : { end: endByte }) } };
  else if (fromLine !== undefined || toLine !== undefined)
    range = { lines: { from: fromLine ?? 1, ...(toLine === undefined ? {} : { to: toLine }) } };
  // The header and the "go on" line take some of the answer's bytes.
  const read = await readResult({ pool, runId, scope, resultId: input.resultId, version, range, maxBytes: maxBytes - FRAME_RESERVE }).catch(
    (error) => {
      // A range the model got wrong (an end before its start) is its call's failure, like any other input.
      throw error instanceof RangeError ? new RunHistoryError(`read_result: ${error.message}`, { cause: error }) : error;
    },
  );
  const where =
    read.range.kind === 'bytes'
      ? `bytes ${read.range.start}-${read.range.end}`
      : read.range.kind === 'lines'
        ? `lines ${read.range.from}-${read.range.to}`
        : 'whole';
  // The way on ends where the asked range ends (a cut line range: the end of its last line).
  const next = read.next !== null && 'bytes' in read.next ? read.next.bytes : null;
  const until = next?.end === undefined ? '' : `, "endByte": ${next.end}`;
  const tail =
    next === null
      ? ''
      : `\n[cut at ${maxBytes - FRAME_RESERVE} bytes: go on with {"resultId": "${read.resultId}", "version": ${read.version}, "startByte": ${next.start}${until}}]`;
  return `[result ${read.resultId} version ${read.version}, ${where} of ${read.bytes} bytes]\n${read.content}${tail}`;
}

function more(offset: number, shown: number, total: number, checkpoint: number | null): string {
  if (offset + shown >= total) return '';
  const next =
    checkpoint === null ? `{"catalog": {"offset": ${offset + shown}}}` : `{"checkpoint": ${checkpoint}, "offset": ${offset + shown}}`;
  return ` (more: ${next})`;
}

/** `text` within `maxBytes` (a listing never needs it at PAGE entries, but the bound is the tool's promise). */
function bounded(text: string, maxBytes: number): string {
  const buf = Buffer.from(text, 'utf8');
  if (buf.length <= maxBytes) return text;
  let end = maxBytes;
  while (end > 0 && (buf[end]! & 0xc0) === 0x80) end--;
  return buf.toString('utf8', 0, end);
}
