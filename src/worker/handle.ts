import type { Runner } from 'graphile-worker';
import type { Config } from '../support/config.ts';
import type { Logger } from '../support/logger.ts';
import type { Database } from '../db/database.ts';
import type { Summarizer } from '../support/summary-contract.ts';
import type { WorkerMetrics } from './metrics.ts';
import type { WorkerHealth } from './health.ts';

/** What startWorker (supervisor.ts) takes and what it returns. */

export interface WorkerHandle {
  workerId: string;
  /**
   * graphile-worker's runner, seen across restarts: `events` carries every
   * generation's events; `addJob` uses the current runner; `promise` rejects
   * with WorkerRunnerStoppedError when the worker gave up, resolves after
   * `stop()`. `stop`/`kill` act on the current runner only, as if the library
   * had stopped by itself (the worker then starts a new one): use the
   * handle's `stop()` to stop the worker.
   */
  runner: Runner;
  metrics: WorkerMetrics;
  health(): WorkerHealth;
  /** The /healthz and /metrics port, when SOURCEBOUND_METRICS_PORT is set. */
  httpPort: number | null;
  /**
   * Stops taking jobs, lets running ones finish (up to the shutdown deadline, then aborts them), releases everything.
   * After a give-up it waits no longer than the shutdown deadline (SOURCEBOUND_SHUTDOWN_TIMEOUT_MS): its database
   * is gone, so what has not stopped by then (a runner stopping on a pooler that hangs) is left, said at warn.
   * @throws WorkerRunnerStoppedError (after releasing everything it could) when the worker had given up.
   */
  stop(): Promise<void>;
}

export interface WorkerOptions {
  config: Readonly<Config>;
  logger: Logger;
  database: Database;
  /**
   * A summarizer of your own, used instead of the one configuration chooses
   * (SOURCEBOUND_SUMMARIZER). The worker puts it behind its gateway as it
   * does a built-in one: admission (SOURCEBOUND_MODEL_CONCURRENCY,
   * SOURCEBOUND_FLEET_CONCURRENCY), the checks on what it returns, the
   * classification of what it throws (a connection never made is a
   * deferral, not a spent attempt), and the grounding check.
   */
  summarizer?: Summarizer;
  /** Skip migrations (already done by `sourcebound migrate` / the release phase). (Default: false) */
  skipMigrations?: boolean;
}
