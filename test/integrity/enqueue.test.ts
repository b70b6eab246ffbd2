import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { createTestDatabase } from '../support/db.ts';
import { createConversation } from '../support/fixtures.ts';

/**
 * sourcebound.enqueue_compaction (0021) takes a cheap path when no job has the
 * conversation's key, and graphile-worker's own preserve_run_at rules
 * otherwise. Each case is run twice, once through enqueue_compaction and once
 * through add_job(preserve_run_at) directly, and must end in the same jobs.
 */
const db = await createTestDatabase();

type Setup = (key: string, conversationId: string) => Promise<void>;

const addJob = (key: string, conversationId: string, extra = '') =>
  db.pool.query(
    `select graphile_worker.add_job('compact_conversation', json_build_object('conversationId', $2::uuid),
       job_key := $1, job_key_mode := 'preserve_run_at'${extra})`,
    [key, conversationId],
  );

const cases: { name: string; setup: Setup }[] = [
  { name: 'no job with the key', setup: async () => {} },
  {
    name: 'a waiting job deferred into the future',
    setup: (key, c) => addJob(key, c, `, run_at := now() + interval '1 hour'`).then(() => {}),
  },
  {
    name: 'a waiting job with a failed attempt (backoff)',
    setup: async (key, c) => {
      await addJob(key, c);
      await db.pool.query(
        `update graphile_worker._private_jobs set attempts = 1, last_error = 'boom', run_at = now() + interval '10 minutes' where key = $1`,
        [key],
      );
    },
  },
  {
    name: 'a running (locked) job',
    setup: async (key, c) => {
      await addJob(key, c);
      await db.pool.query(
        `update graphile_worker._private_jobs set locked_at = now(), locked_by = 'worker-x', attempts = attempts + 1 where key = $1`,
        [key],
      );
    },
  },
];

async function jobsOf(conversationId: string) {
  const { rows } = await db.pool.query(
    `select key is not null as keyed, locked_at is not null as locked, attempts, last_error,
            run_at > now() + interval '30 seconds' as later
     from graphile_worker._private_jobs where payload->>'conversationId' = $1 order by id`,
    [conversationId],
  );
  return rows;
}

describe("enqueue_compaction keeps graphile-worker's preserve_run_at rules", () => {
  it.each(cases)('$name', async ({ setup }) => {
    const ours = await createConversation(db.pool);
    const theirs = await createConversation(db.pool);
    await setup(`sourcebound:compact:${ours}`, ours);
    await setup(`sourcebound:compact:${theirs}`, theirs);
    await db.pool.query('select sourcebound.enqueue_compaction($1)', [ours]);
    await addJob(`sourcebound:compact:${theirs}`, theirs);
    const got = await jobsOf(ours);
    expect(got.length).toBeGreaterThan(0);
    expect(got).toEqual(await jobsOf(theirs));
    // Twice more: still deduplicated the same way.
    await db.pool.query('select sourcebound.enqueue_compaction($1)', [ours]);
    await addJob(`sourcebound:compact:${theirs}`, theirs);
    expect(await jobsOf(ours)).toEqual(await jobsOf(theirs));
  });
});

/**
 * Fault scenario 4 found a deadlock between two enqueue_compaction() calls of
 * one conversation (0026). Replayed here step by step: a worker is taking the
 * fresh job (its row locked FOR UPDATE, as graphile-worker's get_job does),
 * two enqueues of the conversation wait for it, the worker commits. Both then
 * find the job running; before 0026 each kept the share lock of its recheck
 * and waited for the other's key update, and PostgreSQL failed one of them.
 */
describe('enqueue_compaction while a worker takes the job', () => {
  it('two enqueues waiting for the worker both succeed and leave one fresh job', async () => {
    const conversationId = await createConversation(db.pool);
    const key = `sourcebound:compact:${conversationId}`;
    await db.pool.query('select sourcebound.enqueue_compaction($1)', [conversationId]);
    const clients = await Promise.all(
      Array.from({ length: 3 }, async (_, k) => {
        const c = new pg.Client({ connectionString: db.url, application_name: `enqueue-race-${k}` });
        c.on('error', () => {});
        await c.connect();
        return c;
      }),
    );
    const [worker, a, b] = clients as [pg.Client, pg.Client, pg.Client];
    try {
      await worker.query('begin');
      await worker.query('select 1 from graphile_worker._private_jobs where key = $1 for update', [key]);
      await worker.query(
        `update graphile_worker._private_jobs set locked_at = now(), locked_by = 'worker-x', attempts = attempts + 1 where key = $1`,
        [key],
      );
      const enqueues = [a, b].map((c) => c.query('select sourcebound.enqueue_compaction($1)', [conversationId]));
      // Both enqueues are waiting (for the worker's row lock, or since 0026 one of them for the key's lock).
      for (;;) {
        const { rows } = await db.pool.query(
          `select count(*)::int as n from pg_stat_activity where application_name like 'enqueue-race-%' and wait_event_type = 'Lock'`,
        );
        if (rows[0].n === 2) break;
        await new Promise<void>((resolve) => setImmediate(resolve));
      }
      await worker.query('commit');
      const settled = await Promise.allSettled(enqueues);
      expect(settled.map((r) => (r.status === 'rejected' ? String((r.reason as Error).message) : 'ok'))).toEqual(['ok', 'ok']);
    } finally {
      await Promise.all(clients.map((c) => c.end()));
    }
    const { rows } = await db.pool.query(
      `select count(*) filter (where locked_at is null and attempts = 0)::int as fresh,
              count(*) filter (where locked_by = 'worker-x')::int as running
       from graphile_worker._private_jobs where payload->>'conversationId' = $1`,
      [conversationId],
    );
    expect(rows[0]).toEqual({ fresh: 1, running: 1 });
  });
});
