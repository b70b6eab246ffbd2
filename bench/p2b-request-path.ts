import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { projectConversationHistory, type ConversationProjection, type ReadEvent } from '../src/projection/index.ts';
import type { BenchContext } from './lib/context.ts';
import type { BenchResult } from './lib/report.ts';
import { benchPool } from './lib/server.ts';
import { requestSplit } from './lib/split.ts';
import { timeStatements, type TimedStatement } from './lib/statements.ts';
import { p50p99, percentile, roundRatios, spread } from './lib/stats.ts';
import { bulkPairs, createConversations } from './lib/writes.ts';
import { BUDGET, summarizeAll } from './p2-projection.ts';

/**
 * P2b the request path: what projectConversationHistory costs the
 * application on every model request, against the read it replaces: one
 * SELECT of the whole conversation's messages in order (what an app does
 * without sourcebound). Conversations of 40, 100 and 1,000 pairs of real
 * text (the shared threads, written set-based as P2 writes them), every
 * plannable range with a completed, source-bound summary; default options
 * (stable layout, layout stored), 64 KiB budget; one pool for both sides.
 *
 * The plain read is an application's own table: `(conversation_id,
 * position)` as its primary key, role and text, filled with the same
 * messages; one statement, the rows in order. Beside it, without a goal, the
 * same read from sourcebound's tables (messages joined to their runs for the
 * order), which an app that stores its messages there would send.
 *
 * Calls are interleaved one by one (sides and sizes rotated), per round a
 * p50 and p99 per side and size; headline: per-round p50 ratio. Afterwards a
 * breakdown pass (statements timed as the client sees them, rows counted by
 * the projection's own `onRead`): where a projection's time goes.
 */
const SIZES = [40, 100, 1000];
const GOALS: Record<number, number> = { 40: 1.5, 100: 1.5, 1000: 1.0 };
const SCOPE = 'bench';

type Side = 'projection' | 'plain' | 'sourcebound';
const PLAIN_READ = 'select role, content from bench_app_messages where conversation_id = $1 order by position';
const SIDES: Side[] = ['projection', 'plain', 'sourcebound'];

export async function benchRequestPath(ctx: BenchContext): Promise<BenchResult> {
  const rounds = ctx.full ? 9 : 5;
  const perRound = ctx.full ? 200 : 40;
  const breakdownCalls = 50;
  const url = await ctx.server.freshDatabase('p2b_request_path');
  const pool = benchPool(url, 4);
  const timer = timeStatements(pool);
  const result: BenchResult = {
    id: 'P2b', title: 'request path: projection versus a plain read of the conversation', status: 'ok', seconds: 0,
    params: { budgetBytes: BUDGET, sizes: SIZES, layout: 'stable (default)', rounds, callsPerRoundSizeAndSide: perRound, breakdownCalls },
    figures: [], headlines: [], notes: [],
  };
  try {
    const conversations = await createConversations(pool, SIZES.length, SCOPE);
    let offset = 0;
    for (const [i, size] of SIZES.entries()) {
      await bulkPairs(pool, [conversations[i]!], size, offset);
      offset += size;
      const ranges = await summarizeAll(pool, conversations[i]!, size);
      ctx.log(`P2b: ${size} pairs, ${ranges} summarized ranges`);
    }
    await pool.query('delete from graphile_worker._private_jobs');
    // The application's own message table: the plain read's floor.
    await pool.query(`create table bench_app_messages (
      conversation_id uuid not null, position int not null, role text not null, content text not null,
      primary key (conversation_id, position))`);
    await pool.query(`insert into bench_app_messages (conversation_id, position, role, content)
      select p.conversation_id, 2 * p.pair_index + (m.role = 'assistant')::int, m.role, m.content
      from sourcebound.pairs p join sourcebound.messages m on m.id in (p.user_message_id, p.assistant_message_id)
      where p.conversation_id = any($1::uuid[])`, [conversations]);
    await pool.query('vacuum analyze');

    const call = async (side: Side, conversationId: string, onRead?: (e: ReadEvent) => void): Promise<{ ms: number; projection?: ConversationProjection; rows?: number }> => {
      const t0 = performance.now();
      if (side === 'projection') {
        const projection = await projectConversationHistory({ pool, conversationId, scope: SCOPE, budgetBytes: BUDGET, onRead });
        return { ms: performance.now() - t0, projection };
      }
      const { rows } = await pool.query(side === 'plain'
        ? PLAIN_READ
        : `select m.role, m.content from sourcebound.messages m join sourcebound.runs r on r.id = m.run_id
           where m.conversation_id = $1 order by r.seq, m.role desc`, [conversationId]);
      return { ms: performance.now() - t0, rows: rows.length };
    };

    // What each side returns, and warm-up (the first projection lays out and stores its layout).
    for (const [i, size] of SIZES.entries()) {
      // The first call lays the history out and stores its layout (a rewrite); later ones only read it.
      timer.start();
      const first = await call('projection', conversations[i]!);
      const firstStatements = timer.stop();
      const p = first.projection!;
      const write = firstStatements.filter((x) => x.kind.includes('projection_layouts'));
      const summaries = p.items.filter((it) => it.kind === 'summary').length;
      const raw = p.items.filter((it) => it.kind === 'pair').length;
      const plain = await pool.query<{ bytes: string }>(
        'select sum(octet_length(content))::text as bytes from bench_app_messages where conversation_id = $1', [conversations[i]!]);
      const rows = (await call('plain', conversations[i]!)).rows!;
      const sbRows = (await call('sourcebound', conversations[i]!)).rows!;
      if (rows !== 2 * size || sbRows !== 2 * size) throw new Error(`P2b: the plain reads returned ${rows} and ${sbRows} messages at ${size} pairs (expected ${2 * size})`);
      result.notes.push(`${size} pairs: the projection is ${p.bytes} bytes (${summaries} summarized ranges, ${raw} raw pairs${p.omitted.length > 0 ? `, pairs before ${p.omitted.at(-1)!.toPair + 1} left out` : ''}); the plain read returns ${rows} messages, ${Number(plain.rows[0]!.bytes).toLocaleString('en-US')} bytes of text. ` +
        `The first call (a rewrite: '${p.cache.rewrite}') took ${first.ms.toFixed(2)} ms in ${firstStatements.length} statements, the layout write ${write.length === 0 ? 'none' : `${write.reduce((t, x) => t + x.ms, 0).toFixed(2)} ms`}; the measured calls find the layout stored and write nothing.`);
      for (let w = 0; w < 10; w++) for (const side of SIDES) await call(side, conversations[i]!);
    }

    const p50 = new Map<string, number[]>();
    const p99 = new Map<string, number[]>();
    const key = (side: Side, k: number) => `${side} ${k}`;
    for (let r = 0; r < rounds; r++) {
      const samples = new Map<string, number[]>();
      for (let j = 0; j < perRound; j++) {
        // Sizes and sides rotated, so none always follows the same one.
        for (let s = 0; s < SIZES.length; s++) {
          const k = (s + j) % SIZES.length;
          for (let t = 0; t < SIDES.length; t++) {
            const side = SIDES[(t + j + r) % SIDES.length]!;
            const list = samples.get(key(side, k)) ?? [];
            list.push((await call(side, conversations[k]!)).ms);
            samples.set(key(side, k), list);
          }
        }
      }
      for (const [name, xs] of samples) {
        const q = p50p99(xs);
        p50.set(name, [...(p50.get(name) ?? []), q.p50]);
        p99.set(name, [...(p99.get(name) ?? []), q.p99]);
      }
      ctx.log(`P2b round ${r + 1}/${rounds}: p50 projection / plain ${SIZES.map((size, k) => `${size}: ${p50.get(key('projection', k))!.at(-1)!.toFixed(2)} / ${p50.get(key('plain', k))!.at(-1)!.toFixed(2)} ms`).join(', ')}`);
    }

    for (const [k, size] of SIZES.entries()) {
      const at = (side: Side) => ({ p50: p50.get(key(side, k))!, p99: p99.get(key(side, k))! });
      const proj = at('projection');
      const plain = at('plain');
      const sb = at('sourcebound');
      const n = size.toLocaleString('en-US');
      result.figures.push(
        { label: `${n} pairs: projection, p50`, unit: 'ms', value: spread(proj.p50) },
        { label: `${n} pairs: projection, p99`, unit: 'ms', value: spread(proj.p99) },
        { label: `${n} pairs: plain read (app table, one SELECT in order), p50`, unit: 'ms', value: spread(plain.p50) },
        { label: `${n} pairs: plain read, p99`, unit: 'ms', value: spread(plain.p99) },
        { label: `${n} pairs: the same read from sourcebound's messages and runs, p50`, unit: 'ms', value: spread(sb.p50) },
      );
      result.headlines.push(
        {
          label: `P2b projection p50 / plain read p50 at ${n} pairs`, ratio: spread(roundRatios(proj.p50, plain.p50)), goal: { op: '<=', target: GOALS[size]! },
          // The floor beside the goal, and the tail beside the median (p99 of each round, median over rounds).
          floor: `plain read p50 ${spread(plain.p50).median.toFixed(2)} ms, p99 ${spread(plain.p99).median.toFixed(2)} ms; `
            + `projection p50 ${spread(proj.p50).median.toFixed(2)} ms, p99 ${spread(proj.p99).median.toFixed(2)} ms`,
        },
        { label: `P2b projection p99 / plain read p99 at ${n} pairs`, ratio: spread(roundRatios(proj.p99, plain.p99)), goal: null },
        { label: `P2b projection p50 / sourcebound-table read p50 at ${n} pairs`, ratio: spread(roundRatios(proj.p50, sb.p50)), goal: null },
      );
    }

    // Where a projection's time goes: statements as the client sees them, rows by onRead.
    for (const [k, size] of SIZES.entries()) {
      const calls: { ms: number; statements: TimedStatement[]; reads: ReadEvent[] }[] = [];
      for (let c = 0; c < breakdownCalls; c++) {
        const reads: ReadEvent[] = [];
        timer.start();
        const { ms } = await call('projection', conversations[k]!, (e) => reads.push(e));
        calls.push({ ms, statements: timer.stop(), reads });
        await call('plain', conversations[k]!);
      }
      result.notes.push(breakdown(size, calls));
      const split = await requestSplit(pool, `${size.toLocaleString('en-US')} pairs`, calls, { text: PLAIN_READ, values: [conversations[k]!] });
      result.notes.push(split.note);
      result.figures.push(...split.figures);
      ctx.log(`P2b ${split.note}`);
      const headline = result.headlines.find((h) => h.label === `P2b projection p50 / plain read p50 at ${size.toLocaleString('en-US')} pairs`);
      if (headline !== undefined) headline.floor = `${headline.floor ?? ''}; ${split.short}`;
      const med = (f: (c: (typeof calls)[number]) => number) => percentile(calls.map(f).sort((a, b) => a - b), 50);
      const n = size.toLocaleString('en-US');
      result.figures.push(
        { label: `${n} pairs: statements per projection (round trips)`, unit: 'statements', value: spread([med((c) => c.statements.length)]) },
        { label: `${n} pairs: projection time outside its statements (JavaScript, pool checkout), p50`, unit: 'ms', value: spread([med((c) => c.ms - c.statements.reduce((s, x) => s + x.ms, 0))]) },
      );
    }
  } finally {
    await pool.end();
  }
  importTimes(result, rounds);
  return result;
}

/**
 * Import time of the package's entry points, as an app pays it at start: the
 * built files (npm run build), each in a fresh node process, interleaved;
 * `sourcebound/app` (turns and projection) against `sourcebound` (everything).
 */
function importTimes(result: BenchResult, rounds: number): void {
  const root = fileURLToPath(new URL('..', import.meta.url));
  execFileSync('npm', ['run', 'build'], { cwd: root, stdio: 'ignore' });
  const once = (entry: string): number => Number(execFileSync(process.execPath, ['--input-type=module', '-e',
    `const t = process.hrtime.bigint(); await import(${JSON.stringify(`${root}dist/src/${entry}.js`)}); console.log(Number(process.hrtime.bigint() - t) / 1e6);`],
  { cwd: root, encoding: 'utf8' }).trim());
  const app: number[] = [];
  const full: number[] = [];
  for (let r = 0; r < Math.max(5, rounds) * 2; r++) {
    app.push(once('app'));
    full.push(once('index'));
  }
  result.figures.push(
    { label: 'import sourcebound/app (turns, projection, adapters), built', unit: 'ms', value: spread(app) },
    { label: 'import sourcebound (everything, with the worker), built', unit: 'ms', value: spread(full) },
  );
  result.headlines.push({
    label: 'P2b import sourcebound/app / import sourcebound', ratio: spread(roundRatios(app, full)), goal: { op: '<=', target: 1 / 3 },
    floor: `sourcebound/app ${spread(app).median.toFixed(0)} ms, sourcebound ${spread(full).median.toFixed(0)} ms (a fresh node process each)`,
  });
}

const LABELS: Record<string, string> = {
  projection_read: 'projection_read (count, layout, pairs and records in one statement)',
  'begin isolation': 'BEGIN of the snapshot (repeatable read, read only)', rollback: 'ROLLBACK ending it',
  'insert into sourcebound.projection_layouts': 'the layout write',
};

/** One line: round trips and rows per call, and the p50 time of each kind of statement and of what lies outside them. */
function breakdown(size: number, calls: { ms: number; statements: TimedStatement[]; reads: ReadEvent[] }[]): string {
  const p50 = (xs: number[]) => percentile([...xs].sort((a, b) => a - b), 50);
  const kinds = [...new Set(calls.flatMap((c) => c.statements.map((s) => s.kind)))];
  const parts = kinds.map((kind) => {
    const perCall = calls.map((c) => c.statements.filter((s) => s.kind === kind));
    const count = p50(perCall.map((x) => x.length));
    const ms = p50(perCall.map((x) => x.reduce((s, y) => s + y.ms, 0)));
    const rows = p50(perCall.map((x) => x.reduce((s, y) => s + y.rows, 0)));
    const present = perCall.filter((x) => x.length > 0).length;
    return `${LABELS[kind] ?? kind} ${count === 1 ? '' : `x${count} `}${ms.toFixed(3)} ms${rows > 0 ? `, ${rows} rows` : ''}${present < calls.length ? ` (in ${present} of ${calls.length} calls)` : ''}`;
  });
  const total = p50(calls.map((c) => c.ms));
  const inStatements = p50(calls.map((c) => c.statements.reduce((s, x) => s + x.ms, 0)));
  const outside = p50(calls.map((c) => c.ms - c.statements.reduce((s, x) => s + x.ms, 0)));
  const pairRows = p50(calls.map((c) => c.reads.filter((e) => e.query === 'pairsPageRead').reduce((s, e) => s + e.rows, 0)));
  const textRows = p50(calls.map((c) => c.reads.filter((e) => e.query === 'pairsPageRead').reduce((s, e) => s + (e.textRows ?? 0), 0)));
  const summaryRows = p50(calls.map((c) => c.reads.filter((e) => e.query === 'summariesForRangesRead').reduce((s, e) => s + e.rows, 0)));
  const statements = p50(calls.map((c) => c.statements.length));
  return `${size} pairs, where a projection's time goes (p50 of ${calls.length} calls, statements timed as the client sees them): ` +
    `${total.toFixed(2)} ms a call, ${statements} statements (round trips) taking ${inStatements.toFixed(2)} ms, ${outside.toFixed(2)} ms outside them (JavaScript, pool checkout); ` +
    `rows read: ${pairRows} pairs (${textRows} with their texts), ${summaryRows} summary records. By statement: ${parts.join('; ')}.`;
}
