import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import type { BenchContext } from './lib/context.ts';
import { textAt } from './lib/data.ts';
import type { BenchResult } from './lib/report.ts';
import { instantRunSummarizer, RUN_INPUT } from './lib/run-input.ts';
import { benchPool } from './lib/server.ts';
import { spread } from './lib/stats.ts';
import { createConversations } from './lib/writes.ts';

type RunModule = typeof import('../src/run/index.ts');

/**
 * P6 run compaction: prepareRunRequest on one Run whose raw history (the
 * complete request with nothing fitted or compacted) is about 1 MiB and 8 MiB:
 * research work groups of a model turn (~1.5 KB narration, one tool call) and
 * its settled result (~8 KB), after the initial request and a correction.
 *
 * Time, in this process: the first call fits and, if still over the
 * threshold, compacts with an instant in-process summarizer (time inside it is
 * subtracted: the model call is excluded); the repeated calls after it are the
 * steady state of a research loop (each turn asks for its next request), and
 * their p50 is held to 20 ms at 1 MiB. Beside it, the time of the one query
 * that loads the Run (runStateLoad), to show where the time goes.
 *
 * Memory, one fresh process per measurement (bench/p6-memory-child.ts): the
 * rise of peak RSS (VmHWM, reset through /proc/self/clear_refs after a full
 * GC) over RSS just before one steady-state call, held to 4x the raw request.
 */
const TARGETS = [
  { label: '1 MiB', bytes: 1024 * 1024 },
  { label: '8 MiB', bytes: 8 * 1024 * 1024 },
];
const P50_GOAL_MS = 20;
const MEMORY_GOAL = 4;
const SCOPE = 'bench';
const CHILD = fileURLToPath(new URL('./p6-memory-child.ts', import.meta.url));
const ROOT = fileURLToPath(new URL('..', import.meta.url));

function skipped(reason: string): BenchResult {
  return {
    id: 'P6',
    title: 'run compaction (prepareRunRequest)',
    status: 'skipped',
    reason: `P6 skipped: run compaction not available (${reason})`,
    seconds: 0,
    params: {},
    figures: [],
    headlines: [],
    notes: [],
  };
}

export async function benchRunCompaction(ctx: BenchContext): Promise<BenchResult> {
  let run: RunModule;
  try {
    run = await import('../src/run/index.ts');
  } catch (error) {
    return skipped(`src/run/index.ts does not load: ${(error as Error).message.split('\n')[0]}`);
  }
  if (typeof run.prepareRunRequest !== 'function') return skipped('src/run/index.ts does not export prepareRunRequest');
  const url = await ctx.server.freshDatabase('p6_run');
  const pool = benchPool(url, 4);
  try {
    const { rows } = await pool.query<{ t: string | null }>(`select to_regclass('sourcebound.run_turns')::text as t`);
    if (rows[0]!.t === null)
      return skipped(
        'src/run exports prepareRunRequest, but migrateDatabase creates no run history tables: its migrations are not in migrations/ yet',
      );
    return await measureRunCompaction(ctx, run, pool, url);
  } finally {
    await pool.end();
  }
}

/** P6 on a database that has the run history tables (exported to try it on a database migrated by other means). */
export async function measureRunCompaction(ctx: BenchContext, run: RunModule, pool: pg.Pool, url: string): Promise<BenchResult> {
  const repetitions: Record<string, number> = { '1 MiB': ctx.full ? 41 : 15, '8 MiB': ctx.full ? 15 : 7 };
  const processes = ctx.full ? 5 : 3;
  const result: BenchResult = {
    id: 'P6',
    title: 'run compaction (prepareRunRequest)',
    status: 'ok',
    seconds: 0,
    params: {
      sizes: TARGETS.map((t) => t.label),
      repetitions,
      memoryProcesses: processes,
      group: 'model turn ~1.5 KB + one settled tool result ~8 KB',
    },
    figures: [],
    headlines: [],
    notes: [],
  };
  const stateLoad = await import('../src/db/queries/run-state.ts').then((m) => m.runStateLoad).catch(() => null);
  const summarizer = instantRunSummarizer();
  const small = await recordHistory(run, pool, 30 * 1024);

  for (const target of TARGETS) {
    const t0 = performance.now();
    const runId = await recordHistory(run, pool, target.bytes);
    ctx.log(`P6 ${target.label}: history recorded in ${((performance.now() - t0) / 1000).toFixed(1)} s`);

    // The raw request: nothing fitted (fitting starts above the target), nothing compacted.
    const huge = 2 ** 40;
    const raw = await run.prepareRunRequest({
      pool,
      runId,
      scope: SCOPE,
      ...RUN_INPUT,
      policy: { enabled: false, thresholdBytes: huge, targetBytes: huge },
    });
    const rawBytes = raw.report.bytes;

    const call = async () => {
      summarizer.reset();
      const start = performance.now();
      const prepared = await run.prepareRunRequest({ pool, runId, scope: SCOPE, ...RUN_INPUT, summarizer });
      return { ms: performance.now() - start - summarizer.elapsed(), prepared };
    };
    const first = await call();
    const times: number[] = [];
    const loads: number[] = [];
    let last = first.prepared;
    for (let i = 0; i < repetitions[target.label]!; i++) {
      const c = await call();
      times.push(c.ms);
      last = c.prepared;
      if (stateLoad) {
        const s = performance.now();
        await stateLoad(pool, runId, SCOPE, 2048, 3);
        loads.push(performance.now() - s);
      }
    }
    const rises: number[] = [];
    const heaps: number[] = [];
    for (let i = 0; i < processes; i++) {
      const m = await memoryChild(url, small, runId);
      rises.push(m.rise);
      heaps.push(m.heap);
    }

    result.figures.push(
      { label: `${target.label}: raw request (nothing fitted)`, unit: 'bytes', value: spread([rawBytes]) },
      {
        label: `${target.label}: first call (${first.prepared.report.compaction.decision}), model call excluded`,
        unit: 'ms',
        value: spread([first.ms]),
      },
      { label: `${target.label}: prepareRunRequest, steady state`, unit: 'ms', value: spread(times) },
      ...(loads.length > 0
        ? [{ label: `${target.label}:   of which the query loading the Run (runStateLoad)`, unit: 'ms', value: spread(loads) }]
        : []),
      {
        label: `${target.label}: peak memory of one call (RSS rise, fresh process)`,
        unit: 'MiB',
        value: spread(rises.map((b) => b / 2 ** 20)),
      },
      { label: `${target.label}:   V8 heap in use after the call over before`, unit: 'MiB', value: spread(heaps.map((b) => b / 2 ** 20)) },
      { label: `${target.label}: final request`, unit: 'bytes', value: spread([last.report.bytes]) },
    );
    if (target.label === '1 MiB')
      result.headlines.push({
        label: `P6 p50 at 1 MiB / ${P50_GOAL_MS} ms`,
        ratio: spread(times.map((t) => t / P50_GOAL_MS)),
        goal: { op: '<=', target: 1 },
      });
    // Conservative: the larger of the two memory measures of each process.
    result.headlines.push({
      label: `P6 peak memory / raw request size at ${target.label}`,
      ratio: spread(rises.map((b, i) => Math.max(b, heaps[i]!) / rawBytes)),
      goal: { op: '<=', target: MEMORY_GOAL },
    });
    const f = first.prepared.report;
    const r = last.report;
    result.notes.push(
      `${target.label}: first call: compaction ${f.compaction.decision}${f.compaction.reason ? ` (${f.compaction.reason})` : ''}, ${f.bytes} bytes; ` +
        `steady state: ${r.checkpointsUsed.length} checkpoint(s) used, ${r.references.length} references, catalog ${r.catalog}, fits: ${r.fits}${r.reason ? ` (${r.reason})` : ''}.`,
    );
  }
  result.notes.push(
    'The goals are absolute, so each "ratio" is the figure over its goal unit: p50 / 20 ms, and peak memory / raw request bytes (goal 4x), ' +
      'where peak memory is the larger of the RSS rise and the V8 heap growth of the same process (allocations absorbed by already-resident young-generation pages do not raise RSS).',
  );
  return result;
}

/** A Run with about `bytes` of recorded history; returns its id. */
async function recordHistory(run: RunModule, pool: pg.Pool, bytes: number): Promise<string> {
  const [conversationId] = await createConversations(pool, 1, SCOPE);
  const { runId } = await run.startRun({
    pool,
    scope: SCOPE,
    conversationId: conversationId!,
    request: `Research question: ${textAt(7).user}`,
  });
  let recorded = 0;
  for (let g = 0; recorded < bytes; g++) {
    const text = fill(g * 3, 1500, (i) => textAt(i).assistant);
    const body = fill(g * 7 + 1, 8000, (i) => `${textAt(i).user}\n${textAt(i).assistant}`);
    const proposalId = `call-${g}`;
    await run.recordModelTurn({
      pool,
      runId,
      scope: SCOPE,
      text,
      toolCalls: [{ id: proposalId, name: 'fetch_document', input: { url: `https://docs.example.test/${g}`, page: g % 7 } }],
    });
    await run.recordToolCall({ pool, runId, scope: SCOPE, proposalId, dispatchId: `dispatch-${g}` });
    await run.recordToolResult({ pool, runId, scope: SCOPE, proposalId, settlement: 'settled', content: body });
    recorded += Buffer.byteLength(text) + Buffer.byteLength(body);
    if (g === 2) await run.recordCorrection({ pool, runId, scope: SCOPE, text: 'Correction: only count funds domiciled in the EU.' });
  }
  return runId;
}

/** Text of about `bytes` UTF-8 bytes from consecutive pool texts starting at `from`. */
function fill(from: number, bytes: number, pick: (i: number) => string): string {
  let out = '';
  for (let i = from; Buffer.byteLength(out) < bytes; i++) out += (out ? '\n\n' : '') + pick(i);
  return out;
}

/** One memory measurement in a fresh process (bounded: killed after 60 s). */
function memoryChild(url: string, smallRun: string, runId: string): Promise<{ rise: number; peak: number; heap: number }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', CHILD], {
      cwd: ROOT,
      env: {
        PATH: process.env.PATH ?? '',
        HOME: process.env.HOME ?? '/tmp',
        P6_URL: url,
        P6_SCOPE: SCOPE,
        P6_SMALL_RUN: smallRun,
        P6_RUN: runId,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
    });
    child.stderr.on('data', (d: Buffer) => {
      err += d.toString();
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    child.on('close', (code) => {
      clearTimeout(timer);
      try {
        if (code !== 0) throw new Error(`exit ${code}: ${err.trim().split('\n').slice(-3).join(' | ')}`);
        const parsed = JSON.parse(out.trim().split('\n').at(-1)!) as { rise: number; peak: number; heap: number; reset: boolean };
        if (!parsed.reset) throw new Error('cannot reset the peak RSS here (/proc/self/clear_refs)');
        resolve(parsed);
      } catch (error) {
        reject(new Error(`P6 memory process: ${(error as Error).message}`));
      }
    });
  });
}
