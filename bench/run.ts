/**
 * `npm run bench`: every benchmark against a real PostgreSQL (DATABASE_URL,
 * else an embedded one in a temporary folder), each in its own fresh,
 * migrated databases. Prints a table and writes bench/results/latest.{json,md}.
 *
 *   npm run bench                      quick mode (a few minutes on 2 cores)
 *   npm run bench -- --full            larger sizes, more repetitions
 *   npm run bench -- --only P2,P5      a subset (the others' last results are kept in bench/results)
 *   npm run bench -- --check           exit 1 when a goal ratio is missed
 *
 * See bench/README.md for what each benchmark measures and how to read it.
 */
import { readFileSync } from 'node:fs';
import { cpus, platform, release, totalmem } from 'node:os';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import type { BenchContext } from './lib/context.ts';
import { dataset } from './lib/data.ts';
import { missed, textTable, withEarlierResults, writeResults, type BenchResult, type RunInfo } from './lib/report.ts';
import { startBenchServer } from './lib/server.ts';
import { benchWrite } from './p1-write.ts';
import { benchProjection } from './p2-projection.ts';
import { benchRequestPath } from './p2b-request-path.ts';
import { benchThroughput } from './p3-throughput.ts';
import { benchLatency } from './p4-latency.ts';
import { benchSavings } from './p5-savings.ts';
import { benchRunCompaction } from './p6-run.ts';
import { benchScale } from './p7-scale.ts';
import { benchCache } from './p8-cache.ts';
import { benchGrounding } from './p9-grounding.ts';
import { benchGroundingBlock } from './p9b-grounding-block.ts';
import { benchRunSoak } from './p10-run-soak.ts';
import { benchPooledPickup } from './p11-pooled-pickup.ts';
import { benchRecall } from './p12-recall.ts';

const BENCHMARKS: { id: string; title: string; run: (ctx: BenchContext) => Promise<BenchResult> }[] = [
  { id: 'P1', title: 'write overhead of the triggers', run: benchWrite },
  { id: 'P2', title: 'projection latency versus conversation length', run: benchProjection },
  { id: 'P2b', title: 'request path: projection versus a plain read of the conversation', run: benchRequestPath },
  { id: 'P3', title: 'compaction throughput versus graphile-worker no-op jobs', run: benchThroughput },
  { id: 'P4', title: 'crossing-to-summarizer latency versus graphile-worker pickup', run: benchLatency },
  { id: 'P5', title: 'savings on real conversations', run: benchSavings },
  { id: 'P6', title: 'run compaction (prepareRunRequest)', run: benchRunCompaction },
  { id: 'P7', title: 'scale: job cost, growth and sweep versus history', run: benchScale },
  { id: 'P8', title: 'cache economics with prompt caching on', run: benchCache },
  { id: 'P9', title: 'grounding check on real ranges', run: benchGrounding },
  { id: 'P9b', title: 'grounding: longest event-loop block at the input cap', run: benchGroundingBlock },
  { id: 'P10', title: 'run-compaction soak (README agent loop)', run: benchRunSoak },
  { id: 'P11', title: 'new-job pickup through PgBouncer versus direct', run: benchPooledPickup },
  { id: 'P12', title: 'recall: facts the history carries, budget fill, and P8 with pauses', run: benchRecall },
];

const RESULTS_DIR = fileURLToPath(new URL('./results', import.meta.url));
/** Hard stop: a benchmark that hangs must not hold the machine. */
const WATCHDOG_MS = { quick: 15 * 60_000, full: 120 * 60_000 };

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: {
      full: { type: 'boolean', default: false },
      check: { type: 'boolean', default: false },
      only: { type: 'string' },
      help: { type: 'boolean', default: false },
    },
  });
  if (values.help) {
    process.stdout.write('usage: npm run bench [-- --full] [--check] [--only P1,P2,...]\n');
    return 0;
  }
  const only = values.only
    ?.split(',')
    .map((s) => s.trim().toUpperCase())
    .filter(Boolean);
  // Ids are matched without case (P2b).
  const unknown = only?.filter((id) => !BENCHMARKS.some((b) => b.id.toUpperCase() === id)) ?? [];
  if (unknown.length > 0) {
    process.stderr.write(`unknown benchmark(s): ${unknown.join(', ')}; known: ${BENCHMARKS.map((b) => b.id).join(', ')}\n`);
    return 2;
  }
  const selected = BENCHMARKS.filter((b) => !only || only.includes(b.id.toUpperCase()));
  const mode = values.full ? 'full' : 'quick';
  const watchdog = setTimeout(() => {
    process.stderr.write(`bench: watchdog: still running after ${WATCHDOG_MS[mode] / 60_000} min; giving up\n`);
    process.exit(3);
  }, WATCHDOG_MS[mode]);
  watchdog.unref();

  const started = performance.now();
  const log = (message: string) =>
    process.stderr.write(`[${((performance.now() - started) / 1000).toFixed(1).padStart(6)} s] ${message}\n`);
  log(`mode ${mode}; ${selected.map((b) => b.id).join(', ')}; starting PostgreSQL`);
  const server = await startBenchServer(process.env.DATABASE_URL || undefined);
  log(`PostgreSQL ${server.version} (${server.kind})`);

  const results: BenchResult[] = [];
  try {
    for (const bench of selected) {
      const t0 = performance.now();
      log(`${bench.id}: ${bench.title}`);
      try {
        const result = await bench.run({ server, full: values.full!, log });
        result.seconds = (performance.now() - t0) / 1000;
        results.push(result);
      } catch (error) {
        log(`${bench.id} failed: ${(error as Error).stack ?? String(error)}`);
        results.push({
          id: bench.id,
          title: bench.title,
          status: 'error',
          reason: (error as Error).message,
          seconds: (performance.now() - t0) / 1000,
          params: {},
          figures: [],
          headlines: [],
          notes: [],
        });
      }
    }
  } finally {
    await server.close();
  }

  const info: RunInfo = {
    date: new Date().toISOString(),
    mode,
    node: process.version,
    postgres: server.version,
    postgresSettings: server.settings,
    server: server.kind,
    package: {
      name: packageField('../package.json', 'name'),
      version: packageField('../package.json', 'version'),
      graphileWorker: packageField('../node_modules/graphile-worker/package.json', 'version'),
      pg: packageField('../node_modules/pg/package.json', 'version'),
    },
    machine: {
      cores: cpus().length,
      cpu: cpus()[0]?.model.trim() ?? 'unknown',
      memoryMiB: Math.round(totalmem() / 2 ** 20),
      platform: `${platform()} ${release()}`,
    },
    dataset: dataset().source,
    seconds: (performance.now() - started) / 1000,
  };
  for (const r of results) r.measuredAt = info.date;
  // A run of some benchmarks (--only) keeps the others' last results beside its own.
  const written = only
    ? await withEarlierResults(
        RESULTS_DIR,
        results,
        BENCHMARKS.map((b) => b.id),
      )
    : results;
  await writeResults(RESULTS_DIR, info, written);
  process.stdout.write(`\n${textTable(results)}\n\nwritten: ${RESULTS_DIR}/latest.json, latest.md (${info.seconds.toFixed(0)} s)\n`);

  const misses = missed(results);
  for (const m of misses)
    process.stdout.write(
      `goal missed: ${m.id} ${m.headline.label} = ${m.headline.ratio.median.toFixed(3)} (goal ${m.headline.goal!.op} ${m.headline.goal!.target})\n`,
    );
  const errors = results.filter((r) => r.status === 'error');
  if (errors.length > 0) return 2;
  if (values.check && misses.length > 0) return 1;
  return 0;
}

function packageField(relative: string, field: string): string {
  const json = JSON.parse(readFileSync(new URL(relative, import.meta.url), 'utf8')) as Record<string, unknown>;
  return String(json[field]);
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`bench: ${(error as Error).stack ?? String(error)}\n`);
    process.exit(2);
  },
);
