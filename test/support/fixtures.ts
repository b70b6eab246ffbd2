import type pg from 'pg';

/** Anything that can run a query: a pool or a checked-out client. */
import type { Queryable } from '../../src/db/queryable.ts';
export type { Queryable };

export async function createConversation(db: Queryable, scope = 'tenant-a'): Promise<string> {
  const { rows } = await db.query<{ id: string }>('insert into sourcebound.conversations (scope) values ($1) returning id', [scope]);
  return rows[0]!.id;
}

export interface WrittenPair {
  runId: string;
  userMessageId: string;
  assistantMessageId: string;
}

/**
 * Writes `count` completed pairs the way an application would: one run, the
 * user message, the assistant message, in one statement per table, so a bulk
 * write fires the triggers row by row inside one transaction.
 */
export async function addPairs(
  db: Queryable,
  conversationId: string,
  count: number,
  text: (i: number) => { user: string; assistant: string } = (i) => ({ user: `question ${i}`, assistant: `answer ${i}` }),
  options: { runStatus?: string; startAt?: number } = {},
): Promise<WrittenPair[]> {
  if (count === 0) return [];
  const start = options.startAt ?? 0;
  const texts = Array.from({ length: count }, (_, i) => text(start + i));
  const { rows } = await db.query<{ run_id: string; user_id: string; assistant_id: string }>(
    `with r as (
       insert into sourcebound.runs (conversation_id, status)
       select $1, $2 from generate_series(1, $3::int)
       returning id, seq
     ), numbered as (
       select id, row_number() over (order by seq) as n from r
     ), u as (
       insert into sourcebound.messages (conversation_id, run_id, role, content, status)
       select $1, numbered.id, 'user', ($4::text[])[numbered.n], 'completed' from numbered
       returning id, run_id
     ), a as (
       insert into sourcebound.messages (conversation_id, run_id, role, content, status)
       select $1, numbered.id, 'assistant', ($5::text[])[numbered.n], 'completed' from numbered
       returning id, run_id
     )
     select numbered.id as run_id, u.id as user_id, a.id as assistant_id
     from numbered join u on u.run_id = numbered.id join a on a.run_id = numbered.id
     order by numbered.n`,
    [conversationId, options.runStatus ?? 'completed', count, texts.map((t) => t.user), texts.map((t) => t.assistant)],
  );
  return rows.map((r) => ({ runId: r.run_id, userMessageId: r.user_id, assistantMessageId: r.assistant_id }));
}

export async function pairCount(db: Queryable, conversationId: string): Promise<number> {
  const { rows } = await db.query<{ n: number }>('select count(*)::int as n from sourcebound.pairs where conversation_id = $1', [
    conversationId,
  ]);
  return rows[0]!.n;
}

/** compact_conversation jobs waiting or running for a conversation. */
export async function compactionJobs(db: Queryable, conversationId?: string): Promise<number> {
  const { rows } = await db.query<{ n: number }>(
    `select count(*)::int as n from graphile_worker._private_jobs j
     join graphile_worker._private_tasks t on t.id = j.task_id
     where t.identifier = 'compact_conversation' and ($1::text is null or j.payload->>'conversationId' = $1)`,
    [conversationId ?? null],
  );
  return rows[0]!.n;
}

export async function drift(db: Queryable, conversationId: string): Promise<unknown[]> {
  return (await db.query('select * from sourcebound.pairs_drift($1)', [conversationId])).rows;
}
