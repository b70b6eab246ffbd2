import type pg from 'pg';
import type { Queryable } from '../db/queries/projection.ts';
import { RANGE_SIZE } from '../conversation/plan.ts';
import { projectConversationHistory } from '../projection/project.ts';
import type { ConversationProjection } from '../projection/types.ts';

export interface ProjectCommandArgs {
  pool: Queryable | pg.Pool;
  conversationId: string;
  scope: string;
  budgetBytes: number;
  /** The projection's layout (Default: 'stable'); the command never writes one. */
  layout?: 'stable' | 'newest-first';
  /** Print the projection object as one JSON line instead of the map. */
  json: boolean;
  out: (line: string) => void;
}

/**
 * `sourcebound project`: what the next request would carry. JSON mode prints
 * the projection object; the default prints a map, one line per range of ten
 * (raw, summarized, partial or omitted, and why a summary was not used), the
 * leading run of fully omitted ranges folded into one line, then the totals
 * and the prompt-cache line. It shows what the application's next call would
 * get, but never stores a layout (it is an observer).
 * @throws ConversationNotFoundError when no conversation has this id in this scope.
 */
export async function projectCommand(args: ProjectCommandArgs): Promise<void> {
  const projection = await projectConversationHistory({ ...args, persistLayout: false });
  if (args.json) {
    args.out(JSON.stringify(projection));
    return;
  }
  for (const line of projectionMap(projection)) args.out(line);
}

/** The human map of a projection, line by line. */
export function projectionMap(p: ConversationProjection): string[] {
  const lines = [`conversation ${p.conversationId} (scope ${p.scope}): ${p.pairCount} pairs`];
  const raw = new Set(p.items.flatMap((i) => (i.kind === 'pair' ? [i.pairIndex] : [])));
  const summarized = new Map(p.items.flatMap((i) => (i.kind === 'summary' ? [[i.fromPair, i] as const] : [])));
  const notUsed = new Map(p.summaryNotUsed.map((n) => [n.fromPair, n]));
  const ranges = Math.ceil(p.pairCount / RANGE_SIZE);
  let folded: { from: number; to: number; count: number } | undefined;
  const flush = () => {
    if (folded === undefined) return;
    lines.push(`${span(folded.from, folded.to)}  omitted (budget)${folded.count > 1 ? ` [${folded.count} ranges]` : ''}`);
    folded = undefined;
  };
  for (let k = 0; k < ranges; k++) {
    const from = k * RANGE_SIZE;
    const to = Math.min(from + RANGE_SIZE - 1, p.pairCount - 1);
    const summary = summarized.get(from);
    const why = notUsed.get(from);
    const rawHere = Array.from({ length: to - from + 1 }, (_, i) => from + i).filter((i) => raw.has(i));
    if (summary === undefined && rawHere.length === 0 && why === undefined) {
      // Never reached by the walk: fold the run of such ranges into one line.
      folded = folded === undefined ? { from, to, count: 1 } : { ...folded, to, count: folded.count + 1 };
      continue;
    }
    flush();
    let what: string;
    if (summary !== undefined) what = `summarized (record ${summary.recordId}, ${summary.promptVersion})`;
    else if (rawHere.length === to - from + 1) what = 'raw';
    else if (rawHere.length === 0) what = 'omitted (budget)';
    else what = `partial: ${span(rawHere[0]!, to)} raw, ${span(from, rawHere[0]! - 1)} omitted (budget)`;
    const reason =
      why === undefined ? '' : `; summary not used: ${why.reason}${why.recordId === undefined ? '' : ` (record ${why.recordId})`}`;
    lines.push(`${span(from, to)}  ${what}${reason}`);
  }
  flush();
  const rawCount = raw.size;
  const summarizedPairs = [...summarized.values()].reduce((n, s) => n + (s.toPair - s.fromPair + 1), 0);
  const omittedCount = p.omitted.reduce((n, s) => n + (s.toPair - s.fromPair + 1), 0);
  lines.push(
    `total: ${p.bytes}/${p.budgetBytes} bytes; ${rawCount} pairs raw, ${summarizedPairs} summarized in ${summarized.size} ranges, ${omittedCount} omitted`,
  );
  const c = p.cache;
  lines.push(
    c.mode === 'newest-first'
      ? 'cache: newest-first layout (filled anew on every call)'
      : c.rewrite === null
        ? `cache: stable layout kept; the history extends the previous request's (rewrite at ${p.budgetBytes} bytes, down to ${c.lowWaterBytes})`
        : `cache: stable layout ${c.rewrite === 'first' ? 'made' : `rewritten (${c.rewrite})`}, down to ${c.lowWaterBytes} bytes when the history does not fit`,
  );
  for (const problem of p.problems) lines.push(`problem: ${problem.message}`);
  return lines;
}

function span(from: number, to: number): string {
  return from === to ? `pair ${from}` : `pairs ${from}-${to}`;
}
