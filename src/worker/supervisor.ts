import { EventEmitter } from 'node:events';
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { run, type Runner, type Task, type WorkerEvents } from 'graphile-worker';
import type { Config } from '../support/config.ts';
import type { Logger } from '../support/logger.ts';
import { poolEnd, type Database } from '../db/database.ts';
import { graphileLogger, migrateDatabase } from '../db/migrate.ts';
import { createWorkerPool } from '../db/worker-pool.ts';
import { ownClaimsRelease, ownOutageDeferralsRelease, workerJobsUnlock } from '../db/queries/recovery.ts';
import type { Summarizer } from '../support/summary-contract.ts';
import { gatewayFromConfig } from '../gateway/from-config.ts';
import { createFleetModels, workerApplicationName } from '../gateway/fleet-models.ts';
import { createWorkerMetrics, instrumentSummarizer, recordRanges, type WorkerMetrics } from './metrics.ts';
import { startWorkerHttp, type WorkerHttp } from './http.ts';
import { jitter, sleep } from '../support/backoff.ts';
import { compactConversationTask } from './tasks/compact-conversation.ts';
import { sweepCompactionTask } from './tasks/sweep-compaction.ts';

/**
 * The worker process around graphile-worker (Terminology: a *runner* is one
 * graphile-worker `run()`; a *generation* is one runner with its own pool,
 * its graphile worker ids and the lease-owner id its claims carry).
 *
 * graphile-worker 0.17 does not survive a PostgreSQL restart by itself: its
 * runner stops (or, in about half the restarts measured, never resolves and
 * sits idle). So the worker supervises it: a health probe on its own
 * connection notices a lost database at once (its connection fails and a
 * new session cannot be opened, or the server's start time changed), the runner is retired
 * (graceful stop, bounded), the worker reconnects with backoff, starts a new
 * runner, then hands back what the old one held: the jobs graphile-worker had
 * locked for it (`force_unlock_workers`) and its running claims (their lease
 * ends now, so they are taken over at once, not after SOURCEBOUND_LEASE_MS).
 * If the database does not come back within SOURCEBOUND_RECOVERY_TIMEOUT_MS
 * the worker gives up: `runner.promise` rejects and the CLI exits 1.
 *
 * One lost connection is not a lost database: a backend terminated by an
 * administrator or a pooler (pg_terminate_backend, idle timeouts) fails the
 * probe's or the LISTEN session, and graphile-worker reconnects its LISTEN
 * itself. A recovery there would retire a healthy runner and hand its claims
 * over as spent attempts (fault scenario 3). So a failed probe or LISTEN
 * connection recovers only when a fresh session cannot answer either.
 */

/**
 * The sweep runs every minute, at most one at a time across the fleet
 * (graphile-worker's crontab is distributed-safe; the job key dedupes backlog).
 */
export const CRONTAB = '* * * * * sweep_compaction ?max=1&jobKey=sourcebound:sweep&jobKeyMode=replace';

/** How often the health probe asks PostgreSQL `select 1`. */
export const PROBE_INTERVAL_MS = 1000;
/** A probe query slower than this counts as a failure; two in a row start a recovery. */
const PROBE_TIMEOUT_MS = 5000;
/** Reconnect backoff while recovering: first delay and cap (with jitter). */
const RECONNECT_FIRST_MS = 100;
const RECONNECT_MAX_MS = 3000;

/**
 * The worker gave up: it lost its database (or its runner) and could not start
 * again within SOURCEBOUND_RECOVERY_TIMEOUT_MS. The process must not look like
 * it stopped cleanly: a process manager has to start it again.
 */
export class WorkerRunnerStoppedError extends Error {
  override name = 'WorkerRunnerStoppedError';
  /** The CLI prints the message alone (no stack) and exits 1. */
  readonly exitQuietly = true;
}

/**
 * The worker cannot start: its database is not migrated, or its /healthz and
 * /metrics port cannot be opened. Nothing was started; the CLI prints the
 * message alone and exits 1.
 */
export class WorkerStartError extends Error {
  override name = 'WorkerStartError';
  readonly exitQuietly = true;
}

/**
 * With migrations skipped (`--no-migrate`), the schemas must be there: a
 * worker on an unmigrated database would look healthy while every job and
 * sweep failed. @throws WorkerStartError naming what to run.
 */
async function assertMigrated(pool: pg.Pool): Promise<void> {
  const { rows: [found] } = await pool.query<{ missing: string[] }>(
    `select array_remove(array[
       case when to_regnamespace('graphile_worker') is null then 'graphile_worker' end,
       case when to_regnamespace('sourcebound') is null then 'sourcebound' end], null) as missing`);
  if (found!.missing.length > 0) {
    const missing = found!.missing.map((m) => `"${m}"`);
    throw new WorkerStartError(`the database is not migrated (${missing.length > 1 ? `schemas ${missing.join(' and ')} do` : `schema ${missing[0]} does`} not exist): `
      + 'run `sourcebound migrate` first (or start the worker without --no-migrate)');
  }
}

export interface WorkerHealth {
  /** A runner is taking jobs. */
  running: boolean;
  /** Recovering from a lost database or runner. */
  recovering: boolean;
  /** When PostgreSQL last answered the probe (epoch ms), or null. */
  databaseOkAt: number | null;
  /** Runners started after the first. */
  restarts: number;
}

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

interface Generation {
  n: number;
  /** Lease owner of this generation's claims. */
  claimOwner: string;
  pool: pg.Pool;
  runner: Runner;
  /** The ids graphile-worker locks this runner's jobs with (its worker pool's). */
  graphileWorkerIds: Set<string>;
  /** Running tasks: their job and the conversation each works on (null: the sweep). */
  tasks: Map<Promise<unknown>, { jobId: string; conversationId: string | null }>;
  /** Aborts this generation's running tasks (their model calls): at the deadline of the stop or retirement. */
  abort: AbortController;
  retired: boolean;
}

/**
 * Runs graphile-worker with sourcebound's tasks and crontab, supervised (see
 * above). Migrates first (graphile-worker's schema before ours). Installs no
 * signal handlers: the caller decides when to stop (see src/cli/worker-command.ts).
 */
export async function startWorker(options: WorkerOptions): Promise<WorkerHandle> {
  const { config, logger, database } = options;
  const workerId = `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
  if (!options.skipMigrations) await migrateDatabase(database.directConnectionString, logger);
  else await assertMigrated(database.pool);

  // A claim must outlive the admission wait plus the model call, or another
  // worker takes over a call that is still running (bounded by the two
  // attempts, but wasted). Short leases are legitimate in tests, so warn.
  if (config.leaseMs < config.admissionWaitMs + config.modelTimeoutMs) {
    logger.warn({ leaseMs: config.leaseMs, admissionWaitMs: config.admissionWaitMs, modelTimeoutMs: config.modelTimeoutMs },
      'SOURCEBOUND_LEASE_MS is shorter than the admission wait plus the model deadline: a slow call may be taken over while it still runs');
  }
  const metrics = createWorkerMetrics({ pool: database.pool });
  // /healthz and /metrics listen before any job can be taken: a port that cannot be
  // opened ends the start here, with nothing running (DESIGN: exit non-zero, never hang).
  // Until the runner is up, /healthz answers 503 (no runner).
  let health = (): WorkerHealth => ({ running: false, recovering: false, databaseOkAt: null, restarts: 0 });
  let http: WorkerHttp | null = null;
  if (config.metricsPort !== undefined) {
    http = await startWorkerHttp({ host: config.metricsHost, port: config.metricsPort, registry: metrics.registry, health: () => health(), probeIntervalMs: PROBE_INTERVAL_MS });
    logger.info({ port: http.port, host: config.metricsHost }, 'metrics and health listening');
  }
  // How long a call may still need: a retired runner's calls get this long before they are cut.
  const callGraceMs = config.admissionWaitMs + config.modelTimeoutMs + 5000;
  let configured: ReturnType<typeof gatewayFromConfig>;
  try {
    if (options.summarizer !== undefined) assertSummarizer(options.summarizer);
    configured = gatewayFromConfig(config, database.directConnectionString, logger, {
      admissionWait: (seconds, result) => metrics.admissionWaitSeconds.observe({ result }, seconds),
    }, options.summarizer);
  } catch (error) {
    // Nothing may stay open behind a failed start (the process would not exit).
    await http?.close();
    throw error;
  }
  const summarizer = instrumentSummarizer(configured.gateway, metrics);
  const fleetModels = createFleetModels({ pool: database.pool, model: summarizer.model, logger, gauge: metrics.fleetModelIdentities });

  // One emitter for every generation's events, so observers survive restarts.
  const events = new EventEmitter() as WorkerEvents;
  events.on('job:success', ({ job }) => metrics.jobs.inc({ task: job.task_identifier, outcome: 'success' }));
  events.on('job:error', ({ job }) => metrics.jobs.inc({ task: job.task_identifier, outcome: 'error' }));
  events.on('job:failed', ({ job }) => metrics.jobs.inc({ task: job.task_identifier, outcome: 'failed' }));

  let current: Generation | null = null;
  /** Retired generations whose retirement is not over, and that retirement. */
  const retiring = new Map<Generation, Promise<void>>();
  let generations = 0;
  let restarts = 0;
  let recovering = false;
  let stopping: Promise<void> | null = null;
  let died: WorkerRunnerStoppedError | null = null;
  let settle!: { resolve: () => void; reject: (e: unknown) => void };
  const promise = new Promise<void>((resolve, reject) => { settle = { resolve, reject }; });
  // Marked handled here: a caller that never looks at runner.promise must not crash on it.
  promise.catch(() => {});
  const wake = new AbortController();

  async function startGeneration(): Promise<Generation> {
    const n = generations;
    const claimOwner = n === 0 ? workerId : `${workerId}/r${n}`;
    const pool = createWorkerPool({
      connectionString: database.connectionString,
      directConnectionString: database.directConnectionString,
      max: config.workerConcurrency + 3,
      applicationName: 'sourcebound-worker',
      // The model identity on the direct sessions, for the other workers to see (fleet-models.ts).
      directApplicationName: workerApplicationName(summarizer.model),
      logger,
    });
    const own = new EventEmitter() as WorkerEvents;
    const forward = own.emit.bind(own);
    own.emit = ((name: string, payload: unknown) => {
      forward(name as never, payload as never);
      return events.emit(name as never, payload as never);
    }) as typeof own.emit;
    const gen: Generation = { n, claimOwner, pool, runner: null!, graphileWorkerIds: new Set(), tasks: new Map(), abort: new AbortController(), retired: false };
    // graphile-worker 0.17 locks jobs with its worker *pool's* id (get_job's worker_id is `pool-...`).
    own.on('pool:create', ({ workerPool }) => gen.graphileWorkerIds.add(workerPool.id));
    // Errors that stop work are logged at error here (graphile-worker logs some only at debug).
    own.on('worker:fatalError', ({ error }) => { if (!gen.retired) void recover('worker_fatal_error', error); });
    own.on('pool:listen:error', ({ error }) => { if (!gen.retired) void suspect('listen_connection_lost', error); });

    // Tasks see graphile-worker's abort signal or ours, whichever comes first: we decide when calls are cut.
    const track = (task: Task): Task => (payload, helpers) => {
      const abortSignal = AbortSignal.any([helpers.abortSignal, gen.abort.signal]);
      const running = Promise.resolve().then(() => task(payload, { ...helpers, abortSignal }));
      const conversationId = (payload as { conversationId?: unknown } | null)?.conversationId;
      gen.tasks.set(running, { jobId: String(helpers.job.id), conversationId: typeof conversationId === 'string' ? conversationId : null });
      void running.then(() => gen.tasks.delete(running), () => gen.tasks.delete(running));
      return running;
    };
    // Named prepared statements for the claim and the commit on a direct connection only, as for graphile-worker's own below.
    const ctx = { pool: database.pool, summarizer, logger, workerId: claimOwner, leaseMs: config.leaseMs, grounding: config.grounding, preparedStatements: !database.pooled };
    try {
      gen.runner = await run({
        pgPool: pool,
        concurrency: config.workerConcurrency,
        pollInterval: config.pollIntervalMs,
        // A transaction pooler cannot carry named prepared statements between transactions.
        noPreparedStatements: database.pooled,
        noHandleSignals: true,
        logger: graphileLogger(logger),
        events: own,
        crontab: CRONTAB,
        taskList: {
          compact_conversation: track(compactConversationTask({ ...ctx, onPass: (report) => recordRanges(metrics, report.ranges) })),
          sweep_compaction: track(sweepCompactionTask(ctx)),
        },
        // Our own abort (retire) cuts calls at the deadline we choose; graphile-worker's only after a call could have ended.
        gracefulShutdownAbortTimeout: callGraceMs,
        preset: {
          // With batching on, a job finishing during shutdown may never be marked
          // complete and stays locked for 4 hours (STACK.md): complete at once.
          worker: { completeJobBatchDelay: 0, failJobBatchDelay: 0 },
        },
      });
    } catch (error) {
      gen.retired = true;
      await bounded(pool.end(), 5000);
      throw error;
    }
    generations++;
    // A runner that ends without our stop() (its worker pool failed) is replaced.
    gen.runner.promise.then(
      () => { if (!gen.retired) void recover('runner_stopped', null); },
      (error: unknown) => { if (!gen.retired) void recover('runner_failed', error); },
    );
    return gen;
  }

  /**
   * Stops a generation's runner: no new jobs; running ones may finish until
   * `graceMs`, then their calls are aborted (an abort after the request was
   * sent is an `unknown` attempt). Waits for its tasks within a bound, ends its
   * pool. Never throws, never waits unbounded.
   */
  async function retire(gen: Generation, graceMs: number): Promise<void> {
    gen.retired = true;
    const stopped = gen.runner.stop().catch(() => {});
    const abortAt = setTimeout(() => gen.abort.abort(), graceMs);
    await bounded(Promise.allSettled([stopped, ...gen.tasks.keys()]), graceMs + 5000);
    clearTimeout(abortAt);
    if (gen.tasks.size > 0) {
      logger.warn({ workerId, generation: gen.n, tasks: gen.tasks.size }, 'tasks of the retired runner are still running after their deadline; their claims are released now');
    }
    if (!(await bounded(poolEnd(gen.pool, 5000), 6000))) {
      logger.warn({ workerId, generation: gen.n }, 'the retired runner still holds PostgreSQL clients; its pool is left to close');
    }
  }

  /**
   * Hands back what a retired generation held, except the claims of
   * conversations its still-running tasks work on; retried until it works or
   * the worker stops.
   */
  async function releaseOwn(gen: Generation, options: { all?: boolean } = {}): Promise<void> {
    for (let delay = RECONNECT_FIRST_MS; ; delay = Math.min(delay * 2, RECONNECT_MAX_MS)) {
      if (stopping) return;
      try {
        const running = options.all ? [] : [...gen.tasks.values()];
        const busy = [...new Set(running.flatMap((t) => (t.conversationId === null ? [] : [t.conversationId])))];
        const unlockedJobs = await workerJobsUnlock(database.pool, [...gen.graphileWorkerIds], running.map((t) => t.jobId));
        const resumed = await ownClaimsRelease(database.pool, gen.claimOwner, busy);
        logger.info({ workerId, generation: gen.n, graphileWorkerIds: [...gen.graphileWorkerIds], unlockedJobs, resumedClaims: resumed.length, stillRunning: gen.tasks.size },
          'the retired runner\'s jobs and claims are handed back');
        return;
      } catch (error) {
        if (stopping) return;
        logger.warn({ err: error, workerId, generation: gen.n }, 'handing back the retired runner\'s jobs and claims failed; retrying');
        await sleep(jitter(delay), wake.signal);
      }
    }
  }

  let recovery: Promise<void> = Promise.resolve();
  /** Single-flight: retire the runner, wait for PostgreSQL, start a new runner, hand back the old one's work. */
  function recover(reason: string, error: unknown): Promise<void> {
    if (recovering || stopping || current === null) return recovery;
    recovering = true;
    recovery = recoverOnce(current, reason, error);
    return recovery;
  }

  async function recoverOnce(old: Generation, reason: string, error: unknown): Promise<void> {
    metrics.runnerUp.set(0);
    current = null;
    const since = Date.now();
    const deadline = since + config.recoveryTimeoutMs;
    logger.error({ err: error ?? undefined, reason, workerId, generation: old.n },
      'worker lost its database or its graphile-worker runner: retiring the runner, reconnecting');
    const retired = retire(old, callGraceMs);
    retiring.set(old, retired);
    void retired.finally(() => retiring.delete(old));

    let delay = RECONNECT_FIRST_MS;
    let lastError: unknown = error;
    for (;;) {
      if (stopping) return;
      const answer = await databaseAnswers();
      if (answer === null) {
        try {
          if (stopping) return;
          const started = await startGeneration();
          // stop() came while the runner started: it is not ours to keep.
          if (stopping) { await retire(started, config.shutdownTimeoutMs); return; }
          current = started;
          break;
        } catch (startError) {
          lastError = startError;
        }
      } else {
        lastError = answer;
      }
      if (Date.now() + delay > deadline) {
        giveUp(new WorkerRunnerStoppedError(
          `the worker lost PostgreSQL (${reason}) and could not start again within ${config.recoveryTimeoutMs} ms `
            + `(SOURCEBOUND_RECOVERY_TIMEOUT_MS): ${(lastError as Error)?.message ?? lastError}`,
          { cause: lastError },
        ));
        return;
      }
      await sleep(jitter(delay), wake.signal);
      delay = Math.min(delay * 2, RECONNECT_MAX_MS);
    }
    restarts++;
    recovering = false;
    metrics.restarts.inc({ reason });
    metrics.runnerUp.set(1);
    logger.info({ workerId, generation: current.n, reason, recoveredInMs: Date.now() - since }, 'worker runner restarted');
    // Now what the old runner's ended tasks held; the rest as each of its tasks ends (a call
    // that outlived the outage may still commit), and everything once the retirement is over.
    let retiredDone = false;
    void retired.then(() => { retiredDone = true; });
    await releaseOwn(old);
    while (old.tasks.size > 0 && !retiredDone && !stopping) {
      await Promise.race([retired, ...[...old.tasks.keys()].map((task) => task.then(() => {}, () => {}))]);
      await releaseOwn(old, { all: retiredDone });
    }
    // Deferrals the outage caused that landed after the hand-back (see ownOutageDeferralsRelease).
    for (const ms of [2000, 8000]) {
      await sleep(ms, wake.signal);
      if (stopping || current === null) return;
      const undeferred = await ownOutageDeferralsRelease(database.pool, workerId).catch(() => []);
      if (undeferred.length > 0) logger.info({ workerId, conversations: undeferred.length }, 'calls deferred by the outage made claimable');
    }
  }

  let suspecting = false;
  /**
   * A connection (the probe's, LISTEN) failed: recover only if PostgreSQL is
   * unreachable, i.e. a new session on each URL cannot answer. Single-flight.
   */
  async function suspect(reason: string, error: unknown): Promise<void> {
    if (suspecting || recovering || stopping || current === null) return;
    suspecting = true;
    try {
      const answer = await freshSessionsAnswer();
      if (answer === null) {
        logger.warn({ err: error ?? undefined, reason, workerId }, 'a worker connection was lost but PostgreSQL answers a new session: no recovery');
        return;
      }
      if (current !== null && !stopping) void recover(reason, answer);
    } finally {
      suspecting = false;
    }
  }

  /** null when a new session on the pooled and on the direct URL answers `select 1`, else the error. */
  async function freshSessionsAnswer(): Promise<unknown> {
    try {
      await oneShot(database.connectionString);
      if (database.pooled) await oneShot(database.directConnectionString);
      return null;
    } catch (error) {
      return error;
    }
  }

  /** null when both the pooled and the direct URL answer `select 1`, else the error. */
  async function databaseAnswers(): Promise<unknown> {
    try {
      await probe.check();
      if (database.pooled) await oneShot(database.directConnectionString);
      return null;
    } catch (error) {
      return error;
    }
  }

  function giveUp(error: WorkerRunnerStoppedError): void {
    if (died) return;
    died = error;
    logger.error({ err: error, workerId }, error.message);
    settle.reject(error);
  }

  // The server's start time, first seen by the probe: another one means it restarted (or failed over).
  let serverStartedAt: string | null = null;
  const probe = createProbe(database.connectionString, {
    ok: (startedAt) => {
      metrics.databaseLastOk.set(Date.now() / 1000);
      const restarted = serverStartedAt !== null && startedAt !== serverStartedAt;
      serverStartedAt = startedAt;
      if (restarted && current !== null && !recovering && !stopping) void recover('database_restarted', null);
    },
    lost: (error, definite) => {
      if (current !== null && !recovering && !stopping && definite) void suspect('database_unreachable', error);
    },
  });

  try {
    current = await startGeneration();
  } catch (error) {
    await probe.close();
    await configured.close();
    await http?.close();
    throw error;
  }
  metrics.runnerUp.set(1);
  // Other model identities on this database are said once now, then when they change.
  await fleetModels.check().catch((err: unknown) => logger.warn({ err }, 'could not read the model identities of the other workers'));
  fleetModels.start();
  // A first answer now, so /healthz is ok from the start; a failure here is the probe's to report.
  await probe.check().catch(() => {});
  probe.start();
  logger.info({ workerId, concurrency: config.workerConcurrency, model: summarizer.model, pooled: database.pooled }, 'worker started');

  health = () => ({ running: current !== null && !recovering, recovering, databaseOkAt: probe.okAt(), restarts });

  const stop = () => {
    stopping ??= (async () => {
      logger.info({ workerId }, 'worker stopping: no new jobs, waiting for running ones');
      wake.abort();
      fleetModels.stop();
      const probeClosed = bounded(probe.close(), 5000);
      const gen = current;
      current = null;
      const closing = (async () => {
        await Promise.all([gen ? retire(gen, config.shutdownTimeoutMs) : Promise.resolve(), ...retiring.values(), recovery, probeClosed]);
        await configured.close();
        await http?.close();
      })();
      let clean = true;
      if (died) {
        // Given up: the database is gone, so the retired runner's calls cannot commit, and stopping
        // can hang on it (graphile-worker's runner.stop() and the pool's sockets on a pooler that
        // hangs): its calls get the shutdown deadline, as on SIGTERM, not their whole grace.
        const cut = setTimeout(() => { for (const g of retiring.keys()) g.abort.abort(); }, config.shutdownTimeoutMs);
        clean = await bounded(closing, config.shutdownTimeoutMs);
        clearTimeout(cut);
      } else {
        await closing;
      }
      metrics.runnerUp.set(0);
      if (clean) {
        logger.info({ workerId }, 'worker stopped');
      } else {
        logger.warn({ workerId, shutdownTimeoutMs: config.shutdownTimeoutMs, retiredRunners: retiring.size },
          'worker stopped without a clean stop: what had not stopped within SOURCEBOUND_SHUTDOWN_TIMEOUT_MS after the give-up is left (its database does not answer)');
      }
      if (died) throw died;
      settle.resolve();
    })();
    return stopping;
  };

  const runner: Runner = {
    stop: (reason?: string) => (current ? current.runner.stop(reason) : Promise.reject(new Error('Runner is already stopped'))),
    kill: (reason?: string) => (current ? current.runner.kill(reason) : Promise.resolve()),
    addJob: ((...args: Parameters<Runner['addJob']>) => {
      if (!current) return Promise.reject(new Error('the worker has no running runner (stopping or recovering)'));
      return current.runner.addJob(...args);
    }) as Runner['addJob'],
    promise,
    events,
  };
  return { workerId, runner, metrics, health, httpPort: http?.port ?? null, stop };
}

/** A summarizer handed in by code must be one: a model identity and a summarize function. @throws WorkerStartError */
function assertSummarizer(value: unknown): asserts value is Summarizer {
  const s = value as Partial<Summarizer> | null;
  if (s === null || typeof s !== 'object' || typeof s.summarize !== 'function' || typeof s.model !== 'string' || s.model.trim() === '') {
    throw new WorkerStartError('the summarizer given to the worker is not one: it needs a non-empty `model` (the identity its summaries record) and a `summarize(request)` function');
  }
}

interface Probe {
  start(): void;
  /** One `select 1` now. @throws when PostgreSQL does not answer. */
  check(): Promise<void>;
  okAt(): number | null;
  /** Stops probing; resolves once its connection has closed. */
  close(): Promise<void>;
}

/**
 * One round trip every PROBE_INTERVAL_MS on a connection of its own (a busy
 * pool must not look like a dead database), reading the server's start time
 * (`pg_postmaster_start_time()`: a restart that came back between two probes
 * still shows). A lost connection is reported definite at once (a restart
 * cuts every session; the worker then asks a new session); a slow answer
 * only on the second in a row.
 */
function createProbe(connectionString: string, on: { ok(serverStartedAt: string): void; lost(error: unknown, definite: boolean): void }): Probe {
  let client: pg.Client | null = null;
  let okAt: number | null = null;
  let timer: NodeJS.Timeout | null = null;
  let closed = false;
  let slow = 0;
  let inFlight: Promise<void> | null = null;

  const drop = (c: pg.Client): Promise<void> => {
    if (client === c) client = null;
    return c.end().catch(() => {});
  };
  async function connected(): Promise<pg.Client> {
    if (client) return client;
    const c = new pg.Client({ connectionString, application_name: 'sourcebound-health', connectionTimeoutMillis: PROBE_TIMEOUT_MS, query_timeout: PROBE_TIMEOUT_MS });
    c.on('error', (error) => {
      drop(c);
      if (!closed) on.lost(error, true);
    });
    await c.connect().catch((error: unknown) => { c.end().catch(() => {}); throw error; });
    if (closed) { c.end().catch(() => {}); throw new Error('probe closed'); }
    client = c;
    return c;
  }
  async function check(): Promise<void> {
    inFlight ??= (async () => {
      const c = await connected();
      let startedAt: string;
      try {
        const { rows } = await c.query<{ startedAt: string }>('select pg_postmaster_start_time()::text as "startedAt"');
        startedAt = rows[0]!.startedAt;
      } catch (error) {
        drop(c);
        throw error;
      }
      okAt = Date.now();
      slow = 0;
      on.ok(startedAt);
    })().finally(() => { inFlight = null; });
    return inFlight;
  }
  const tick = async () => {
    timer = null;
    try {
      await check();
    } catch (error) {
      const timedOut = /timeout/i.test((error as Error)?.message ?? '');
      slow = timedOut ? slow + 1 : 0;
      if (!closed) on.lost(error, !timedOut || slow >= 2);
    }
    if (!closed) timer = setTimeout(tick, PROBE_INTERVAL_MS);
  };
  return {
    start() { if (!closed && timer === null) timer = setTimeout(tick, PROBE_INTERVAL_MS); },
    check,
    okAt: () => okAt,
    async close() {
      closed = true;
      if (timer) clearTimeout(timer);
      if (client) await drop(client);
    },
  };
}

/** One fresh session answers `select 1`. @throws otherwise. */
async function oneShot(connectionString: string): Promise<void> {
  const c = new pg.Client({ connectionString, connectionTimeoutMillis: PROBE_TIMEOUT_MS, query_timeout: PROBE_TIMEOUT_MS });
  c.on('error', () => {});
  try {
    await c.connect();
    await c.query('select 1');
  } finally {
    await c.end().catch(() => {});
  }
}

/** true when `promise` settled within `ms`. */
async function bounded(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<false>((resolve) => { timer = setTimeout(() => resolve(false), ms); });
  const done = promise.then(() => true, () => true);
  const result = await Promise.race([done, timeout]);
  clearTimeout(timer);
  return result;
}
