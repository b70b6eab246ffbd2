import { EventEmitter } from 'node:events';
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import { run, type WorkerEvents } from 'graphile-worker';
import { graphileLogger, migrateDatabase } from '../db/migrate.ts';
import { assertSessionUrl } from '../db/pooler-probe.ts';
import { createWorkerPool } from '../db/worker-pool.ts';
import { gatewayFromConfig } from '../gateway/from-config.ts';
import { createFleetModels, workerApplicationName } from '../gateway/fleet-models.ts';
import { createWorkerMetrics, instrumentSummarizer, recordRanges } from './metrics.ts';
import { startWorkerHttp, type WorkerHttp } from './http.ts';
import { jitter, sleep } from '../support/backoff.ts';
import { bounded } from '../support/bounded.ts';
import { compactConversationTask } from './tasks/compact-conversation.ts';
import { sweepCompactionTask } from './tasks/sweep-compaction.ts';
import { WorkerRunnerStoppedError, WorkerStartError } from './worker-errors.ts';
import { createProbe, databaseAnswer, PROBE_INTERVAL_MS } from './probe.ts';
import { RestartStreaks } from './restart-streak.ts';
import { currentRunner, handBack, RECONNECT_FIRST_MS, RECONNECT_MAX_MS, retire, trackTask, type Generation } from './generation.ts';
import { healthOf, NOT_STARTED, type WorkerHealth } from './health.ts';
import { createLiveness, DEAD_AFTER_MS } from './liveness.ts';
import { assertMigrated, assertSummarizer } from './start-checks.ts';
import type { WorkerHandle, WorkerOptions } from './handle.ts';
import { gaveUpError, runningGeneration, transition, type SupervisorEvent, type SupervisorState } from './state.ts';

export { WorkerRunnerStoppedError, WorkerStartError } from './worker-errors.ts';
export { PROBE_INTERVAL_MS } from './probe.ts';
export type { WorkerHealth } from './health.ts';
export type { WorkerHandle, WorkerOptions } from './handle.ts';

/**
 * The worker process around graphile-worker, supervised (docs/worker.md).
 * Terminology: a *runner* is one graphile-worker `run()`; a *generation* is
 * one runner with its own pool, its graphile worker ids and the lease-owner id
 * its claims carry. graphile-worker 0.17 does not survive a PostgreSQL restart
 * by itself, so a probe on its own connection notices a lost database, the
 * runner is retired, the worker reconnects with backoff, starts a new runner
 * and hands back what the old one held; one lost connection is not a lost
 * database (a recovery only when a fresh session cannot answer either). The
 * supervisor is a state machine (state.ts, with its diagram); its parts:
 * probe.ts, generation.ts, liveness.ts (the fleet's heartbeat), health.ts and
 * http.ts, metrics.ts, tasks/.
 */

/**
 * The sweep runs every minute, at most one at a time across the fleet
 * (graphile-worker's crontab is distributed-safe; the job key dedupes backlog).
 */
export const CRONTAB = '* * * * * sweep_compaction ?max=1&jobKey=sourcebound:sweep&jobKeyMode=replace';

/**
 * Runs graphile-worker with sourcebound's tasks and crontab, supervised (see
 * above). Migrates first (graphile-worker's schema before ours). Installs no
 * signal handlers: the caller decides when to stop (see src/cli/worker-command.ts).
 */
export async function startWorker(options: WorkerOptions): Promise<WorkerHandle> {
  const { config, logger, database } = options;
  const workerId = `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
  if (!options.skipMigrations) await migrateDatabase(database.directConnectionString, logger);
  else {
    // migrateDatabase refuses a transaction pooler itself; without it, LISTEN and the fleet's session locks still need a session.
    await assertSessionUrl(database.directConnectionString);
    await assertMigrated(database.pool);
  }

  // Without renewal a claim must outlive the admission wait plus the model call, or another
  // worker takes over a call that is still running (bounded by the two attempts, but wasted).
  if (config.leaseRenewMs === 0 && config.leaseMs < config.admissionWaitMs + config.modelTimeoutMs) {
    logger.warn(
      { leaseMs: config.leaseMs, admissionWaitMs: config.admissionWaitMs, modelTimeoutMs: config.modelTimeoutMs },
      'lease renewal is off and SOURCEBOUND_LEASE_MS is shorter than the admission wait plus the model deadline: a slow call may be taken over while it still runs',
    );
  }
  const metrics = createWorkerMetrics({ pool: database.pool });
  // /healthz and /metrics listen before any job can be taken: a port that cannot be
  // opened ends the start here, with nothing running (exit non-zero, never hang).
  // Until the runner is up, /healthz answers 503 (no runner).
  let health = (): WorkerHealth => NOT_STARTED;
  let http: WorkerHttp | null = null;
  if (config.metricsPort !== undefined) {
    http = await startWorkerHttp({
      host: config.metricsHost,
      port: config.metricsPort,
      registry: metrics.registry,
      health: () => health(),
      probeIntervalMs: PROBE_INTERVAL_MS,
      beatStaleAfterMs: DEAD_AFTER_MS,
    });
    logger.info({ port: http.port, host: config.metricsHost }, 'metrics and health listening');
  }
  // How long a call may still need: a retired runner's calls get this long before they are cut.
  const callGraceMs = config.admissionWaitMs + config.modelTimeoutMs + 5000;
  let configured: ReturnType<typeof gatewayFromConfig>;
  try {
    if (options.summarizer !== undefined) assertSummarizer(options.summarizer);
    configured = gatewayFromConfig(
      config,
      database.directConnectionString,
      logger,
      {
        admissionWait: (seconds, result) => metrics.admissionWaitSeconds.observe({ result }, seconds),
      },
      options.summarizer,
    );
  } catch (error) {
    // Nothing may stay open behind a failed start (the process would not exit).
    await http?.close();
    throw error;
  }
  // What the worker opened besides its runners, closed in one place (a failed start, stop()).
  const closeServices = async () => {
    await configured.close();
    await http?.close();
  };
  const summarizer = instrumentSummarizer(configured.gateway, metrics);
  const fleetModels = createFleetModels({ pool: database.pool, model: summarizer.model, logger, gauge: metrics.fleetModelIdentities });

  // Every graphile-worker id this process's runners lock jobs with: the fleet unlocks them if it dies.
  const graphileWorkerIds = new Set<string>();
  const liveness = createLiveness({ pool: database.pool, workerId, graphileWorkerIds: () => [...graphileWorkerIds], logger, metrics });

  // One emitter for every generation's events, so observers survive restarts.
  const events = new EventEmitter() as WorkerEvents;
  events.on('job:success', ({ job }) => metrics.jobs.inc({ task: job.task_identifier, outcome: 'success' }));
  events.on('job:error', ({ job }) => metrics.jobs.inc({ task: job.task_identifier, outcome: 'error' }));
  events.on('job:failed', ({ job }) => metrics.jobs.inc({ task: job.task_identifier, outcome: 'failed' }));

  // The supervisor's one state (state.ts); `move` is the only way it changes.
  let state: SupervisorState = { kind: 'starting' };
  const move = (event: SupervisorEvent) => {
    state = transition(state, event);
  };
  const isStopping = () => state.kind === 'stopping';
  /** Retired generations whose retirement is not over, and that retirement. */
  const retiring = new Map<Generation, Promise<void>>();
  let generations = 0;
  let restarts = 0;
  const streaks = new RestartStreaks();
  let settle!: { resolve: () => void; reject: (e: unknown) => void };
  const promise = new Promise<void>((resolve, reject) => {
    settle = { resolve, reject };
  });
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
    const gen: Generation = {
      n,
      claimOwner,
      pool,
      runner: null!,
      graphileWorkerIds: new Set(),
      tasks: new Map(),
      abort: new AbortController(),
      retired: false,
    };
    // graphile-worker 0.17 locks jobs with its worker *pool's* id (get_job's worker_id is `pool-...`).
    own.on('pool:create', ({ workerPool }) => {
      gen.graphileWorkerIds.add(workerPool.id);
      graphileWorkerIds.add(workerPool.id);
    });
    // Errors that stop work are logged at error here (graphile-worker logs some only at debug). A pool's fatal
    // error (it could not complete or fail a job) is why its runner stops by itself next: that stop's cause.
    let fatal: unknown = null;
    own.on('pool:fatalError', ({ error }) => void (fatal = error));
    own.on('worker:fatalError', ({ error }) => {
      if (!gen.retired) void recover('worker_fatal_error', error);
    });
    own.on('pool:listen:error', ({ error }) => {
      if (!gen.retired) void suspect('listen_connection_lost', error);
    });

    // Tasks see graphile-worker's abort signal or ours, whichever comes first: we decide when calls are cut.
    const track = (task: Parameters<typeof trackTask>[1]) => trackTask(gen, task);
    // Named prepared statements for the claim and the commit on a direct connection only, as for graphile-worker's own below.
    const ctx = {
      pool: database.pool,
      summarizer,
      logger,
      workerId: claimOwner,
      leaseMs: config.leaseMs,
      leaseRenewMs: config.leaseRenewMs,
      grounding: config.grounding,
      scopeCallsPerHour: config.scopeCallsPerHour,
      preparedStatements: !database.pooled,
    };
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
          // complete and stays locked for 4 hours (graphile-worker 0.17): complete at once.
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
      () => {
        if (!gen.retired) void recover('runner_stopped', fatal);
      },
      (error: unknown) => {
        if (!gen.retired) void recover('runner_failed', error);
      },
    );
    return gen;
  }

  const retireGen = (gen: Generation, graceMs: number) => retire(gen, graceMs, logger, workerId);
  const release = { pool: database.pool, logger, workerId, stopping: isStopping, wake: wake.signal };

  let recovery: Promise<void> = Promise.resolve();
  /** Single-flight: retire the runner, wait for PostgreSQL, start a new runner, hand back the old one's work. */
  function recover(reason: string, error: unknown): Promise<void> {
    if (state.kind !== 'running') return recovery;
    const old = state.generation;
    move({ type: 'lost', reason });
    recovery = recoverOnce(old, reason, error);
    return recovery;
  }

  async function recoverOnce(old: Generation, reason: string, error: unknown): Promise<void> {
    metrics.runnerUp.set(0);
    const since = Date.now();
    const deadline = since + config.recoveryTimeoutMs;
    logger.error(
      { err: error ?? undefined, reason, workerId, generation: old.n },
      'worker lost its database or its graphile-worker runner: retiring the runner, reconnecting',
    );
    const retired = retireGen(old, callGraceMs);
    retiring.set(old, retired);
    void retired.finally(() => retiring.delete(old));

    // A runner that stopped soon after its start, again: wait longer each time (restart-streak.ts).
    const wait = streaks.stopped(reason, error);
    if (wait > 0) await sleep(wait, wake.signal);
    let delay = RECONNECT_FIRST_MS;
    let lastError: unknown = error;
    for (;;) {
      if (isStopping()) return;
      const answer = await databaseAnswer(database, () => probe.check());
      if (answer === null) {
        try {
          if (isStopping()) return;
          const started = await startGeneration();
          // stop() came while the runner started: it is not ours to keep.
          if (isStopping()) {
            await retireGen(started, config.shutdownTimeoutMs);
            return;
          }
          move({ type: 'restarted', generation: started });
          streaks.started();
          break;
        } catch (startError) {
          lastError = startError;
        }
      } else {
        lastError = answer;
      }
      if (Date.now() + delay > deadline) {
        giveUp(
          new WorkerRunnerStoppedError(
            `the worker lost PostgreSQL (${reason}) and could not start again within ${config.recoveryTimeoutMs} ms ` +
              `(SOURCEBOUND_RECOVERY_TIMEOUT_MS): ${(lastError as Error)?.message ?? lastError}`,
            { cause: lastError },
          ),
        );
        return;
      }
      await sleep(jitter(delay), wake.signal);
      delay = Math.min(delay * 2, RECONNECT_MAX_MS);
    }
    restarts++;
    metrics.restarts.inc({ reason });
    // The new runner's id, in the registry now rather than at the next beat.
    void liveness.beat().catch(() => {});
    metrics.runnerUp.set(1);
    logger.info(
      { workerId, generation: runningGeneration(state)!.n, reason, recoveredInMs: Date.now() - since },
      'worker runner restarted',
    );
    await handBack(old, retired, { ...release, running: () => state.kind === 'running' });
  }

  // Single-flight guard of the check below (a check in progress, not a state of the worker).
  let suspecting = false;
  /**
   * A connection (the probe's, LISTEN) failed: recover only if PostgreSQL is
   * unreachable, i.e. a new session on each URL cannot answer. Single-flight.
   */
  async function suspect(reason: string, error: unknown): Promise<void> {
    if (suspecting || state.kind !== 'running') return;
    suspecting = true;
    try {
      const answer = await databaseAnswer(database);
      if (answer === null) {
        logger.warn(
          { err: error ?? undefined, reason, workerId },
          'a worker connection was lost but PostgreSQL answers a new session: no recovery',
        );
        return;
      }
      if (state.kind === 'running') void recover(reason, answer);
    } finally {
      suspecting = false;
    }
  }

  function giveUp(error: WorkerRunnerStoppedError): void {
    if (gaveUpError(state)) return;
    move({ type: 'gave_up', error });
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
      if (restarted && state.kind === 'running') void recover('database_restarted', null);
    },
    lost: (error, definite) => {
      if (state.kind === 'running' && definite) void suspect('database_unreachable', error);
    },
  });

  try {
    move({ type: 'started', generation: await startGeneration() });
  } catch (error) {
    await probe.close();
    await closeServices();
    throw error;
  }
  // In the registry before anything else: from here the fleet reaps this worker if it dies.
  try {
    await liveness.beat();
  } catch (error) {
    await retireGen(runningGeneration(state)!, 0);
    await probe.close();
    await closeServices();
    throw new WorkerStartError(`the worker could not record its heartbeat (sourcebound.worker_beat): ${(error as Error).message}`, {
      cause: error,
    });
  }
  liveness.start();
  metrics.runnerUp.set(1);
  // Other model identities on this database are said once now, then when they change.
  await fleetModels.check().catch((err: unknown) => logger.warn({ err }, 'could not read the model identities of the other workers'));
  fleetModels.start();
  // A first answer now, so /healthz is ok from the start; a failure here is the probe's to report.
  await probe.check().catch(() => {});
  probe.start();
  logger.info({ workerId, concurrency: config.workerConcurrency, model: summarizer.model, pooled: database.pooled }, 'worker started');

  streaks.started();
  health = () => healthOf(state, probe.okAt(), restarts, liveness.okAt(), streaks.current());

  const stop = (): Promise<void> => {
    if (state.kind === 'stopping') return state.done;
    const gen = runningGeneration(state);
    const gaveUpBefore = gaveUpError(state);
    const done = (async () => {
      logger.info({ workerId }, 'worker stopping: no new jobs, waiting for running ones');
      wake.abort();
      fleetModels.stop();
      const probeClosed = bounded(probe.close(), 5000);
      const closing = (async () => {
        await Promise.all([
          gen ? retireGen(gen, config.shutdownTimeoutMs) : Promise.resolve(),
          ...retiring.values(),
          recovery,
          probeClosed,
        ]);
        await liveness.leave();
        await closeServices();
      })();
      let clean = true;
      if (gaveUpBefore) {
        // Given up: the database is gone, so the retired runner's calls cannot commit, and stopping
        // can hang on it (graphile-worker's runner.stop() and the pool's sockets on a pooler that
        // hangs): its calls get the shutdown deadline, as on SIGTERM, not their whole grace.
        const cut = setTimeout(() => {
          for (const g of retiring.keys()) g.abort.abort();
        }, config.shutdownTimeoutMs);
        clean = await bounded(closing, config.shutdownTimeoutMs);
        clearTimeout(cut);
      } else {
        await closing;
      }
      metrics.runnerUp.set(0);
      if (clean) {
        logger.info({ workerId }, 'worker stopped');
      } else {
        logger.warn(
          { workerId, shutdownTimeoutMs: config.shutdownTimeoutMs, retiredRunners: retiring.size },
          'worker stopped without a clean stop: what had not stopped within SOURCEBOUND_SHUTDOWN_TIMEOUT_MS after the give-up is left (its database does not answer)',
        );
      }
      const gaveUp = gaveUpError(state);
      if (gaveUp) throw gaveUp;
      settle.resolve();
    })();
    move({ type: 'stop', done });
    return done;
  };

  const runner = currentRunner(() => runningGeneration(state), promise, events);
  return { workerId, runner, metrics, health, httpPort: http?.port ?? null, stop };
}
