/**
 * What a worker hands back instead of waiting for graphile-worker's 4-hour
 * lock expiry and the claims' leases: after it replaced its own runner
 * (PostgreSQL restarted, or the runner stopped on its own), and for a worker
 * that stopped beating (SIGKILL, OOM). The writes are the owner's functions
 * (migrations: claims_hand_back, outage_deferrals_release, worker_beat,
 * worker_leave); the worker role has no write grant on the summaries.
 */
import type { Queryable } from '../queryable.ts';

/**
 * Unlocks the jobs graphile-worker had locked for these worker (pool) ids,
 * except `runningJobIds` (a retired runner's task still runs them: unlocked,
 * another runner would start the same conversation beside it). Without
 * exceptions this is graphile-worker's `force_unlock_workers`; with them, the
 * same update on its jobs table minus those ids (we use no named queues, whose
 * locks `force_unlock_workers` also clears). Returns how many were unlocked.
 */
export async function workerJobsUnlock(
  db: Queryable,
  graphileWorkerIds: readonly string[],
  runningJobIds: readonly string[] = [],
): Promise<number> {
  if (graphileWorkerIds.length === 0) return 0;
  if (runningJobIds.length === 0) {
    const { rows } = await db.query<{ n: number }>(
      `select count(*)::int as n from graphile_worker.jobs where locked_by = any($1::text[])`,
      [graphileWorkerIds],
    );
    await db.query('select graphile_worker.force_unlock_workers($1::text[])', [graphileWorkerIds]);
    return rows[0]!.n;
  }
  const { rowCount } = await db.query(
    `update graphile_worker._private_jobs set locked_at = null, locked_by = null
     where locked_by = any($1::text[]) and not (id = any($2::bigint[]))`,
    [graphileWorkerIds, runningJobIds],
  );
  return rowCount ?? 0;
}

/**
 * Ends the leases of running claims owned by `leaseOwner` (a retired runner's,
 * but none in `exceptConversations`, where its tasks still run), so the next
 * claim takes them over now and settles the interrupted attempt as `unknown`,
 * spent; ranges it deferred because of the outage become claimable now. Each
 * conversation gets a job that runs now. Returns the conversations.
 */
export async function ownClaimsRelease(db: Queryable, leaseOwner: string, exceptConversations: readonly string[] = []): Promise<string[]> {
  const { rows } = await db.query<{ c: string }>('select c from sourcebound.claims_hand_back($1, $2::uuid[]) as c', [
    leaseOwner,
    exceptConversations,
  ]);
  return rows.map((r) => r.c);
}

/**
 * A safety net a few seconds after a recovery: ranges this process (any of
 * its runners) deferred in the last two minutes because of the outage become
 * claimable now, with a job that runs now. Returns the conversations.
 */
export async function ownOutageDeferralsRelease(db: Queryable, workerId: string): Promise<string[]> {
  const { rows } = await db.query<{ c: string }>('select c from sourcebound.outage_deferrals_release($1) as c', [workerId]);
  return rows.map((r) => r.c);
}

/** A worker the beat found silent and reaped: its jobs unlocked and its claims' leases ended. */
export interface ReapedWorker {
  workerId: string;
  silentMs: number;
  jobsUnlocked: number;
  claimsReleased: number;
}

/**
 * The heartbeat: records `workerId` alive with the graphile-worker ids its
 * runners lock jobs with, and reaps every other worker silent for
 * `deadAfterMs`, in one statement. Returns the workers reaped.
 */
export async function workerBeat(
  db: Queryable,
  workerId: string,
  graphileWorkerIds: readonly string[],
  deadAfterMs: number,
): Promise<ReapedWorker[]> {
  const { rows } = await db.query<ReapedWorker>(
    `select worker_id as "workerId", silent_ms as "silentMs", jobs_unlocked as "jobsUnlocked", claims_released as "claimsReleased"
     from sourcebound.worker_beat($1, $2::text[], $3)`,
    [workerId, graphileWorkerIds, deadAfterMs],
  );
  return rows;
}

/** A stopping worker hands back what it still holds and leaves the registry. */
export async function workerLeave(db: Queryable, workerId: string): Promise<{ jobsUnlocked: number; claimsReleased: number }> {
  const { rows } = await db.query<{ jobsUnlocked: number; claimsReleased: number }>(
    'select jobs_unlocked as "jobsUnlocked", claims_released as "claimsReleased" from sourcebound.worker_leave($1)',
    [workerId],
  );
  return rows[0]!;
}
