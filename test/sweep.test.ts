import { afterAll, describe, expect, it } from 'vitest';
import { compactConversation } from '../src/compaction/compact.ts';
import { compactionSweepRun } from '../src/db/queries/summaries.ts';
import { silentLogger } from '../src/logger.ts';
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

  it('re-enqueues a range whose claim lease expired', async () => {
    const c = await createConversation(db.pool);
    await addPairs(db.pool, c, 30);
    await db.pool.query(`insert into sourcebound.conversation_summaries
      (conversation_id, scope, from_pair, to_pair, source_message_ids, source_hash, hash_version, model, prompt_version, status, lease_owner, lease_expires_at)
      select $1, 'tenant-a', 0, 9, array(select unnest(array[user_message_id, assistant_message_id]) from sourcebound.pairs where conversation_id = $1 and pair_index < 10),
             repeat('0', 64), 1, 'm', 'conversation-compaction@3', 'running', 'dead', now() + interval '1 hour'`, [c]);
    await db.pool.query('delete from graphile_worker._private_jobs');
    await compactionSweepRun(db.pool);
    expect(await compactionJobs(db.pool, c)).toBe(0);
    await db.pool.query(`update sourcebound.conversation_summaries set lease_expires_at = now() - interval '1 second' where conversation_id = $1`, [c]);
    await compactionSweepRun(db.pool);
    expect(await compactionJobs(db.pool, c)).toBe(1);
  });
});
