/**
 * SQL a worker runs after it replaced its graphile-worker runner (PostgreSQL
 * restarted, or the runner stopped on its own), to hand back at once what the
 * old runner held instead of waiting for graphile-worker's 4-hour lock expiry
 * and our claim lease. Only this process's own ids are touched.
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
export async function workerJobsUnlock(db: Queryable, graphileWorkerIds: readonly string[], runningJobIds: readonly string[] = []): Promise<number> {
  if (graphileWorkerIds.length === 0) return 0;
  if (runningJobIds.length === 0) {
    const { rows } = await db.query<{ n: number }>(
      `select count(*)::int as n from graphile_worker.jobs where locked_by = any($1::text[])`, [graphileWorkerIds]);
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
 * Ends the leases of running claims owned by `leaseOwner` (the old runner's
 * claims, but none in `exceptConversations`, where its tasks still run), so the next claim takes them
 * over now: the takeover settles the interrupted attempt as `unknown`, spent
 * (it may have reached the model), exactly as after a lease expiry. Records
 * the old runner deferred because of the outage, not the provider (its last
 * attempt `deferred` with `admission_timeout`: admission could not reach
 * PostgreSQL, or `aborted_before_send`: the retirement aborted a call still
 * waiting for a slot) become claimable now too instead of after the deferral
 * delay. Then each
 * conversation gets a job that runs now, under its own key: re-adding the
 * conversation's usual job while a new runner is running it would make
 * graphile-worker give that running job `attempts = max_attempts` (it clears
 * the key of a locked job), so a failure of that run would leave it dead.
 * Returns the conversations.
 */
export async function ownClaimsRelease(db: Queryable, leaseOwner: string, exceptConversations: readonly string[] = []): Promise<string[]> {
  const { rows } = await db.query<{ conversationId: string }>(
    `with released as (
       update sourcebound.conversation_summaries set lease_expires_at = now()
       where status = 'running' and lease_owner = $1 and lease_expires_at > now() and not (conversation_id = any($2::uuid[]))
       returning conversation_id
     ), undeferred as (
       update sourcebound.conversation_summaries s set not_before = now()
       where s.status = 'pending' and s.not_before > now() and not (s.conversation_id = any($2::uuid[]))
         and (select a.worker_id = $1 and a.outcome = 'deferred' and a.reason in ('admission_timeout', 'aborted_before_send')
              from sourcebound.conversation_summary_attempts a
              where a.summary_id = s.id order by a.id desc limit 1)
       returning conversation_id)
     select distinct conversation_id as "conversationId" from (select * from released union all select * from undeferred) changed`,
    [leaseOwner, exceptConversations],
  );
  const conversations = rows.map((r) => r.conversationId);
  await compactionResumeJobsAdd(db, conversations);
  return conversations;
}

/**
 * A safety net a few seconds after a recovery: calls this process (`workerId`,
 * any of its runners) deferred in the last two minutes because of the outage
 * (`admission_timeout`, `aborted_before_send`; through a pooler a deferral can
 * commit late, or come from the new runner while admission reconnects) become
 * claimable now, with a job that runs now. Returns the conversations.
 */
export async function ownOutageDeferralsRelease(db: Queryable, workerId: string): Promise<string[]> {
  const { rows } = await db.query<{ conversationId: string }>(
    `with undeferred as (
       update sourcebound.conversation_summaries s set not_before = now()
       where s.status = 'pending' and s.not_before > now()
         and (select (a.worker_id = $1 or starts_with(a.worker_id, $1 || '/r')) and a.outcome = 'deferred'
                     and a.reason in ('admission_timeout', 'aborted_before_send') and a.finished_at > now() - interval '2 minutes'
              from sourcebound.conversation_summary_attempts a
              where a.summary_id = s.id order by a.id desc limit 1)
       returning conversation_id)
     select distinct conversation_id as "conversationId" from undeferred`,
    [workerId],
  );
  const conversations = rows.map((r) => r.conversationId);
  await compactionResumeJobsAdd(db, conversations);
  return conversations;
}

/**
 * A compaction job that runs now for each conversation, under its own key
 * (`sourcebound:compact-resume:<id>`): not the conversation's usual key, which
 * a running job may hold (see ownClaimsRelease). One statement.
 */
async function compactionResumeJobsAdd(db: Queryable, conversationIds: readonly string[]): Promise<void> {
  if (conversationIds.length === 0) return;
  await db.query(
    `select graphile_worker.add_job('compact_conversation', json_build_object('conversationId', c),
       run_at := now(), job_key := 'sourcebound:compact-resume:' || c, job_key_mode := 'replace')
     from unnest($1::uuid[]) as c`,
    [conversationIds],
  );
}
