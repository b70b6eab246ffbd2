/**
 * Where the time goes, for the benchmarks whose goals are missed: times every
 * SQL statement (by its text) that the paths under study send, one operation
 * at a time (no concurrency, so a statement's time is its own), on a fresh
 * embedded (or DATABASE_URL) database. Not part of `npm run bench`.
 *
 *   node --import tsx bench/profile.ts            all
 *   node --import tsx bench/profile.ts p1 p3      the pair write path, the compaction path
 *
 * p1: the five statements of a completed pair, triggers on and off, below
 *     the threshold and on the crossing pair (the 30th): round trips as the
 *     client sees them, then EXPLAIN ANALYZE (server time, time per trigger).
 * p2: projectConversationHistory at 100, 1,000 and 10,000 pairs: statements,
 *     rows and texts read per projection, time in SQL and outside it.
 * p3: one compact_conversation pass of a 30-pair conversation (instant
 *     summarizer), statement by statement, plus the time spent outside SQL.
 * p4: from the crossing commit to the summarizer call with the worker
 *     running: every statement any client sends in that window.
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { parseArgs } from 'node:util';
import { compactConversation } from '../src/conversation/compact.ts';
import { conversationScopeRead } from '../src/db/queries/summaries.ts';
import { silentLogger } from '../src/support/logger.ts';
import { startBenchServer } from './lib/server.ts';
import { benchPool, benchClient } from './lib/server.ts';
import { textAt } from './lib/data.ts';
import { bulkPairs, createConversations, pairTransaction } from './lib/writes.ts';
import { instantSummarizer, startSourceboundSide } from './lib/workers.ts';
import { projectConversationHistory } from '../src/projection/index.ts';
import { BUDGET, summarizeAll } from './p2-projection.ts';
import { percentile, sleep, until } from './lib/stats.ts';

const sleepMs = sleep;

type Timings = Map<string, number[]>;
let recording: Timings | null = null;

// Every query of every pg client in this process is timed while `recording` is set.
const original = pg.Client.prototype.query as (...args: unknown[]) => unknown;
(pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown }).query = function timed(this: pg.Client, ...args: unknown[]) {
  const target = recording;
  if (!target) return original.apply(this, args);
  const text = typeof args[0] === 'string' ? args[0] : ((args[0] as { text?: string } | undefined)?.text ?? '?');
  const t0 = performance.now();
  const done = () => {
    const key = text.replace(/\s+/g, ' ').trim().slice(0, 90);
    const list = target.get(key) ?? [];
    list.push(performance.now() - t0);
    target.set(key, list);
  };
  // pg.Pool#query passes a callback; everything else gets a promise.
  const last = args.length - 1;
  if (typeof args[last] === 'function') {
    const callback = args[last] as (...a: unknown[]) => void;
    args[last] = (...a: unknown[]) => {
      done();
      callback(...a);
    };
    return original.apply(this, args);
  }
  const result = original.apply(this, args) as Promise<unknown> | undefined;
  void result?.then(done, () => {});
  return result;
};

function report(title: string, timings: Timings, operations: number, totalMs: number): void {
  const rows = [...timings.entries()]
    .map(([sql, ms]) => {
      const sorted = [...ms].sort((a, b) => a - b);
      return { sql, calls: ms.length / operations, p50: percentile(sorted, 50), perOp: ms.reduce((a, b) => a + b, 0) / operations };
    })
    .sort((a, b) => b.perOp - a.perOp);
  const inSql = rows.reduce((s, r) => s + r.perOp, 0);
  process.stdout.write(
    `\n## ${title}: ${(totalMs / operations).toFixed(2)} ms per operation, ${rows.reduce((s, r) => s + r.calls, 0).toFixed(1)} statements, ${inSql.toFixed(2)} ms in SQL round trips\n`,
  );
  process.stdout.write('| ms/op | calls/op | p50 ms | statement |\n|---:|---:|---:|---|\n');
  for (const r of rows) process.stdout.write(`| ${r.perOp.toFixed(3)} | ${r.calls.toFixed(1)} | ${r.p50.toFixed(3)} | \`${r.sql}\` |\n`);
}

async function measure(title: string, operations: number, op: (i: number) => Promise<void>): Promise<void> {
  for (let i = 0; i < Math.min(20, operations); i++) await op(-1 - i); // warm-up
  const timings: Timings = new Map();
  recording = timings;
  const t0 = performance.now();
  for (let i = 0; i < operations; i++) await op(i);
  const total = performance.now() - t0;
  recording = null;
  report(title, timings, operations, total);
}

async function profileWrites(url: string, urlOff: string): Promise<void> {
  for (const [label, u] of [
    ['triggers on', url],
    ['triggers off', urlOff],
  ] as const) {
    const c = await benchClient(u);
    if (u === urlOff) {
      await c.query('alter table sourcebound.runs disable trigger user');
      await c.query('alter table sourcebound.messages disable trigger user');
    }
    const below = await createConversations(c, 40);
    await measure(`P1 pair write, ${label}, below the threshold (pairs 0..19)`, 400, async (i) => {
      const k = i < 0 ? 0 : i;
      await pairTransaction(c, below[k % 20]!, textAt(k));
    });
    // The crossing pair: conversations at 29 pairs get their 30th.
    const crossing = await createConversations(c, 200);
    await bulkPairs(c, crossing, 29);
    let n = 0;
    await measure(`P1 pair write, ${label}, the crossing pair (the 30th)`, 150, async () => {
      await pairTransaction(c, crossing[n++]!, textAt(n));
    });
    await c.end();
  }
}

/**
 * Server-side cost of the five statements of a pair, from EXPLAIN ANALYZE:
 * execution time and the time of each trigger (a client-independent view,
 * unaffected by round trips and by other processes waking this one late).
 */
async function profileTriggers(url: string, label: string): Promise<void> {
  const c = await benchClient(url);
  await c.query(`set track_functions = 'all'`).catch(() => {});
  const explain = async (sql: string, params: unknown[]) => {
    const { rows } = await c.query<{
      'QUERY PLAN': [{ 'Execution Time': number; Triggers?: { 'Trigger Name': string; Time: number; Calls: number }[] }];
    }>(`explain (analyze, format json) ${sql}`, params);
    const plan = rows[0]!['QUERY PLAN'][0];
    return { exec: plan['Execution Time'], triggers: plan.Triggers ?? [] };
  };
  const run = async (conversationId: string, i: number) => {
    const runId = randomUUID();
    const assistantId = randomUUID();
    const t = textAt(i);
    await c.query('begin');
    const out = [
      [
        'insert run (running)',
        await explain(`insert into sourcebound.runs (id, conversation_id, status) values ($1, $2, 'running')`, [runId, conversationId]),
      ],
      [
        'insert user message',
        await explain(`insert into sourcebound.messages (conversation_id, run_id, role, content) values ($1, $2, 'user', $3)`, [
          conversationId,
          runId,
          t.user,
        ]),
      ],
      [
        'insert assistant (streaming)',
        await explain(
          `insert into sourcebound.messages (id, conversation_id, run_id, role, content, status) values ($1, $2, $3, 'assistant', '', 'streaming')`,
          [assistantId, conversationId, runId],
        ),
      ],
      [
        'assistant completed',
        await explain(`update sourcebound.messages set content = $2, status = 'completed' where id = $1`, [assistantId, t.assistant]),
      ],
      ['run completed', await explain(`update sourcebound.runs set status = 'completed' where id = $1`, [runId])],
    ] as const;
    await c.query('commit');
    return out;
  };
  for (const [title, pairsBefore, count] of [
    ['below the threshold (pairs 0..19)', 0, 20],
    ['the crossing pair (the 30th)', 29, 100],
  ] as const) {
    const ids = await createConversations(c, count);
    if (pairsBefore > 0) await bulkPairs(c, ids, pairsBefore);
    const sum = new Map<string, { exec: number[]; triggers: Map<string, number[]> }>();
    let ops = 0;
    for (let k = 0; k < 5; k++) {
      // 5 conversations x 20 pairs below; 100 crossing pairs
      for (let i = 0; i < (pairsBefore > 0 ? 1 : 20); i++) {
        for (const id of pairsBefore > 0 ? ids.slice(k * 20, k * 20 + 20) : [ids[k]!]) {
          const out = await run(id, ops);
          ops++;
          for (const [name, e] of out) {
            const entry = sum.get(name) ?? { exec: [] as number[], triggers: new Map<string, number[]>() };
            entry.exec.push(e.exec);
            for (const t of e.triggers) {
              const key = t['Trigger Name'].startsWith('RI_') ? 'foreign keys' : t['Trigger Name'];
              const list: number[] = entry.triggers.get(key) ?? [];
              if (list.length < entry.exec.length) list.push(t.Time);
              else list[list.length - 1]! += t.Time;
              entry.triggers.set(key, list);
            }
            sum.set(name, entry);
          }
        }
      }
    }
    const median = (xs: number[]) =>
      percentile(
        [...xs].sort((a, b) => a - b),
        50,
      );
    let total = 0;
    process.stdout.write(
      `\n## EXPLAIN ANALYZE, ${label}, ${title}: median over ${ops} pairs\n| statement | execution ms | of which triggers (ms) |\n|---|---:|---|\n`,
    );
    for (const [name, e] of sum) {
      total += median(e.exec);
      const trig = [...e.triggers].map(([t, ms]) => `${t} ${median(ms).toFixed(3)}`).join(', ');
      process.stdout.write(`| ${name} | ${median(e.exec).toFixed(3)} | ${trig} |\n`);
    }
    process.stdout.write(`| total | ${total.toFixed(3)} | |\n`);
  }
  // Per function (track_functions = all was set for this session): calls, total and self time.
  await c.query('select pg_stat_force_next_flush()');
  await sleepMs(50);
  const { rows } = await c.query<{ funcname: string; calls: string; total: number; self: number }>(
    `select funcname, calls, total_time as total, self_time as self from pg_stat_user_functions
     where schemaname in ('sourcebound', 'graphile_worker') order by total_time desc`,
  );
  if (rows.length > 0) {
    process.stdout.write(
      `\n## Functions, ${label} (pg_stat_user_functions, every pair above including warm-up)\n| function | calls | total ms | self ms | total us/call |\n|---|---:|---:|---:|---:|\n`,
    );
    for (const r of rows)
      process.stdout.write(
        `| ${r.funcname} | ${r.calls} | ${r.total.toFixed(1)} | ${r.self.toFixed(1)} | ${((r.total * 1000) / Number(r.calls)).toFixed(0)} |\n`,
      );
  }
  await c.end();
}

async function profileCompaction(url: string): Promise<void> {
  const pool = benchPool(url, 4);
  const ids = await createConversations(pool, 250);
  await bulkPairs(pool, ids, 30);
  const ctx = { pool, summarizer: instantSummarizer(), logger: silentLogger, workerId: 'profile', leaseMs: 60_000 };
  let n = 0;
  await measure('P3 one compact_conversation pass (the task body: scope read + compactConversation), 1 range', 200, async () => {
    const id = ids[n++]!;
    await conversationScopeRead(pool, id);
    await compactConversation(ctx, id);
  });
  await pool.end();
}

async function profileLatency(url: string): Promise<void> {
  const settings = { concurrency: 4, poolSize: 10, pollIntervalMs: 2000 };
  const writer = await benchClient(url);
  const ids = await createConversations(writer, 120);
  await bulkPairs(writer, ids, 29);
  let called = false;
  const side = await startSourceboundSide(
    url,
    settings,
    instantSummarizer(() => {
      called = true;
      recording = null;
    }),
  );
  let n = 0;
  let window: Timings = new Map();
  const timings: Timings = new Map();
  let total = 0;
  for (let i = 0; i < ids.length; i++) {
    const before = side.completions.count('compact_conversation');
    called = false;
    await pairTransaction(writer, ids[i]!, textAt(i));
    const t0 = performance.now();
    window = new Map();
    if (i >= 20) recording = window;
    await until(() => called, 30_000, 'summarizer call', 1);
    const t1 = performance.now();
    await until(() => side.completions.count('compact_conversation') > before, 30_000, 'job complete', 1);
    if (i >= 20) {
      n++;
      total += t1 - t0;
      for (const [k, v] of window) timings.set(k, [...(timings.get(k) ?? []), ...v]);
    }
    await sleep(5);
  }
  report('P4 crossing commit to summarizer call (worker running, statements of every client in the window)', timings, n, total);
  await side.stop();
  await writer.end();
}

/** The projection at 100, 1,000 and 10,000 pairs: statements, rows and texts read, time in SQL and outside it. */
async function profileProjection(url: string): Promise<void> {
  const pool = benchPool(url, 2);
  const sizes = [100, 1000, 10_000];
  const ids = await createConversations(pool, sizes.length);
  for (const [i, size] of sizes.entries()) {
    for (let done = 0; done < size; done += 5000) await bulkPairs(pool, [ids[i]!], Math.min(5000, size - done), i * 20_000 + done);
    await summarizeAll(pool, ids[i]!, size);
  }
  await pool.query('vacuum analyze');
  for (const [i, size] of sizes.entries()) {
    const reads = new Map<string, { calls: number; rows: number; textRows: number }>();
    let n = 0;
    await measure(`P2 projectConversationHistory, ${size} pairs, 64 KiB`, 100, async (k) => {
      const counting = k >= 0;
      if (counting) n++;
      const p = await projectConversationHistory({
        pool,
        conversationId: ids[i]!,
        scope: 'bench',
        budgetBytes: BUDGET,
        onRead: (e) => {
          if (!counting) return;
          const r = reads.get(e.query) ?? { calls: 0, rows: 0, textRows: 0 };
          r.calls++;
          r.rows += e.rows;
          r.textRows += e.textRows ?? 0;
          reads.set(e.query, r);
        },
      });
      if (k === 0)
        process.stdout.write(
          `\n${size} pairs: ${p.items.length} items (${p.items.filter((x) => x.kind === 'summary').length} summaries), ${p.bytes} bytes\n`,
        );
    });
    for (const [q, r] of reads)
      process.stdout.write(
        `- ${q}: ${(r.calls / n).toFixed(1)} calls, ${(r.rows / n).toFixed(0)} rows, ${(r.textRows / n).toFixed(0)} with texts, per projection\n`,
      );
  }
  await pool.end();
}

const { positionals } = parseArgs({ allowPositionals: true });
const which = positionals.length > 0 ? positionals : ['p1', 'p2', 'p3', 'p4'];
const server = await startBenchServer(process.env.DATABASE_URL || undefined);
try {
  if (which.includes('p1')) {
    const on = await server.freshDatabase('prof_on');
    const off = await server.freshDatabase('prof_off');
    await profileWrites(on, off);
    await profileTriggers(on, 'triggers on');
    await profileTriggers(off, 'triggers off (disabled by profileWrites)');
  }
  if (which.includes('p2')) await profileProjection(await server.freshDatabase('prof_projection'));
  if (which.includes('p3')) await profileCompaction(await server.freshDatabase('prof_compact'));
  if (which.includes('p4')) await profileLatency(await server.freshDatabase('prof_latency'));
} finally {
  await server.close();
}
