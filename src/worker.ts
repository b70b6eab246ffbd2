import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import { run, type Runner } from 'graphile-worker';
import type { Config } from './config.ts';
import type { Logger } from './logger.ts';
import type { Database } from './db/database.ts';
import { graphileLogger, migrateDatabase } from './db/migrate.ts';
import type { Summarizer } from './gateway/types.ts';
import { gatewayFromConfig } from './summarizer.ts';
import { compactConversationTask } from '../tasks/compact_conversation.ts';
import { sweepCompactionTask } from '../tasks/sweep_compaction.ts';

/**
 * The sweep runs every minute, at most one at a time across the fleet
 * (graphile-worker's crontab is distributed-safe; the job key dedupes backlog).
 */
export const CRONTAB = '* * * * * sweep_compaction ?max=1&jobKey=sourcebound:sweep&jobKeyMode=replace';

/**
 * graphile-worker stopped by itself: its worker pool fails when it cannot mark
 * a job complete or failed (PostgreSQL restarted mid-job, for one), and its
 * runner then stops and *resolves* its promise. The process must not look like
 * it stopped cleanly: a process manager has to start it again.
 */
export class WorkerRunnerStoppedError extends Error {
  override name = 'WorkerRunnerStoppedError';
  /** The CLI prints the message alone (no stack) and exits 1. */
  readonly exitQuietly = true;
}

export interface WorkerHandle {
  workerId: string;
  /** graphile-worker's runner, except that `promise` rejects with WorkerRunnerStoppedError when it stopped without `stop()`. */
  runner: Runner;
  /**
   * Stops taking jobs, lets running ones finish (up to the shutdown deadline, then aborts them), releases everything.
   * @throws WorkerRunnerStoppedError (after releasing everything) when the runner had already stopped on its own.
   */
  stop(): Promise<void>;
}

export interface WorkerOptions {
  config: Readonly<Config>;
  logger: Logger;
  database: Database;
  /** Replaces the configured gateway (tests, embedding). */
  summarizer?: Summarizer;
  /** Skip migrations (already done by `sourcebound migrate` / the release phase). (Default: false) */
  skipMigrations?: boolean;
}

/**
 * Runs graphile-worker with sourcebound's tasks and crontab. Migrates first
 * (graphile-worker's schema before ours). Installs no signal handlers: the
 * caller decides when to stop (see src/cli/worker.ts).
 */
export async function startWorker(options: WorkerOptions): Promise<WorkerHandle> {
  const { config, logger, database } = options;
  const workerId = `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
  if (!options.skipMigrations) await migrateDatabase(database.connectionString, logger);

  // A claim must outlive the admission wait plus the model call, or another
  // worker takes over a call that is still running (bounded by the two
  // attempts, but wasted). Short leases are legitimate in tests, so warn.
  if (config.leaseMs < config.admissionWaitMs + config.modelTimeoutMs) {
    logger.warn({ leaseMs: config.leaseMs, admissionWaitMs: config.admissionWaitMs, modelTimeoutMs: config.modelTimeoutMs },
      'SOURCEBOUND_LEASE_MS is shorter than the admission wait plus the model deadline: a slow call may be taken over while it still runs');
  }
  const configured = options.summarizer ? null : gatewayFromConfig(config, database.connectionString, logger);
  const summarizer = options.summarizer ?? configured!.gateway;

  const ctx = { pool: database.pool, summarizer, logger, workerId, leaseMs: config.leaseMs };
  const runner = await run({
    pgPool: database.pool,
    concurrency: config.workerConcurrency,
    pollInterval: config.pollIntervalMs,
    noHandleSignals: true,
    logger: graphileLogger(logger),
    crontab: CRONTAB,
    taskList: {
      compact_conversation: compactConversationTask(ctx),
      sweep_compaction: sweepCompactionTask(ctx),
    },
    gracefulShutdownAbortTimeout: config.shutdownTimeoutMs,
    preset: {
      // With batching on, a job finishing during shutdown may never be marked
      // complete and stays locked for 4 hours (STACK.md): complete at once.
      worker: { completeJobBatchDelay: 0, failJobBatchDelay: 0 },
    },
  });
  logger.info({ workerId, concurrency: config.workerConcurrency, model: summarizer.model }, 'worker started');

  let stopping: Promise<void> | null = null;
  let died: WorkerRunnerStoppedError | null = null;
  const promise = runner.promise.then(() => {
    if (stopping === null) {
      died = new WorkerRunnerStoppedError('graphile-worker stopped on its own (see its "Runner stopping" log line); start the worker again');
      throw died;
    }
  });
  // Marked handled here: a caller that never looks at runner.promise must not crash on it.
  promise.catch(() => {});
  const stop = () => {
    stopping ??= (async () => {
      logger.info({ workerId }, 'worker stopping: no new jobs, waiting for running ones');
      // A runner that already stopped itself rejects a second stop; there is nothing left to stop.
      await runner.stop().catch((error: unknown) => {
        if (!(error instanceof Error && error.message === 'Runner is already stopped')) throw error;
      });
      await configured?.close();
      logger.info({ workerId }, 'worker stopped');
      if (died) throw died;
    })();
    return stopping;
  };
  return { workerId, runner: { ...runner, promise }, stop };
}
