/**
 * The worker registry: one row per live `sourcebound worker` process, beaten
 * every few seconds (sourcebound.worker_beat()). A process that stops beating
 * (SIGKILL, OOM, a lost host) is found by the others, which hand back what it
 * held: graphile-worker's locks on its jobs and the leases of its claims.
 * Written only by those functions; the owner's, never an app's.
 */
import { sql } from 'drizzle-orm';
import { check, text, timestamp } from 'drizzle-orm/pg-core';
import { sourcebound } from './conversations.ts';

export const workers = sourcebound.table(
  'workers',
  {
    /** The process's worker id; its claims' lease owner is this id or `<id>/r<n>` (a runner started after a recovery). */
    workerId: text('worker_id').primaryKey(),
    /** The ids graphile-worker locks this process's jobs with (one per runner it started). */
    graphileWorkerIds: text('graphile_worker_ids')
      .array()
      .notNull()
      .default(sql`'{}'::text[]`),
    startedAt: timestamp('started_at', { withTimezone: true }).notNull().defaultNow(),
    beatAt: timestamp('beat_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [check('workers_id_not_blank', sql`btrim(${t.workerId}) <> ''`)],
);
