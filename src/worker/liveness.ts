import type pg from 'pg';
import type { Logger } from '../support/logger.ts';
import { workerBeat, workerLeave } from '../db/queries/recovery.ts';
import { bounded } from '../support/bounded.ts';
import type { WorkerMetrics } from './metrics.ts';

/** How often a worker beats (sourcebound.worker_beat()). */
export const BEAT_MS = 5000;
/**
 * Silence after which the others reap a worker: four missed beats. A live
 * worker's event loop is never blocked that long (grounding, the longest
 * synchronous step, yields), and after a PostgreSQL restart the silence is
 * counted from the server's start.
 */
export const DEAD_AFTER_MS = 20_000;

export interface Liveness {
  /** One beat now (the first, before jobs are taken); throws what PostgreSQL said. */
  beat(): Promise<void>;
  /** Beats every BEAT_MS from now on. */
  start(): void;
  /** When a beat was last recorded (epoch ms), or null. */
  okAt(): number | null;
  /** Stops beating, hands back what this worker still holds and leaves the registry; never throws, bounded. */
  leave(): Promise<void>;
}

/**
 * The worker's membership of the fleet: its heartbeat, which also reaps the
 * workers that stopped beating, so a SIGKILLed or OOM-killed worker's
 * ranges are taken over and its graphile-worker jobs unlocked within about
 * half a minute, not after its leases and four hours of job locks. Every
 * worker watches every other; a dead one is reaped once (its row is deleted
 * under its lock).
 */
export function createLiveness(options: {
  pool: pg.Pool;
  workerId: string;
  /** The ids graphile-worker locks this process's jobs with (every runner it started). */
  graphileWorkerIds: () => string[];
  logger: Logger;
  metrics: WorkerMetrics;
}): Liveness {
  const { pool, workerId, logger, metrics } = options;
  let timer: NodeJS.Timeout | null = null;
  let left = false;
  let failing = false;
  let okAt: number | null = null;

  async function beat(): Promise<void> {
    const reaped = await workerBeat(pool, workerId, options.graphileWorkerIds(), DEAD_AFTER_MS);
    okAt = Date.now();
    for (const dead of reaped) {
      metrics.deadWorkers.inc({ what: 'workers' });
      metrics.deadWorkers.inc({ what: 'jobs' }, dead.jobsUnlocked);
      metrics.deadWorkers.inc({ what: 'claims' }, dead.claimsReleased);
      logger.warn(
        {
          workerId,
          deadWorkerId: dead.workerId,
          silentMs: Math.round(dead.silentMs),
          jobsUnlocked: dead.jobsUnlocked,
          claimsReleased: dead.claimsReleased,
        },
        'a worker stopped beating: its jobs are unlocked and its claims released for the others to take over',
      );
    }
  }

  function tick(): void {
    timer = setTimeout(() => {
      void beat()
        .then(
          () => {
            if (failing) logger.info({ workerId }, 'heartbeat recorded again');
            failing = false;
          },
          (err: unknown) => {
            // The supervisor's probe reports a lost database; one line here when beats start failing.
            if (!failing) logger.warn({ err, workerId }, 'heartbeat failed; trying again at the next beat');
            failing = true;
          },
        )
        .finally(() => {
          if (!left) tick();
        });
    }, BEAT_MS);
    timer.unref();
  }

  return {
    beat,
    okAt: () => okAt,
    start() {
      if (timer === null && !left) tick();
    },
    async leave() {
      left = true;
      if (timer !== null) clearTimeout(timer);
      const handedBack = await bounded(
        workerLeave(pool, workerId).then(
          (r) => {
            if (r.jobsUnlocked + r.claimsReleased > 0) logger.warn({ workerId, ...r }, 'left jobs or claims behind at stop: handed back');
          },
          (err: unknown) =>
            logger.warn({ err, workerId }, 'could not leave the worker registry: the others reap this worker once it is silent'),
        ),
        5000,
      );
      if (!handedBack)
        logger.warn({ workerId }, 'leaving the worker registry did not answer in time: the others reap this worker once it is silent');
    },
  };
}
