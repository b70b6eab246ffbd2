import { run, type Runner } from 'graphile-worker';
import { loadConfig } from '../../src/support/config.ts';
import type { Database } from '../../src/db/database.ts';
import { graphileLogger } from '../../src/db/migrate.ts';
import type { Outcome, Summarizer, SummaryRequest } from '../../src/support/summary-contract.ts';
import { silentLogger } from '../../src/support/logger.ts';
import { startWorker, type WorkerHandle } from '../../src/worker/supervisor.ts';
import { procStatus } from './memory.ts';
import { benchPool } from './server.ts';

/**
 * The two sides of the worker benchmarks (P3, P4), built with the same
 * concurrency, pool size and poll interval: sourcebound's worker
 * (startWorker) with an instant in-process summarizer, and a bare
 * graphile-worker runner whose one task returns at once.
 */

export const INSTANT_MODEL = 'bench/instant';

/** A summarizer that answers at once; `onCall` sees each request as the call starts. */
export function instantSummarizer(onCall?: (request: SummaryRequest) => void): Summarizer {
  return {
    model: INSTANT_MODEL,
    summarize: async (r: SummaryRequest): Promise<Outcome> => {
      onCall?.(r);
      return { kind: 'ok', text: 'summary of ' + r.items.length, model: INSTANT_MODEL, usage: null, requestId: null };
    },
  };
}

export interface WorkerSettings {
  concurrency: number;
  poolSize: number;
  pollIntervalMs: number;
}

/** Completed jobs of a runner, by task, with the time each completion was written back. */
export interface Completions {
  count(task: string): number;
  lastAt(task: string): number;
  /** Failed jobs (a benchmark that sees any stops: its figures would be wrong). */
  errors: unknown[];
}

function watch(runner: Runner): Completions {
  const counts = new Map<string, number>();
  const last = new Map<string, number>();
  const errors: unknown[] = [];
  runner.events.on('job:complete', ({ job, error }) => {
    if (error) errors.push(error);
    counts.set(job.task_identifier, (counts.get(job.task_identifier) ?? 0) + 1);
    last.set(job.task_identifier, performance.now());
  });
  return { count: (t) => counts.get(t) ?? 0, lastAt: (t) => last.get(t) ?? NaN, errors };
}

export interface RunningSide {
  runner: Runner;
  completions: Completions;
  stop(): Promise<void>;
}

/** sourcebound's worker on `url` (already migrated), summarizing with `summarizer`. */
export async function startSourceboundSide(
  url: string,
  settings: WorkerSettings,
  summarizer: Summarizer,
): Promise<RunningSide & { handle: WorkerHandle }> {
  const pool = benchPool(url, settings.poolSize);
  const database: Database = { connectionString: url, directConnectionString: url, pooled: false, pool, close: () => pool.end() };
  const config = loadConfig({
    DATABASE_URL: url,
    SOURCEBOUND_WORKER_CONCURRENCY: String(settings.concurrency),
    SOURCEBOUND_POLL_INTERVAL_MS: String(settings.pollIntervalMs),
    LOG_LEVEL: 'silent',
  });
  const handle = await startWorker({ config, logger: silentLogger, database, summarizer, skipMigrations: true });
  return {
    handle,
    runner: handle.runner,
    completions: watch(handle.runner),
    stop: async () => {
      await handle.stop();
      await pool.end();
    },
  };
}

/** A graphile-worker runner on `url` with one task, `noop`, that returns at once (`onStart` sees it start). */
export async function startNoopSide(url: string, settings: WorkerSettings, onStart?: (payload: unknown) => void): Promise<RunningSide> {
  const pool = benchPool(url, settings.poolSize);
  const runner = await run({
    pgPool: pool,
    concurrency: settings.concurrency,
    pollInterval: settings.pollIntervalMs,
    noHandleSignals: true,
    logger: graphileLogger(silentLogger),
    crontab: '',
    taskList: {
      noop: async (payload) => {
        onStart?.(payload);
      },
    },
    // The same settings startWorker uses (src/worker/supervisor.ts).
    preset: { worker: { completeJobBatchDelay: 0, failJobBatchDelay: 0 } },
  });
  return {
    runner,
    completions: watch(runner),
    stop: async () => {
      await runner.stop();
      await pool.end();
    },
  };
}

/** Peak resident memory of this process so far (VmHWM), in bytes; NaN where /proc is missing. */
export function peakRssSoFar(): number {
  return procStatus('VmHWM');
}
