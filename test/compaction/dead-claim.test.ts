import { describe, expect, it } from 'vitest';
import { claimRange } from '../../src/conversation/claim.ts';
import { commitOutcome } from '../../src/conversation/commit.ts';
import { attemptsOfConversationRead, compactionSweepRun, summariesOfConversationRead } from '../../src/db/queries/summaries.ts';
import { CONVERSATION_PROMPT_VERSION } from '../../src/gateway/prompts.ts';
import { rangeAt } from '../../src/conversation/plan.ts';
import { compactOffline, offlineContext } from '../integrity/support.ts';
import { createTestDatabase } from '../support/db.ts';
import { addPairs, createConversation } from '../support/fixtures.ts';

/**
 * A worker claims a range and dies mid-call; then a reply of the range is
 * edited. Only a claim of that same source ever took a dead claim over, so
 * the dead claim stayed 'running' for good, its attempt open. The sweep
 * settles it (0032): stale, its attempt unknown and spent. So too, its source
 * unchanged, when pairs are removed and the range is no longer plannable, or
 * when a record of another model completes the range (0035): no claim comes
 * for such a range either. Nor for a record left pending (an invalid or
 * unknown answer, a deferral) in those three cases: the sweep settles it stale
 * once its retry is due (0036).
 */
const db = await createTestDatabase();

/** A claim whose worker is gone; leaseMs 0: its lease is over once its statement is (no clock to wait for). */
async function deadClaim(c: string, workerId: string, leaseMs = 0, model = offlineContext(db.pool).summarizer.model) {
  const claim = await claimRange(db.pool, {
    conversationId: c,
    range: rangeAt(0),
    model,
    promptVersion: CONVERSATION_PROMPT_VERSION,
    workerId,
    leaseMs,
  });
  if (claim.kind !== 'claimed') throw new Error(`claim: ${claim.kind}`);
  return claim;
}

async function editReply(c: string, pairIndex: number, suffix: string) {
  await db.pool.query(
    `update sourcebound.messages set content = content || $3
     where id = (select assistant_message_id from sourcebound.pairs where conversation_id = $1 and pair_index = $2)`,
    [c, pairIndex, suffix],
  );
}

/** Removes the conversation's newest pairs (their messages), so that range 0 lies in the newest 20 again. */
async function removeNewest(c: string, pairs: number) {
  await db.pool.query(
    `delete from sourcebound.messages where id in (
       select unnest(array[user_message_id, assistant_message_id]) from sourcebound.pairs
       where conversation_id = $1 and pair_index >= (select max(pair_index) + 1 from sourcebound.pairs where conversation_id = $1) - $2)`,
    [c, pairs],
  );
}

const shape = async (c: string) => (await summariesOfConversationRead(db.pool, c)).map((r) => [r.status, r.attemptsSpent, r.leaseOwner]);

describe('a dead claim whose source changed', () => {
  it('is settled stale by the sweep, its attempt unknown and spent', async () => {
    const c = await createConversation(db.pool);
    await addPairs(db.pool, c, 30);
    const dead = await deadClaim(c, 'dead-worker');
    await editReply(c, 3, ' (edited)');
    expect((await compactOffline(db.pool, c)).ranges.map((r) => r.result)).toEqual(['completed']);
    // Was: ['running', 0, 'dead-worker'] for good.
    expect(await shape(c)).toEqual([
      ['running', 0, 'dead-worker'],
      ['completed', 1, null],
    ]);

    await compactionSweepRun(db.pool);
    expect(await shape(c)).toEqual([
      ['stale', 1, null],
      ['completed', 1, null],
    ]);
    expect((await summariesOfConversationRead(db.pool, c))[0]!.id).toBe(dead.record.id);
    expect((await attemptsOfConversationRead(db.pool, c)).map((a) => [a.workerId, a.outcome, a.spent])).toEqual([
      ['dead-worker', 'unknown', true],
      ['integrity-test', 'ok', true],
    ]);
  });

  it('counts the dead attempt if the old source comes back: its second claim is its last', async () => {
    const c = await createConversation(db.pool);
    await addPairs(db.pool, c, 30);
    await deadClaim(c, 'dead-worker');
    await editReply(c, 3, ' (edited)');
    await compactionSweepRun(db.pool);
    await db.pool.query(`update sourcebound.messages set content = replace(content, ' (edited)', '') where conversation_id = $1`, [c]);
    // The first source again, with one attempt spent: a second dead claim fails it for good once the source moves again.
    await deadClaim(c, 'second-dead-worker');
    await editReply(c, 4, ' (edited)');
    await compactionSweepRun(db.pool);
    const records = await summariesOfConversationRead(db.pool, c);
    expect(records.map((r) => [r.status, r.attemptsSpent])).toEqual([['failed', 2]]);
    expect(records[0]!.failureReason).toMatch(/two attempts spent/);
  });

  it('leaves alone a dead claim of the current source (the takeover counts it) and a live claim of an old one', async () => {
    const current = await createConversation(db.pool);
    await addPairs(db.pool, current, 30);
    await deadClaim(current, 'dead-worker');
    const old = await createConversation(db.pool);
    await addPairs(db.pool, old, 30);
    await deadClaim(old, 'live-worker', 60_000);
    await editReply(old, 3, ' (edited)');

    await compactionSweepRun(db.pool);
    expect(await shape(current)).toEqual([['running', 0, 'dead-worker']]);
    expect(await shape(old)).toEqual([['running', 0, 'live-worker']]);
    // The takeover of the current source counts the dead attempt, as before.
    expect((await compactOffline(db.pool, current)).ranges.map((r) => r.result)).toEqual(['completed']);
    expect(await shape(current)).toEqual([['completed', 2, null]]);
  });
});

describe('a dead claim no claim will come for, its source unchanged (0035)', () => {
  it('is settled stale by the sweep, and its dead attempt counts once the range is plannable again', async () => {
    const c = await createConversation(db.pool);
    await addPairs(db.pool, c, 30);
    const dead = await deadClaim(c, 'dead-worker');
    await removeNewest(c, 5);
    // No claim can come: the range is not plannable at 25 pairs.
    expect(
      (
        await claimRange(db.pool, {
          conversationId: c,
          range: rangeAt(0),
          model: dead.record.model,
          promptVersion: CONVERSATION_PROMPT_VERSION,
          workerId: 'w',
          leaseMs: 60_000,
        })
      ).kind,
    ).toBe('gone');
    // Was: ['running', 0, 'dead-worker'], after every sweep, for as long as the conversation stayed short.
    await compactionSweepRun(db.pool);
    expect(await shape(c)).toEqual([['stale', 1, null]]);
    const [record] = await summariesOfConversationRead(db.pool, c);
    expect(record!.failureReason).toBe('lease expired, and the range is no longer plannable');
    expect((await attemptsOfConversationRead(db.pool, c)).map((a) => [a.workerId, a.outcome, a.spent])).toEqual([
      ['dead-worker', 'unknown', true],
    ]);

    // The conversation grows back: the same source is claimed again, the dead attempt counted.
    await addPairs(db.pool, c, 5, undefined, { startAt: 25 });
    expect((await compactOffline(db.pool, c)).ranges.map((r) => r.result)).toEqual(['completed']);
    expect(await shape(c)).toEqual([['completed', 2, null]]);
    expect((await summariesOfConversationRead(db.pool, c))[0]!.id).toBe(dead.record.id);
  });

  it('fails the record for good when the dead claim was its second attempt', async () => {
    const c = await createConversation(db.pool);
    await addPairs(db.pool, c, 30);
    await deadClaim(c, 'dead-worker');
    await removeNewest(c, 5);
    await compactionSweepRun(db.pool);
    await addPairs(db.pool, c, 5, undefined, { startAt: 25 });
    await deadClaim(c, 'second-dead-worker');
    await removeNewest(c, 5);
    await compactionSweepRun(db.pool);
    const records = await summariesOfConversationRead(db.pool, c);
    expect(records.map((r) => [r.status, r.attemptsSpent])).toEqual([['failed', 2]]);
    expect(records[0]!.failureReason).toBe('two attempts spent (the last: lease expired, and the range is no longer plannable)');
  });

  it('is settled stale when another model completed the range (its mark is cleared, no job comes)', async () => {
    const c = await createConversation(db.pool);
    await addPairs(db.pool, c, 30);
    const dead = await deadClaim(c, 'dead-worker');
    // A fleet upgraded to another model: it claims and completes the same source under its own identity.
    const other = await claimRange(db.pool, {
      conversationId: c,
      range: rangeAt(0),
      model: 'another-model',
      promptVersion: CONVERSATION_PROMPT_VERSION,
      workerId: 'upgraded',
      leaseMs: 60_000,
    });
    if (other.kind !== 'claimed') throw new Error(`claim: ${other.kind}`);
    const committed = await commitOutcome(
      db.pool,
      { record: other.record, attemptId: other.attemptId, workerId: 'upgraded' },
      { kind: 'ok', text: 'A summary.', model: 'another-model', usage: null, requestId: null },
    );
    expect(committed.kind).toBe('completed');
    expect(
      (await db.pool.query('select count(*)::int as n from sourcebound.compaction_marks where conversation_id = $1', [c])).rows[0].n,
    ).toBe(0);

    // Was: ['running', 0, 'dead-worker'] for good.
    await compactionSweepRun(db.pool);
    const records = await summariesOfConversationRead(db.pool, c);
    expect(records.map((r) => [r.model, r.status, r.attemptsSpent, r.leaseOwner])).toEqual([
      [dead.record.model, 'stale', 1, null],
      ['another-model', 'completed', 1, null],
    ]);
    expect(records[0]!.failureReason).toBe(
      'lease expired, and its range is no longer marked (a record of another model or prompt version binds its source)',
    );
  });

  it('leaves a live claim of a range that is no longer plannable alone (its worker may still commit)', async () => {
    const c = await createConversation(db.pool);
    await addPairs(db.pool, c, 30);
    await deadClaim(c, 'live-worker', 60_000);
    await removeNewest(c, 5);
    await compactionSweepRun(db.pool);
    expect(await shape(c)).toEqual([['running', 0, 'live-worker']]);
  });
});

describe('a pending record no claim will come for (0036)', () => {
  /** A record left pending by an invalid answer (one attempt spent), its retry due after `afterSpentMs`. */
  async function pendingRecord(c: string, afterSpentMs = 0, model?: string) {
    const claim = await deadClaim(c, 'w', 60_000, model);
    const committed = await commitOutcome(
      db.pool,
      { record: claim.record, attemptId: claim.attemptId, workerId: 'w' },
      { kind: 'invalid', reason: 'empty summary', model: claim.record.model, usage: null, requestId: null },
      { deferMs: 0, afterSpentMs },
    );
    expect(committed.kind).toBe('spent');
    return claim.record;
  }

  it('is settled stale by the sweep once its source changed (the new source got a record of its own)', async () => {
    const c = await createConversation(db.pool);
    await addPairs(db.pool, c, 30);
    const pending = await pendingRecord(c);
    await editReply(c, 3, ' (edited)');
    expect((await compactOffline(db.pool, c)).ranges.map((r) => r.result)).toEqual(['completed']);
    // Was: ['pending', 1, null] for good, after every sweep.
    expect(await shape(c)).toEqual([
      ['pending', 1, null],
      ['completed', 1, null],
    ]);

    await compactionSweepRun(db.pool);
    const records = await summariesOfConversationRead(db.pool, c);
    expect(records.map((r) => [r.id, r.status, r.attemptsSpent, r.notBefore])).toEqual([
      [pending.id, 'stale', 1, null],
      [records[1]!.id, 'completed', 1, null],
    ]);
    expect(records[0]!.failureReason).toBe('pending, and the source changed since');
    // Nothing was in flight: no attempt is added or spent.
    expect((await attemptsOfConversationRead(db.pool, c)).map((a) => [a.outcome, a.spent, a.reason])).toEqual([
      ['invalid', true, 'empty summary'],
      ['ok', true, null],
    ]);
    const open = await db.pool.query(
      `select count(*)::int as n from sourcebound.conversation_summaries where conversation_id = $1 and status in ('running', 'pending')`,
      [c],
    );
    expect(open.rows[0].n).toBe(0);
  });

  it('is settled stale when its range is no longer plannable, and taken over with its spent attempt when it is again', async () => {
    const c = await createConversation(db.pool);
    await addPairs(db.pool, c, 30);
    const pending = await pendingRecord(c);
    await removeNewest(c, 5);
    await compactionSweepRun(db.pool);
    expect(await shape(c)).toEqual([['stale', 1, null]]);
    expect((await summariesOfConversationRead(db.pool, c))[0]!.failureReason).toBe('pending, and the range is no longer plannable');

    await addPairs(db.pool, c, 5, undefined, { startAt: 25 });
    expect((await compactOffline(db.pool, c)).ranges.map((r) => r.result)).toEqual(['completed']);
    const [record] = await summariesOfConversationRead(db.pool, c);
    expect([record!.id, record!.status, record!.attemptsSpent]).toEqual([pending.id, 'completed', 2]);
  });

  it('is settled stale when another model completed the range (its mark is cleared, no job comes)', async () => {
    const c = await createConversation(db.pool);
    await addPairs(db.pool, c, 30);
    await pendingRecord(c, 0, 'old-model');
    // The fleet now runs the offline summarizer: it completes the same source under its own identity.
    expect((await compactOffline(db.pool, c)).ranges.map((r) => r.result)).toEqual(['completed']);
    await compactionSweepRun(db.pool);
    const records = await summariesOfConversationRead(db.pool, c);
    expect(records.map((r) => [r.model, r.status])).toEqual([
      ['old-model', 'stale'],
      [records[1]!.model, 'completed'],
    ]);
    expect(records[0]!.failureReason).toBe(
      'pending, and its range is no longer marked (a record of another model or prompt version binds its source)',
    );
  });

  it('is left pending while its retry is still due (a deferral not over), or when its claim will come', async () => {
    const waiting = await createConversation(db.pool);
    await addPairs(db.pool, waiting, 30);
    await pendingRecord(waiting, 60_000);
    await editReply(waiting, 3, ' (edited)');
    const due = await createConversation(db.pool);
    await addPairs(db.pool, due, 30);
    await pendingRecord(due);

    await compactionSweepRun(db.pool);
    expect(await shape(waiting)).toEqual([['pending', 1, null]]);
    expect(await shape(due)).toEqual([['pending', 1, null]]);
    // The claim that comes for the unchanged source takes it over: its second attempt.
    expect((await compactOffline(db.pool, due)).ranges.map((r) => r.result)).toEqual(['completed']);
    expect(await shape(due)).toEqual([['completed', 2, null]]);
  });
});
