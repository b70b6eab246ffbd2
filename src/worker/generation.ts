import type pg from 'pg';
import type { Runner, Task, WorkerEvents } from 'graphile-worker';
import type { Logger } from '../support/logger.ts';
import { poolEnd } from '../db/database.ts';
import { ownClaimsRelease, ownOutageDeferralsRelease, workerJobsUnlock } from '../db/queries/recovery.ts';
import { bounded } from '../support/bounded.ts';
import { jitter, sleep } from '../support/backoff.ts';

/**
 * A generation: one graphile-worker runner with its own pool, its graphile
 * worker ids and the lease-owner id its claims carry. The supervisor
 * (supervisor.ts) starts one, and after a lost database retires it and starts
 * the next; what a retired one held is handed back here.
 */
export interface Generation {
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

/** Reconnect backoff while recovering: first delay and cap (with jitter). */
export const RECONNECT_FIRST_MS = 100;
export const RECONNECT_MAX_MS = 3000;

/**
 * `task` as this generation runs it: tracked in `gen.tasks` while it runs, and
 * seeing graphile-worker's abort signal or the generation's, whichever comes
 * first (the supervisor decides when calls are cut).
 */
export function trackTask(gen: Generation, task: Task): Task {
  return (payload, helpers) => {
    const abortSignal = AbortSignal.any([helpers.abortSignal, gen.abort.signal]);
    const running = Promise.resolve().then(() => task(payload, { ...helpers, abortSignal }));
    const conversationId = (payload as { conversationId?: unknown } | null)?.conversationId;
    gen.tasks.set(running, { jobId: String(helpers.job.id), conversationId: typeof conversationId === 'string' ? conversationId : null });
    void running.then(
      () => gen.tasks.delete(running),
      () => gen.tasks.delete(running),
    );
    return running;
  };
}

/**
 * Stops a generation's runner: no new jobs; running ones may finish until
 * `graceMs`, then their calls are aborted (an abort after the request was
 * sent is an `unknown` attempt). Waits for its tasks within a bound, ends its
 * pool. Never throws, never waits unbounded.
 */
export async function retire(gen: Generation, graceMs: number, logger: Logger, workerId: string): Promise<void> {
  gen.retired = true;
  const stopped = gen.runner.stop().catch(() => {});
  const abortAt = setTimeout(() => gen.abort.abort(), graceMs);
  await bounded(Promise.allSettled([stopped, ...gen.tasks.keys()]), graceMs + 5000);
  clearTimeout(abortAt);
  if (gen.tasks.size > 0) {
    logger.warn(
      { workerId, generation: gen.n, tasks: gen.tasks.size },
      'tasks of the retired runner are still running after their deadline; their claims are released now',
    );
  }
  if (!(await bounded(poolEnd(gen.pool, 5000), 6000))) {
    logger.warn({ workerId, generation: gen.n }, 'the retired runner still holds PostgreSQL clients; its pool is left to close');
  }
}

export interface ReleaseContext {
  pool: pg.Pool;
  logger: Logger;
  workerId: string;
  /** True once the worker is stopping: the hand-back ends. */
  stopping(): boolean;
  /** Cuts the wait between retries short (the worker stops). */
  wake: AbortSignal;
}

/**
 * Hands back what a retired generation held, except the claims of
 * conversations its still-running tasks work on (all of them with `all`);
 * retried until it works or the worker stops.
 */
export async function releaseOwn(gen: Generation, context: ReleaseContext, options: { all?: boolean } = {}): Promise<void> {
  const { pool, logger, workerId } = context;
  for (let delay = RECONNECT_FIRST_MS; ; delay = Math.min(delay * 2, RECONNECT_MAX_MS)) {
    if (context.stopping()) return;
    try {
      const running = options.all ? [] : [...gen.tasks.values()];
      const busy = [...new Set(running.flatMap((t) => (t.conversationId === null ? [] : [t.conversationId])))];
      const unlockedJobs = await workerJobsUnlock(
        pool,
        [...gen.graphileWorkerIds],
        running.map((t) => t.jobId),
      );
      const resumed = await ownClaimsRelease(pool, gen.claimOwner, busy);
      logger.info(
        {
          workerId,
          generation: gen.n,
          graphileWorkerIds: [...gen.graphileWorkerIds],
          unlockedJobs,
          resumedClaims: resumed.length,
          stillRunning: gen.tasks.size,
        },
        "the retired runner's jobs and claims are handed back",
      );
      return;
    } catch (error) {
      if (context.stopping()) return;
      logger.warn({ err: error, workerId, generation: gen.n }, "handing back the retired runner's jobs and claims failed; retrying");
      await sleep(jitter(delay), context.wake);
    }
  }
}

/**
 * After a new runner is up: what the old one's ended tasks held is handed back
 * now, the rest as each of its tasks ends (a call that outlived the outage may
 * still commit), everything once its retirement is over. Then, two and eight
 * seconds later, calls the outage deferred that landed after the hand-back
 * become claimable (ownOutageDeferralsRelease).
 */
export async function handBack(old: Generation, retired: Promise<void>, context: ReleaseContext & { running(): boolean }): Promise<void> {
  let retiredDone = false;
  void retired.then(() => {
    retiredDone = true;
  });
  await releaseOwn(old, context);
  while (old.tasks.size > 0 && !retiredDone && !context.stopping()) {
    await Promise.race([
      retired,
      ...[...old.tasks.keys()].map((task) =>
        task.then(
          () => {},
          () => {},
        ),
      ),
    ]);
    await releaseOwn(old, context, { all: retiredDone });
  }
  for (const ms of [2000, 8000]) {
    await sleep(ms, context.wake);
    if (!context.running()) return;
    const undeferred = await ownOutageDeferralsRelease(context.pool, context.workerId).catch(() => []);
    if (undeferred.length > 0)
      context.logger.info({ workerId: context.workerId, conversations: undeferred.length }, 'calls deferred by the outage made claimable');
  }
}

/**
 * graphile-worker's runner as a caller sees it across generations: `stop`,
 * `kill` and `addJob` act on the current one (none while recovering or
 * stopping); `promise` and `events` are the worker's own.
 */
export function currentRunner(current: () => Generation | null, promise: Promise<void>, events: WorkerEvents): Runner {
  return {
    stop: (reason?: string) => current()?.runner.stop(reason) ?? Promise.reject(new Error('Runner is already stopped')),
    kill: (reason?: string) => current()?.runner.kill(reason) ?? Promise.resolve(),
    addJob: ((...args: Parameters<Runner['addJob']>) => {
      const gen = current();
      if (!gen) return Promise.reject(new Error('the worker has no running runner (stopping or recovering)'));
      return gen.runner.addJob(...args);
    }) as Runner['addJob'],
    promise,
    events,
  };
}
