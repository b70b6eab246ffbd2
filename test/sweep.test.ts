import { afterAll, describe, expect, it } from 'vitest';
import { compactConversation } from '../src/conversation/compact.ts';
import { compactionSweepRun } from '../src/db/queries/summaries.ts';
import { silentLogger } from '../src/support/logger.ts';
import { createTestDatabase } from './support/db.ts';
import { addPairs, compactionJobs, createConversation } from './support/fixtures.ts';
import { gatewayFor } from './support/gateway.ts';
import { startMessagesServer } from './support/messages-server.ts';

const db = await createTestDatabase();
const server = await startMessagesServer();
afterAll(() => server.close());
const ctx = () => ({ pool: db.pool, summarizer: gatewayFor(server), logger: silentLogger, workerId: 'w', leaseMs: 60_000 });

describe('the sweep', () => {
  it('re-enqueues a conversation whose job was lost, and leaves settled ones alone', async () => {
    const lost = await createConversation(db.pool);
    await addPairs(db.pool, lost, 35);
    const done = await createConversation(db.pool);
    await addPairs(db.pool, done, 35);
    await compactConversation(ctx(), done);
    const small = await createConversation(db.pool);
    await addPairs(db.pool, small, 29);
    await db.pool.query('delete from graphile_worker._private_jobs');

    expect(await compactionSweepRun(db.pool)).toBe(1);
    expect(await compactionJobs(db.pool, lost)).toBe(1);
    expect(await compactionJobs(db.pool, done)).toBe(0);
    expect(await compactionJobs(db.pool, small)).toBe(0);
  });

  it('re-enqueues a range whose pairs shifted under its summary', async () => {
    const c = await createConversation(db.pool);
    const written = await addPairs(db.pool, c, 30);
    await compactConversation(ctx(), c);
    await db.pool.query('delete from graphile_worker._private_jobs');
    await compactionSweepRun(db.pool);
    expect(await compactionJobs(db.pool, c)).toBe(0);
    // Pair 2 stops being eligible: pairs 3.. shift down and range 0-9 has new ids.
    await db.pool.query(`update sourcebound.runs set status = 'failed' where id = $1`, [written[2]!.runId]);
    await addPairs(db.pool, c, 1, undefined, { startAt: 30 });
    await db.pool.query('delete from graphile_worker._private_jobs');
    await compactionSweepRun(db.pool);
    expect(await compactionJobs(db.pool, c)).toBe(1);
  });

  it('leaves a marked conversation alone while its job waits, and re-enqueues it once the job is lost or stuck locked', async () => {
    const c = await createConversation(db.pool);
    await addPairs(db.pool, c, 30);
    // The crossing marked range 0-9 and enqueued the conversation: nothing is lost.
    expect(await compactionJobs(db.pool, c)).toBe(1);
    await compactionSweepRun(db.pool);
    expect(await compactionJobs(db.pool, c)).toBe(1);
    const revision = async () =>
      (await db.pool.query(`select revision from graphile_worker._private_jobs where key = $1`, [`sourcebound:compact:${c}`])).rows[0]
        ?.revision;
    const before = await revision();
    await compactionSweepRun(db.pool);
    expect(await revision()).toBe(before);
    // Its worker was SIGKILLed mid-job: the job stays locked for hours. The
    // sweep enqueues again (graphile-worker adds a new job beside the locked one).
    await db.pool.query(`update graphile_worker._private_jobs set locked_at = now(), locked_by = 'killed', attempts = 1 where key = $1`, [
      `sourcebound:compact:${c}`,
    ]);
    await compactionSweepRun(db.pool);
    expect(await compactionJobs(db.pool, c)).toBe(2);
    await db.pool.query('delete from graphile_worker._private_jobs');
    await compactionSweepRun(db.pool);
    expect(await compactionJobs(db.pool, c)).toBe(1);
  });

  it('item 5 of issue 11: an edit inside a summarized range whose job was lost, or failed for good (401), is repaired', async () => {
    const c = await createConversation(db.pool);
    const written = await addPairs(db.pool, c, 30);
    await compactConversation(ctx(), c);
    expect(await db.pool.query(`select * from sourcebound.ranges_needing_work($1)`, [c]).then((r) => r.rowCount)).toBe(0);
    // The ids stay the same; only the text (and so the binding) changes.
    await db.pool.query(`update sourcebound.messages set content = 'edited question' where id = $1`, [written[3]!.userMessageId]);
    expect((await db.pool.query(`select * from sourcebound.ranges_needing_work($1) r`, [c])).rows.map((r) => r.r)).toEqual([0]);
    await db.pool.query('delete from graphile_worker._private_jobs');
    await compactionSweepRun(db.pool);
    expect(await compactionJobs(db.pool, c)).toBe(1);
    // The job failed once (a 401) and waits out its retry backoff: the sweep resets it to run now.
    await db.pool.query(
      `update graphile_worker._private_jobs set attempts = 1, last_error = '401', run_at = now() + interval '1 hour' where key = $1`,
      [`sourcebound:compact:${c}`],
    );
    await compactionSweepRun(db.pool);
    expect(
      (
        await db.pool.query(`select attempts, run_at <= now() as due from graphile_worker._private_jobs where key = $1`, [
          `sourcebound:compact:${c}`,
        ])
      ).rows,
    ).toEqual([{ attempts: 0, due: true }]);
    // The job fails for good (a 401 all the way through its retries): it still counts as lost.
    await db.pool.query(
      `update graphile_worker._private_jobs set attempts = max_attempts, last_error = '401', run_at = now() + interval '1 day' where key = $1`,
      [`sourcebound:compact:${c}`],
    );
    await compactionSweepRun(db.pool);
    const { rows } = await db.pool.query(`select attempts, run_at <= now() as due from graphile_worker._private_jobs where key = $1`, [
      `sourcebound:compact:${c}`,
    ]);
    expect(rows).toEqual([{ attempts: 0, due: true }]);
    // The repaired job summarizes the new source; then nothing needs work and nothing is marked.
    await compactConversation(ctx(), c);
    expect((await db.pool.query(`select * from sourcebound.ranges_needing_work($1)`, [c])).rowCount).toBe(0);
    expect((await db.pool.query(`select * from sourcebound.compaction_marks where conversation_id = $1`, [c])).rowCount).toBe(0);
  });

  it('pages through more conversations than its limit: each run takes the next ones, all are reached', async () => {
    const lost: string[] = [];
    for (let i = 0; i < 7; i++) {
      const c = await createConversation(db.pool);
      await addPairs(db.pool, c, 30);
      lost.push(c);
    }
    // Other tests' conversations are marked too: all of them share the pages.
    const marked = (await db.pool.query<{ c: string }>('select distinct conversation_id as c from sourcebound.compaction_marks')).rows.map(
      (r) => r.c,
    );
    expect(marked).toEqual(expect.arrayContaining(lost));
    const reached: string[] = [];
    for (let run = 0; run < Math.ceil(marked.length / 3); run++) {
      await db.pool.query('delete from graphile_worker._private_jobs');
      await compactionSweepRun(db.pool, 3);
      const { rows } = await db.pool.query<{ c: string }>(`select payload->>'conversationId' as c from graphile_worker._private_jobs`);
      reached.push(...rows.map((r) => r.c));
    }
    // Each run took the next page: every marked conversation was reached, and
    // only the last page, which wraps around to fill itself, repeats any.
    const runs = Math.ceil(marked.length / 3);
    expect(new Set(reached)).toEqual(new Set(marked));
    expect(reached.length - new Set(reached).size).toBe(3 * runs - marked.length);
  });
});
