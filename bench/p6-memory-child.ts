/**
 * P6 memory, one measurement per process: a fresh process has no heap left
 * over from earlier calls (V8 keeps committed pages after a GC, so a second
 * call in the same process reuses them and its peak hides). Warms the code on
 * a small Run, collects garbage, resets the peak RSS, prepares the big Run
 * once, and prints the rise of the peak RSS over the RSS before the call, and
 * the V8 heap in use after the call over before it (garbage not yet collected
 * included, so at least what the call kept and at most what it allocated).
 * Spawned by bench/p6-run.ts; env: P6_URL, P6_SCOPE, P6_SMALL_RUN, P6_RUN.
 */
import { getHeapStatistics } from 'node:v8';
import { benchPool } from './lib/server.ts';
import { exposeGc, procStatus, resetPeakRss } from './lib/memory.ts';
import { instantRunSummarizer, RUN_INPUT } from './lib/run-input.ts';

const { P6_URL: url, P6_SCOPE: scope, P6_SMALL_RUN: smallRun, P6_RUN: runId } = process.env;
if (!url || !scope || !smallRun || !runId) throw new Error('P6_URL, P6_SCOPE, P6_SMALL_RUN and P6_RUN are required');
const run = await import('../src/run/index.ts');
const gc = exposeGc();
const summarizer = instantRunSummarizer();
const pool = benchPool(url, 2);
try {
  for (let i = 0; i < 3; i++) await run.prepareRunRequest({ pool, runId: smallRun, scope, ...RUN_INPUT, summarizer });
  gc();
  gc();
  const heapBefore = getHeapStatistics().used_heap_size;
  const before = procStatus('VmRSS');
  const reset = resetPeakRss();
  const prepared = await run.prepareRunRequest({ pool, runId, scope, ...RUN_INPUT, summarizer });
  const peak = procStatus('VmHWM');
  const heap = getHeapStatistics().used_heap_size - heapBefore;
  process.stdout.write(`${JSON.stringify({ before, peak, rise: peak - before, heap, reset, bytes: prepared.report.bytes })}\n`);
} finally {
  await pool.end();
}
