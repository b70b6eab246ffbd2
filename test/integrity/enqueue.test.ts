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
       job_key := $1, job_key_mode := 'preserve_run_at'${extra})`, [key, conversationId]);

const cases: { name: string; setup: Setup }[] = [
  { name: 'no job with the key', setup: async () => {} },
  { name: 'a waiting job deferred into the future', setup: (key, c) => addJob(key, c, `, run_at := now() + interval '1 hour'`).then(() => {}) },
  {
    name: 'a waiting job with a failed attempt (backoff)',
    setup: async (key, c) => {
      await addJob(key, c);
      await db.pool.query(`update graphile_worker._private_jobs set attempts = 1, last_error = 'boom', run_at = now() + interval '10 minutes' where key = $1`, [key]);
    },
  },
  {
    name: 'a running (locked) job',
    setup: async (key, c) => {
      await addJob(key, c);
      await db.pool.query(`update graphile_worker._private_jobs set locked_at = now(), locked_by = 'worker-x' where key = $1`, [key]);
    },
  },
];

async function jobsOf(conversationId: string) {
  const { rows } = await db.pool.query(
    `select key is not null as keyed, locked_at is not null as locked, attempts, last_error,
            run_at > now() + interval '30 seconds' as later
     from graphile_worker._private_jobs where payload->>'conversationId' = $1 order by id`, [conversationId]);
  return rows;
}

describe('enqueue_compaction keeps graphile-worker\'s preserve_run_at rules', () => {
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
