import type { Task } from 'graphile-worker';
import type pg from 'pg';
import type { Logger } from '../../support/logger.ts';
import { compactionSweepRun } from '../../db/queries/summaries.ts';

/** sweep_compaction (crontab): re-enqueue conversations whose plannable ranges lost their job. */
export function sweepCompactionTask(ctx: { pool: pg.Pool; logger: Logger }): Task {
  return async (_payload, helpers) => {
    const enqueued = await compactionSweepRun(ctx.pool);
    if (enqueued > 0) ctx.logger.info({ task: 'sweep_compaction', jobId: helpers.job.id, enqueued }, 'sweep re-enqueued conversations');
  };
}
