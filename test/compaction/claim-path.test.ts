import type pg from 'pg';
import type { JobHelpers } from 'graphile-worker';
import { describe, expect, it } from 'vitest';
import type { Outcome, Summarizer, SummaryRequest } from '../../src/support/summary-contract.ts';
import { silentLogger } from '../../src/support/logger.ts';
import { compactConversationTask } from '../../src/worker/tasks/compact-conversation.ts';
import { createTestDatabase } from '../support/db.ts';
import { addPairs, createConversation } from '../support/fixtures.ts';

/**
 * The claim path (issue 14, P4 and P3): what the compact_conversation task
 * sends PostgreSQL between graphile-worker starting it and the summarizer
 * call, and in all. Counted in statements (each is a round trip), never in
 * time, on the real task with the real queries; graphile-worker's own
 * get_job and complete_job are outside the task and not counted. If the
 * claim path regrows (a marks read of its own, a scope read, a claim split
 * in steps), these fail.
 */
const db = await createTestDatabase();

/** A pool whose every query is logged (its text). */
function counting(pool: pg.Pool): { pool: pg.Pool; sent: string[] } {
  const sent: string[] = [];
  const proxy = new Proxy(pool, {
    get(target, prop, receiver) {
      if (prop === 'query') {
        return (...args: unknown[]) => {
          const text = typeof args[0] === 'string' ? args[0] : (args[0] as { text: string }).text;
          sent.push(text.replace(/\s+/g, ' ').trim());
          return (target.query as (...a: unknown[]) => unknown).apply(target, args);
        };
      }
      if (prop === 'connect') throw new Error('the task checked out a client: its statements would not be counted');
      return Reflect.get(target, prop, receiver);
    },
  });
  return { pool: proxy, sent };
}

/** Runs the task once; returns the statements sent before the summarizer call and in all. */
async function runTask(conversationId: string): Promise<{ beforeCall: string[] | null; all: string[]; requests: SummaryRequest[] }> {
  const counter = counting(db.pool);
  let beforeCall: string[] | null = null;
  const requests: SummaryRequest[] = [];
  const summarizer: Summarizer = {
    model: 'test/claim-path',
    summarize: async (r: SummaryRequest): Promise<Outcome> => {
      beforeCall ??= [...counter.sent];
      requests.push(r);
      return { kind: 'ok', text: `summary of ${r.items.length} replies`, model: 'test/claim-path', usage: null, requestId: null };
    },
  };
  const task = compactConversationTask({ pool: counter.pool, summarizer, logger: silentLogger, workerId: 'claim-path', leaseMs: 60_000 });
  const helpers = { job: { id: '1' }, abortSignal: new AbortController().signal } as unknown as JobHelpers;
  await task({ conversationId }, helpers);
  return { beforeCall, all: counter.sent, requests };
}

describe('the claim path of a compaction job', () => {
  it('one statement from task start to the summarizer call (the claim finds its mark), two in all for one range', async () => {
    const c = await createConversation(db.pool);
    await addPairs(db.pool, c, 30);
    const { beforeCall, all, requests } = await runTask(c);
    expect(beforeCall).toHaveLength(1);
    expect(beforeCall![0]).toMatch(/sourcebound\.claim_range\(/);
    // The claim's one statement hands over the range's ten replies, in pair order, as stored, each
    // named by its pair number (conversation-compaction@5).
    const { rows: replies } = await db.pool.query<{ id: string; text: string }>(
      `select pair_index::text as id, assistant_text as text from sourcebound.eligible_pairs
       where conversation_id = $1 and pair_index between 0 and 9 order by pair_index`,
      [c],
    );
    expect(replies).toHaveLength(10);
    expect(requests.map((r) => r.items)).toEqual([replies]);
    // The commit says no mark is left: no statement to find that out.
    expect(all).toHaveLength(2);
    expect(all[1]).toMatch(/sourcebound\.commit_summary\(/);
  });

  it('the same at 300 pairs with one new range: the path does not grow with history', async () => {
    const c = await createConversation(db.pool);
    await addPairs(db.pool, c, 290);
    await runTask(c);
    await addPairs(db.pool, c, 10, undefined, { startAt: 290 });
    const { beforeCall, all } = await runTask(c);
    expect(beforeCall).toHaveLength(1);
    expect(all).toHaveLength(2);
  });

  it('n ranges: n claims and n commits, nothing else', async () => {
    const c = await createConversation(db.pool);
    await addPairs(db.pool, c, 60);
    const { beforeCall, all } = await runTask(c);
    expect(beforeCall).toHaveLength(1);
    expect(all.filter((s) => /claim_range\(/.test(s))).toHaveLength(4);
    expect(all.filter((s) => /commit_summary\(/.test(s))).toHaveLength(4);
    expect(all).toHaveLength(8);
  });

  it('a job with nothing to do: the claim finds no mark, and one read tells a deleted conversation apart', async () => {
    const c = await createConversation(db.pool);
    await addPairs(db.pool, c, 30);
    await runTask(c);
    const idle = await runTask(c);
    expect(idle.beforeCall).toBeNull();
    expect(idle.all).toHaveLength(2);
    expect(idle.all[1]).toMatch(/from sourcebound\.conversations/);
    expect((await runTask('00000000-0000-4000-8000-000000000000')).all).toHaveLength(2);
  });
});
