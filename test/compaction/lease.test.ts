import { describe, expect, it } from 'vitest';
import pg from 'pg';
import { claimRange } from '../../src/conversation/claim.ts';
import { compactConversation } from '../../src/conversation/compact.ts';
import { rangeAt } from '../../src/conversation/plan.ts';
import { attemptsOfConversationRead, summariesOfConversationRead } from '../../src/db/queries/summaries.ts';
import { workerBeat, workerLeave } from '../../src/db/queries/recovery.ts';
import { CONVERSATION_PROMPT_VERSION } from '../../src/gateway/prompts.ts';
import { addPairs, createConversation } from '../support/fixtures.ts';
import { behaviours } from '../support/messages-server.ts';
import { compactionSetup } from './setup.ts';

/**
 * A claim's lease is renewed while its call runs, so a short lease does not
 * cut a long call; a claim lost meanwhile abandons the call. A worker that
 * stops beating is reaped by a live one: its graphile-worker jobs unlocked,
 * its claims' leases ended, its conversations given a job that runs now.
 */
const { db, server, ctx } = await compactionSetup();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const model = () => ctx().summarizer.model;

/** A pool whose sessions act as the worker role: what a deployment's worker may do, not the owner. */
function workerRolePool(): pg.Pool {
  const pool = new pg.Pool({ connectionString: db.url, max: 2, options: '-c role=sourcebound_worker' });
  pool.on('error', () => {});
  return pool;
}

/** Another worker's claim of range 0, as a second job would make it. */
const otherClaim = (c: string) =>
  claimRange(db.pool, {
    conversationId: c,
    range: rangeAt(0),
    model: model(),
    promptVersion: CONVERSATION_PROMPT_VERSION,
    workerId: 'other',
    leaseMs: 60_000,
  });

/** A conversation with one plannable range whose summarizer call the server holds until released. */
async function heldCallConversation(): Promise<string> {
  const c = await createConversation(db.pool);
  await addPairs(db.pool, c, 30);
  server.enqueue(behaviours.hold());
  return c;
}

describe("a claim's lease while the call runs", () => {
  it('is renewed: a call four leases long is never taken over and completes with one attempt', async () => {
    const c = await heldCallConversation();
    const job = compactConversation(ctx({ leaseMs: 400, leaseRenewMs: 100 }), c);
    await server.waitFor(() => server.held === 1);
    await sleep(1600);
    // Another worker finds it busy, with a lease still ahead.
    const other = await otherClaim(c);
    expect(other.kind).toBe('busy');
    server.releaseHeld();
    expect((await job).ranges.map((r) => r.result)).toEqual(['completed']);
    const attempts = await attemptsOfConversationRead(db.pool, c);
    expect(attempts.map((a) => [a.workerId, a.outcome])).toEqual([['test-worker', 'ok']]);
    expect(server.count).toBe(1);
  });

  it('without renewal the same call is taken over (the lease runs out under it)', async () => {
    const c = await heldCallConversation();
    const job = compactConversation(ctx({ leaseMs: 400, leaseRenewMs: 0 }), c);
    await server.waitFor(() => server.held === 1);
    await sleep(600);
    const other = await otherClaim(c);
    expect(other.kind).toBe('claimed');
    server.releaseHeld();
    expect((await job).ranges.map((r) => r.result)).toEqual(['lease_lost']);
  });

  it('lost during the call (taken over): the renewal finds it, the call is abandoned and its answer never commits', async () => {
    const c = await heldCallConversation();
    const job = compactConversation(ctx({ leaseMs: 60_000, leaseRenewMs: 100 }), c);
    await server.waitFor(() => server.held === 1);
    // The lease ends under it (a partition, a reaper) and another worker takes the range over.
    await db.pool.query(`update sourcebound.conversation_summaries set lease_expires_at = now() where conversation_id = $1`, [c]);
    const other = await otherClaim(c);
    expect(other.kind).toBe('claimed');
    // The held request is never released: only the abandonment ends the job.
    expect((await job).ranges.map((r) => r.result)).toEqual(['lease_lost']);
    const [record] = await summariesOfConversationRead(db.pool, c);
    expect(record).toMatchObject({ status: 'running', leaseOwner: 'other' });
    server.releaseHeld();
  });
});

describe('a worker that stops beating', () => {
  it('is reaped by a live worker, as the worker role: its jobs unlocked, its claims released, once', async () => {
    const worker = workerRolePool();
    try {
      const c = await createConversation(db.pool);
      await addPairs(db.pool, c, 30);
      // The dead worker: a runner after one recovery (lease owner <id>/r1), a job locked by its graphile id.
      const claim = await claimRange(db.pool, {
        conversationId: c,
        range: rangeAt(0),
        model: model(),
        promptVersion: CONVERSATION_PROMPT_VERSION,
        workerId: 'dead-host:1:ab/r1',
        leaseMs: 300_000,
      });
      expect(claim.kind).toBe('claimed');
      await db.pool.query(
        `select graphile_worker.add_job('compact_conversation', json_build_object('conversationId', $1::text), job_key := 'lease-test:' || $1)`,
        [c],
      );
      await db.pool.query(
        `update graphile_worker._private_jobs set locked_by = 'pool-dead', locked_at = now() where key = 'lease-test:' || $1`,
        [c],
      );
      expect(await workerBeat(worker, 'dead-host:1:ab', ['pool-dead'], 20_000)).toEqual([]);

      // Not yet silent long enough: nothing happens.
      expect(await workerBeat(worker, 'live-host:2:cd', ['pool-live'], 20_000)).toEqual([]);
      await db.pool.query(`update sourcebound.workers set beat_at = now() - interval '21 seconds' where worker_id = 'dead-host:1:ab'`);
      const reaped = await workerBeat(worker, 'live-host:2:cd', ['pool-live'], 20_000);
      expect(reaped).toHaveLength(1);
      expect(reaped[0]).toMatchObject({ workerId: 'dead-host:1:ab', jobsUnlocked: 1, claimsReleased: 1 });
      expect(reaped[0]!.silentMs).toBeGreaterThanOrEqual(21_000);

      const {
        rows: [job],
      } = await db.pool.query(`select locked_by from graphile_worker._private_jobs where key = 'lease-test:' || $1`, [c]);
      expect(job).toEqual({ locked_by: null });
      const {
        rows: [lease],
      } = await db.pool.query<{ over: boolean }>(
        `select lease_expires_at <= now() as over from sourcebound.conversation_summaries where conversation_id = $1`,
        [c],
      );
      expect(lease!.over).toBe(true);
      const { rows: resume } = await db.pool.query(
        `select 1 from graphile_worker._private_jobs where key = 'sourcebound:compact-resume:' || $1`,
        [c],
      );
      expect(resume).toHaveLength(1);
      // Reaped once: the row is gone, the next beat reaps nothing.
      expect(await workerBeat(worker, 'live-host:2:cd', ['pool-live'], 20_000)).toEqual([]);
      const { rows: left } = await db.pool.query(`select worker_id from sourcebound.workers order by worker_id`);
      expect(left).toEqual([{ worker_id: 'live-host:2:cd' }]);

      // The next claim takes the range over at once and settles the dead attempt.
      const takeover = await claimRange(db.pool, {
        conversationId: c,
        range: rangeAt(0),
        model: model(),
        promptVersion: CONVERSATION_PROMPT_VERSION,
        workerId: 'live-host:2:cd',
        leaseMs: 30_000,
      });
      expect(takeover.kind).toBe('claimed');
      const attempts = await attemptsOfConversationRead(db.pool, c);
      expect(attempts.map((a) => [a.workerId, a.outcome])).toEqual([
        ['dead-host:1:ab/r1', 'unknown'],
        ['live-host:2:cd', null],
      ]);

      // A stopping worker leaves the registry, handing back what it still holds.
      expect(await workerLeave(worker, 'live-host:2:cd')).toEqual({ jobsUnlocked: 0, claimsReleased: 1 });
      expect((await db.pool.query(`select 1 from sourcebound.workers`)).rows).toEqual([]);
    } finally {
      await worker.end();
    }
  });

  it('an app role cannot beat, reap or renew', async () => {
    const client = await db.pool.connect();
    try {
      await client.query('begin');
      await client.query('set local role sourcebound_app');
      await expect(client.query(`select * from sourcebound.worker_beat('x', '{}', 0)`)).rejects.toMatchObject({ code: '42501' });
      await client.query('rollback');
      await client.query('begin');
      await client.query('set local role sourcebound_app');
      await expect(client.query(`select sourcebound.claim_renew(gen_random_uuid(), 1, 'x', 1000)`)).rejects.toMatchObject({
        code: '42501',
      });
    } finally {
      await client.query('rollback');
      client.release();
    }
  });
});
