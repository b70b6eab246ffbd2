import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { packageFile } from '../support/package-files.ts';
import type pg from 'pg';
import { conversationInsertIfAbsent, messageInsert, runInsert, runStatusUpdate } from '../db/queries/turns.ts';

/** The demo's conversations: real threads from oasst1 (Apache-2.0, see demo/README.md). */
export const DEMO_DATA = packageFile('demo', 'oasst1-sample.jsonl');
export const DEMO_SCOPE = 'demo';

export interface Thread {
  id: string;
  pairs: { user: string; assistant: string }[];
}

/** Reads a JSONL file of threads (`{ id, pairs: [{ user, assistant }] }` per line). */
export function readThreads(path = DEMO_DATA): Thread[] {
  return readFileSync(path, 'utf8')
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((line, n) => {
      const value = JSON.parse(line) as Thread;
      if (typeof value.id !== 'string' || !Array.isArray(value.pairs)) throw new Error(`${path}:${n + 1}: not a thread`);
      return { id: value.id, pairs: value.pairs.map((p) => ({ user: String(p.user), assistant: String(p.assistant) })) };
    });
}

/** A stable conversation id for a thread, so running the demo twice reuses its data. */
export function conversationIdFor(threadId: string): string {
  const h = createHash('sha256').update(`sourcebound-demo:${threadId}`).digest('hex');
  // Shaped as an RFC 9562 version-8 (custom) UUID.
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-8${h.slice(13, 16)}-${((parseInt(h[16]!, 16) & 0x3) | 0x8).toString(16)}${h.slice(17, 20)}-${h.slice(20, 32)}`;
}

/**
 * Writes a thread the way an application would: the conversation, then each
 * exchange as a run with its user message and completed assistant message,
 * run completed. Returns false when it already exists.
 */
export async function writeThread(
  pool: pg.Pool,
  thread: Thread,
  scope = DEMO_SCOPE,
): Promise<{ conversationId: string; created: boolean }> {
  const conversationId = conversationIdFor(thread.id);
  const client = await pool.connect();
  try {
    await client.query('begin');
    if (!(await conversationInsertIfAbsent(client, conversationId, scope))) {
      await client.query('rollback');
      return { conversationId, created: false };
    }
    for (const pair of thread.pairs) {
      const runId = await runInsert(client, conversationId, 'running');
      await messageInsert(client, { conversationId, runId, role: 'user', content: pair.user, status: 'completed' });
      await messageInsert(client, { conversationId, runId, role: 'assistant', content: pair.assistant, status: 'completed' });
      await runStatusUpdate(client, runId, 'completed');
    }
    await client.query('commit');
    return { conversationId, created: true };
  } catch (error) {
    await client.query('rollback').catch(() => {});
    throw error;
  } finally {
    client.release();
  }
}

export interface RangeProgress {
  planned: number;
  completed: number;
  failed: number;
}

/** Planned ranges of some conversations and how many are settled (completed, or failed for good) for their current sources. */
export async function rangeProgress(pool: pg.Pool, conversationIds: string[]): Promise<RangeProgress> {
  const { rows } = await pool.query<RangeProgress>(
    `select coalesce(sum(n), 0)::int as planned,
            coalesce(sum(done), 0)::int as completed,
            coalesce(sum(failed), 0)::int as failed
     from (
       select sourcebound.plannable_range_count(coalesce(max(p.pair_index) + 1, 0)::int) as n,
              (select count(*) from sourcebound.conversation_summaries s where s.conversation_id = c.id and s.status = 'completed'
                 and not sourcebound.range_needs_work(c.id, s.from_pair)) as done,
              (select count(*) from sourcebound.conversation_summaries s where s.conversation_id = c.id and s.status = 'failed'
                 and not sourcebound.range_needs_work(c.id, s.from_pair)) as failed
       from sourcebound.conversations c left join sourcebound.pairs p on p.conversation_id = c.id
       where c.id = any($1::uuid[])
       group by c.id
     ) x`,
    [conversationIds],
  );
  return rows[0]!;
}
