/**
 * The compaction queue as graphile-worker holds it (its public `jobs` view),
 * named noun-first: what the worker's queue gauges read, and the one way a
 * conversation's compaction is enqueued by hand.
 */
import type { Queryable } from '../queryable.ts';

export interface CompactionQueueRow {
  /** compact_conversation jobs runnable now and not locked. */
  depth: number;
  /** How long the oldest of them has waited, in seconds (0 when none). */
  oldest: number;
}

/** Runnable compaction jobs and the oldest one's wait, fleet-wide. */
export async function compactionQueueRead(db: Queryable): Promise<CompactionQueueRow> {
  const { rows } = await db.query<CompactionQueueRow>(`select count(*)::int as depth,
    coalesce(extract(epoch from now() - min(run_at)), 0)::float8 as oldest
  from graphile_worker.jobs
  where task_identifier = 'compact_conversation' and locked_at is null and run_at <= now() and attempts < max_attempts`);
  return rows[0]!;
}

/**
 * sourcebound.enqueue_compaction(scope, id): a job for the conversation.
 * @throws its no_data_found (P0002, conversation_in_scope) for a conversation not in `scope`, whether or not it exists elsewhere.
 */
export async function compactionEnqueue(db: Queryable, scope: string, conversationId: string): Promise<void> {
  await db.query('select sourcebound.enqueue_compaction($1, $2)', [scope, conversationId]);
}
