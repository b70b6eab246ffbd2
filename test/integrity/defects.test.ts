import { describe, expect, it } from 'vitest';
import { summariesOfConversationRead } from '../../src/db/queries/summaries.ts';
import { createTestDatabase } from '../support/db.ts';
import { addPairs, compactionJobs, createConversation, drift, pairCount } from '../support/fixtures.ts';
import { spawnSourcebound } from '../support/processes.ts';
import { compactOffline, longText, projectAll, shape } from './support.ts';

/**
 * Regression tests of issue 11 (conversation integrity): each would fail on
 * the main branch the issue was filed against.
 */
const db = await createTestDatabase();

async function eligibleRows(conversationId: string): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>('select count(*)::int as n from sourcebound.eligible_pairs where conversation_id = $1', [conversationId]);
  return rows[0]!.n;
}

describe('1. a message whose id changes', () => {
  it('is a new pair: the index follows, the summary unbinds, the originals are projected and the range is compacted again', async () => {
    const c = await createConversation(db.pool);
    const written = await addPairs(db.pool, c, 50, longText);
    await compactOffline(db.pool, c);
    const [first] = await summariesOfConversationRead(db.pool, c);
    expect(first).toMatchObject({ fromPair: 0, status: 'completed' });
    expect(shape(await projectAll(db.pool, c)).summaries).toEqual([0, 10, 20]);
    await db.pool.query('delete from graphile_worker._private_jobs');

    const { rows: [changed] } = await db.pool.query<{ id: string }>(
      'update sourcebound.messages set id = gen_random_uuid() where id = $1 returning id', [written[3]!.userMessageId]);
    const newId = changed!.id;

    expect(await drift(db.pool, c)).toEqual([]);
    expect(await pairCount(db.pool, c)).toBe(50);
    expect(await eligibleRows(c)).toBe(50);
    // Case B: a change of identity unbinds the summary; the valid originals are projected.
    const p = await projectAll(db.pool, c);
    expect(p.problems).toEqual([]);
    expect(shape(p).summaries).toEqual([10, 20]);
    expect(p.summaryNotUsed).toContainEqual({ fromPair: 0, toPair: 9, reason: 'binding_changed', recordId: first!.id });
    expect(p.items.find((i) => i.kind === 'pair' && i.pairIndex === 3)).toMatchObject({ userMessageId: newId, userText: longText(3).user });
    // The edit is inside a planned range: it is enqueued, and the next pass summarizes the new source.
    expect(await compactionJobs(db.pool, c)).toBe(1);
    const report = await compactOffline(db.pool, c);
    expect(report.ranges[0]).toMatchObject({ fromPair: 0, result: 'completed' });
    expect(report.ranges[0]!.recordId).not.toBe(first!.id);
    expect(shape(await projectAll(db.pool, c)).summaries).toEqual([0, 10, 20]);
  });

  it('an assistant message id change in the raw tail changes the pair and enqueues nothing', async () => {
    const c = await createConversation(db.pool);
    const written = await addPairs(db.pool, c, 35);
    await db.pool.query('delete from graphile_worker._private_jobs');
    await db.pool.query('update sourcebound.messages set id = gen_random_uuid() where id = $1', [written[30]!.assistantMessageId]);
    expect(await drift(db.pool, c)).toEqual([]);
    expect(await eligibleRows(c)).toBe(35);
    expect(await compactionJobs(db.pool, c)).toBe(0);
  });
});

describe('10. sourcebound project --budget', () => {
  it.each([
    { args: ['--budget', ''] }, { args: ['--budget', ' '] }, { args: ['--budget', '1e3'] }, { args: ['--budget=-1'] }, { args: ['--budget', '12abc'] },
  ])('$args prints the usage and exits 2', async ({ args }) => {
    const cli = spawnSourcebound(['project', '00000000-0000-4000-8000-000000000000', '--scope', 's', ...args], { DATABASE_URL: db.url });
    expect(await cli.exited).toBe(2);
    expect(cli.stderr).toMatch(/--budget must be a whole number of bytes/);
    expect(cli.stderr).toMatch(/usage: sourcebound project/);
  });
});
