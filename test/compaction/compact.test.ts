import { describe, expect, it } from 'vitest';
import { compactConversation, SummarizerConfigError } from '../../src/conversation/compact.ts';
import { attemptsOfConversationRead, summariesOfConversationRead } from '../../src/db/queries/summaries.ts';
import { createOfflineSummarizer, OFFLINE_MODEL } from '../../src/gateway/offline.ts';
import { CONVERSATION_PROMPT_VERSION } from '../../src/gateway/prompts.ts';
import { addPairs, createConversation } from '../support/fixtures.ts';
import { gatewayFor } from '../support/gateway.ts';
import { behaviours, type Behaviour } from '../support/messages-server.ts';
import { compactionSetup } from './setup.ts';

const { db, server, ctx } = await compactionSetup();

const canaryText = (i: number) => ({
  user: `USER-CANARY-${i} what about fund ${i}?`,
  assistant: `Fund ${i} had a NAV of ${100 + i}.25 on 2026-10-0${(i % 9) + 1}.`,
});

async function conversationWith(pairs: number) {
  const c = await createConversation(db.pool);
  const written = await addPairs(db.pool, c, pairs, canaryText);
  return { c, written };
}

function sentText(): string {
  return JSON.stringify(server.requests.map((r) => r.body));
}

describe('compact_conversation', () => {
  it('30 pairs -> one completed record for 0-9, made from assistant replies only', async () => {
    const { c, written } = await conversationWith(30);
    const report = await compactConversation(ctx(), c);
    expect(report.ranges).toEqual([{ fromPair: 0, toPair: 9, result: 'completed', recordId: expect.any(String) }]);
    const [record, ...others] = await summariesOfConversationRead(db.pool, c);
    expect(others).toEqual([]);
    expect(record).toMatchObject({
      status: 'completed',
      fromPair: 0,
      toPair: 9,
      model: 'anthropic/claude-test',
      promptVersion: 'conversation-compaction@5',
      attemptsSpent: 1,
      hashVersion: 1,
    });
    expect(record!.sourceMessageIds).toEqual(written.slice(0, 10).flatMap((w) => [w.userMessageId, w.assistantMessageId]));
    expect(record!.summary).toMatch(/Summary of 10 items/);
    // The model saw every assistant reply of the range, named by its pair number, and no user text at all.
    expect(server.count).toBe(1);
    const sent = sentText();
    expect(sent).not.toMatch(/USER-CANARY/);
    for (let i = 0; i < 10; i++) expect(sent).toContain(`<reply pair=\\"${i}\\">\\n${canaryText(i).assistant}\\n</reply>`);
    expect(sent).not.toContain(canaryText(10).assistant);
    // No message id reaches the provider: none means anything to a reader of the summary.
    for (const w of written) expect(sent).not.toContain(w.assistantMessageId);
  });

  it('the same conversation gives the same material and summary bytes whatever its message ids (the offline summarizer)', async () => {
    const offline = ctx({ summarizer: createOfflineSummarizer({ maxChars: 6000 }) });
    const summaries: string[] = [];
    for (let copy = 0; copy < 2; copy++) {
      const { c } = await conversationWith(40);
      await compactConversation(offline, c);
      const records = await summariesOfConversationRead(db.pool, c);
      expect(records.map((r) => [r.fromPair, r.status, r.model, r.promptVersion])).toEqual([
        [0, 'completed', OFFLINE_MODEL, CONVERSATION_PROMPT_VERSION],
        [10, 'completed', OFFLINE_MODEL, CONVERSATION_PROMPT_VERSION],
      ]);
      summaries.push(records.map((r) => r.summary).join('\n---\n'));
    }
    expect(summaries[1]).toBe(summaries[0]);
    // Each reply is tagged with the pair number the projection's label shows for it.
    expect(summaries[0]).toMatch(/^\[pair 0\] Fund 0 had a NAV of 100\.25 on 2026-10-01\.$/m);
    expect(summaries[0]).toMatch(/^\[pair 19\] Fund 19 had a NAV of 119\.25 on 2026-10-02\.$/m);
  });

  it('40 pairs -> 10-19 too; 39 -> only 0-9', async () => {
    const forty = await conversationWith(40);
    await compactConversation(ctx(), forty.c);
    expect((await summariesOfConversationRead(db.pool, forty.c)).map((r) => [r.fromPair, r.status])).toEqual([
      [0, 'completed'],
      [10, 'completed'],
    ]);
    const thirtyNine = await conversationWith(39);
    await compactConversation(ctx(), thirtyNine.c);
    expect((await summariesOfConversationRead(db.pool, thirtyNine.c)).map((r) => [r.fromPair, r.status])).toEqual([[0, 'completed']]);
  });

  it('a completed record makes every later pass a no-op with no model call', async () => {
    const { c } = await conversationWith(30);
    await compactConversation(ctx(), c);
    server.reset();
    const again = await compactConversation(ctx(), c);
    // Nothing is marked: the job does not even claim the completed range again.
    expect(again.ranges).toEqual([]);
    expect(server.count).toBe(0);
  });

  it('fewer than 30 pairs: nothing planned, no call', async () => {
    const { c } = await conversationWith(29);
    expect((await compactConversation(ctx(), c)).ranges).toEqual([]);
    expect(server.count).toBe(0);
  });

  const invalid: [string, () => Behaviour, RegExp][] = [
    ['text + tool_use', behaviours.toolUse, /tool_use/],
    ['max_tokens', behaviours.maxTokens, /max_tokens/],
    ['refusal', behaviours.refusal, /refusal/],
    ['pause_turn', behaviours.pauseTurn, /pause_turn/],
    ['stop_sequence', behaviours.stopSequence, /stop_sequence/],
    ['context window exceeded', behaviours.contextWindowExceeded, /model_context_window_exceeded/],
    ['empty text', behaviours.emptyText, /empty/],
    ['whitespace text', behaviours.whitespaceText, /empty/],
    ['6,001 characters', () => behaviours.longText(6001), /too_long/],
    ['a thinking block', behaviours.thinking, /thinking/],
  ];

  it.each(invalid)('%s -> no completed record, an attempt spent with its reason', async (_name, make, reason) => {
    const { c } = await conversationWith(30);
    server.enqueue(make());
    const report = await compactConversation(ctx(), c);
    expect(report.ranges[0]!.result).toBe('attempt_spent');
    const [record] = await summariesOfConversationRead(db.pool, c);
    expect(record).toMatchObject({ status: 'pending', attemptsSpent: 1, summary: null });
    const attempts = await attemptsOfConversationRead(db.pool, c);
    expect(attempts).toHaveLength(1);
    expect(attempts[0]).toMatchObject({ outcome: 'invalid', spent: true });
    expect(attempts[0]!.reason).toMatch(reason);
  });

  it('two invalid answers settle the identity as failed: no third call', async () => {
    const { c } = await conversationWith(30);
    server.enqueue(behaviours.toolUse(), behaviours.maxTokens());
    await compactConversation(ctx(), c);
    await compactConversation(ctx(), c);
    const [record] = await summariesOfConversationRead(db.pool, c);
    expect(record).toMatchObject({ status: 'failed', attemptsSpent: 2 });
    const third = await compactConversation(ctx(), c);
    expect(third.ranges[0]!.result).toBe('failed');
    expect(server.count).toBe(2);
    expect((await attemptsOfConversationRead(db.pool, c)).map((a) => [a.outcome, a.spent])).toEqual([
      ['invalid', true],
      ['invalid', true],
    ]);
  });

  it('529 then success -> completed with one spent attempt; the 529 spends none and reschedules the job', async () => {
    const { c } = await conversationWith(30);
    server.enqueue(behaviours.overloaded());
    const first = await compactConversation(ctx(), c);
    expect(first.ranges[0]!.result).toBe('deferred');
    const { rows: jobs } = await db.pool.query(`select run_at from graphile_worker._private_jobs where key = $1`, [
      `sourcebound:compact:${c}`,
    ]);
    expect(jobs).toHaveLength(1);
    await compactConversation(ctx(), c);
    const [record] = await summariesOfConversationRead(db.pool, c);
    expect(record).toMatchObject({ status: 'completed', attemptsSpent: 1 });
    expect((await attemptsOfConversationRead(db.pool, c)).map((a) => [a.outcome, a.spent])).toEqual([
      ['deferred', false],
      ['ok', true],
    ]);
  });

  it('429 with retry-after defers until then without spending an attempt', async () => {
    const { c } = await conversationWith(30);
    server.enqueue(behaviours.rateLimited(120));
    await compactConversation(ctx(), c);
    const [record] = await summariesOfConversationRead(db.pool, c);
    expect(record!.attemptsSpent).toBe(0);
    const waitMs = record!.notBefore!.getTime() - Date.now();
    expect(waitMs).toBeGreaterThan(100_000);
    // Asked again before then: still deferred, no call.
    server.reset();
    const again = await compactConversation(ctx(), c);
    expect(again.ranges[0]!.result).toBe('deferred');
    expect(server.count).toBe(0);
  });

  it('401 -> no attempt spent, the job fails loudly', async () => {
    const { c } = await conversationWith(30);
    server.enqueue(behaviours.httpError(401, 'authentication_error'));
    await expect(compactConversation(ctx(), c)).rejects.toThrow(SummarizerConfigError);
    const [record] = await summariesOfConversationRead(db.pool, c);
    expect(record).toMatchObject({ status: 'pending', attemptsSpent: 0 });
    expect((await attemptsOfConversationRead(db.pool, c)).map((a) => [a.outcome, a.spent])).toEqual([['config', false]]);
  });

  it('an unknown outcome (connection reset after the request was read) spends an attempt', async () => {
    const { c } = await conversationWith(30);
    server.enqueue(behaviours.reset());
    await compactConversation(ctx(), c);
    expect((await attemptsOfConversationRead(db.pool, c)).map((a) => [a.outcome, a.spent])).toEqual([['unknown', true]]);
    await compactConversation(ctx(), c);
    expect((await summariesOfConversationRead(db.pool, c))[0]).toMatchObject({ status: 'completed', attemptsSpent: 2 });
  });

  it('a message edited while its range is being summarized -> recorded stale, never completed', async () => {
    const { c, written } = await conversationWith(30);
    server.enqueue(behaviours.delayed(400, behaviours.text('A fine summary of the old text.')));
    const running = compactConversation(ctx(), c);
    await server.waitFor(() => server.inFlight === 1);
    await db.pool.query(`update sourcebound.messages set content = 'edited while in flight' where id = $1`, [
      written[4]!.assistantMessageId,
    ]);
    const report = await running;
    // The edit moved the range's mark: the same job's next pass summarizes the new source under a new identity.
    expect(report.ranges.map((r) => r.result)).toEqual(['stale', 'completed']);
    const after = await summariesOfConversationRead(db.pool, c);
    expect(after.map((r) => r.status).sort()).toEqual(['completed', 'stale']);
    const stale = after.find((r) => r.status === 'stale')!;
    expect(stale.attemptsSpent).toBe(1);
    expect(after.find((r) => r.status === 'completed')!.sourceHash).not.toBe(stale.sourceHash);
  });

  it('a stale commit spends the attempt: a source flipping back and forth reaches the model at most twice per identity', async () => {
    const { c, written } = await conversationWith(30);
    const target = written[4]!.assistantMessageId;
    const original = canaryText(4).assistant;
    for (let round = 0; round < 5; round++) {
      if (round < 2) {
        server.enqueue(behaviours.delayed(300, behaviours.text('A fine summary of the old text.')));
        const running = compactConversation(ctx(), c);
        await server.waitFor(() => server.inFlight === 1);
        await db.pool.query(`update sourcebound.messages set content = 'edited while in flight' where id = $1`, [target]);
        expect((await running).ranges[0]!.result).toBe('stale');
        await db.pool.query(`update sourcebound.messages set content = $2 where id = $1`, [target, original]);
      } else {
        // Edited and reverted again: two dispatches spent, the identity is failed for good, no third call.
        await db.pool.query(`update sourcebound.messages set content = 'edited again' where id = $1`, [target]);
        await db.pool.query(`update sourcebound.messages set content = $2 where id = $1`, [target, original]);
        expect((await compactConversation(ctx(), c)).ranges[0]!.result).toBe('failed');
      }
    }
    const records = await summariesOfConversationRead(db.pool, c);
    const first = records.find((r) => r.createdAt.getTime() === Math.min(...records.map((x) => x.createdAt.getTime())))!;
    expect(first).toMatchObject({ status: 'failed', attemptsSpent: 2 });
    const attempts = (await attemptsOfConversationRead(db.pool, c)).filter((a) => a.summaryId === first.id);
    expect(attempts.map((a) => [a.outcome, a.spent])).toEqual([
      ['stale', true],
      ['stale', true],
    ]);
    // Two calls for the original source, one for the edited one (completed in round 0, reused after).
    expect(server.count).toBe(3);
    // The database agrees: no identity has more dispatches than its two attempts.
    const { rows } = await db.pool.query(
      `select s.id from sourcebound.conversation_summaries s join sourcebound.conversation_summary_attempts a on a.summary_id = s.id
       where s.conversation_id = $1 and a.outcome not in ('deferred', 'config') group by s.id having count(*) > 2`,
      [c],
    );
    expect(rows).toEqual([]);
  });

  it('a range held by a live worker does not hold the conversation back: the holder carries on with ranges that became plannable', async () => {
    const { c } = await conversationWith(30);
    server.enqueue(behaviours.hold());
    const holder = compactConversation(ctx(), c);
    await server.waitFor(() => server.held === 1);
    // A second job (a crossing while the first runs) finds range 0 held.
    const second = await compactConversation(ctx(), c);
    expect(second.ranges.map((r) => r.result)).toEqual(['busy']);
    expect(second.rescheduleAt).toBeNull();
    // More pairs arrive while the holder is still in its call: the crossing's job runs now, not at the lease's end.
    await addPairs(db.pool, c, 10, canaryText, { startAt: 30 });
    const { rows } = await db.pool.query(
      `select run_at <= now() + interval '1 second' as soon from graphile_worker._private_jobs where key = $1`,
      [`sourcebound:compact:${c}`],
    );
    expect(rows).toEqual([{ soon: true }]);
    server.releaseHeld();
    const report = await holder;
    expect(report.ranges.map((r) => `${r.fromPair}:${r.result}`)).toEqual(['0:completed', '10:completed']);
  });

  it('a claim whose worker died is taken over after its lease; the dead attempt counts as unknown', async () => {
    const { c } = await conversationWith(30);
    // A worker claims the range and dies mid-call: the claim is never settled.
    server.enqueue(behaviours.hang());
    const abort = new AbortController();
    const dying = compactConversation(
      ctx({ workerId: 'dead-worker', summarizer: gatewayFor(server, { timeoutMs: 60_000 }) }),
      c,
      abort.signal,
    );
    await server.waitFor(() => server.inFlight === 1);
    const busy = await compactConversation(ctx(), c);
    expect(busy.ranges[0]!.result).toBe('busy');
    // A live holder is no reason to hold the conversation back; only a watch on the lease, in case it died.
    expect(busy.rescheduleAt).toBeNull();
    expect(busy.leaseWatchAt).not.toBeNull();
    // The lease runs out (moved into the past instead of waiting for it).
    await db.pool.query(
      `update sourcebound.conversation_summaries set lease_expires_at = now() - interval '1 second' where conversation_id = $1`,
      [c],
    );
    const taken = await compactConversation(ctx(), c);
    expect(taken.ranges[0]!.result).toBe('completed');
    const [record] = await summariesOfConversationRead(db.pool, c);
    expect(record).toMatchObject({ status: 'completed', attemptsSpent: 2 });
    expect((await attemptsOfConversationRead(db.pool, c)).map((a) => [a.workerId, a.outcome, a.spent])).toEqual([
      ['dead-worker', 'unknown', true],
      ['test-worker', 'ok', true],
    ]);
    // The "dead" worker comes back with an answer after all: it is dropped, its lease is gone.
    abort.abort();
    const late = await dying;
    expect(late.ranges[0]!.result).toBe('lease_lost');
    expect((await summariesOfConversationRead(db.pool, c))[0]).toMatchObject({ status: 'completed', attemptsSpent: 2 });
  });

  it('nothing in compaction writes to messages or runs', async () => {
    const { c } = await conversationWith(45);
    const snapshot = async () =>
      (
        await db.pool.query(
          `select (select md5(string_agg(m::text, ',' order by m.id)) from sourcebound.messages m where m.conversation_id = $1) as m,
              (select md5(string_agg(r::text, ',' order by r.id)) from sourcebound.runs r where r.conversation_id = $1) as r`,
          [c],
        )
      ).rows[0];
    const before = await snapshot();
    server.enqueue(behaviours.toolUse());
    await compactConversation(ctx(), c);
    await compactConversation(ctx(), c);
    expect(await snapshot()).toEqual(before);
  });
});

describe('summary records in the database', () => {
  it('UPDATE or DELETE of a completed record fails; deleting the conversation removes its records', async () => {
    const { c } = await conversationWith(30);
    await compactConversation(ctx(), c);
    const [record] = await summariesOfConversationRead(db.pool, c);
    await expect(
      db.pool.query(`update sourcebound.conversation_summaries set summary = 'rewritten' where id = $1`, [record!.id]),
    ).rejects.toThrow(/immutable/);
    await expect(
      db.pool.query(`update sourcebound.conversation_summaries set status = 'pending' where id = $1`, [record!.id]),
    ).rejects.toThrow(/immutable/);
    await expect(db.pool.query(`delete from sourcebound.conversation_summaries where id = $1`, [record!.id])).rejects.toThrow(
      /cannot be deleted/,
    );
    await expect(
      db.pool.query(`update sourcebound.conversation_summary_attempts set reason = 'x' where summary_id = $1`, [record!.id]),
    ).rejects.toThrow(/immutable/);
    await expect(
      db.pool.query(`delete from sourcebound.conversation_summary_attempts where summary_id = $1`, [record!.id]),
    ).rejects.toThrow(/cannot be deleted/);
    await db.pool.query('delete from sourcebound.conversations where id = $1', [c]);
    expect(await summariesOfConversationRead(db.pool, c)).toEqual([]);
    const { rows } = await db.pool.query('select count(*)::int as n from sourcebound.conversation_summary_attempts where summary_id = $1', [
      record!.id,
    ]);
    expect(rows[0].n).toBe(0);
  });

  it("the guards refuse the same writes when the statement sets updated_at = now() itself (0027 WHEN clauses), and keep updated_at the database's", async () => {
    const { c } = await conversationWith(30);
    await compactConversation(ctx(), c);
    const [record] = await summariesOfConversationRead(db.pool, c);
    // Setting updated_at = now() skips the guard only for a write it would let through.
    await expect(
      db.pool.query(`update sourcebound.conversation_summaries set updated_at = now(), summary = 'rewritten' where id = $1`, [record!.id]),
    ).rejects.toThrow(/immutable/);
    await expect(
      db.pool.query(`update sourcebound.conversation_summary_attempts set reason = 'x' where summary_id = $1`, [record!.id]),
    ).rejects.toThrow(/immutable/);
    const { c: open } = await conversationWith(30);
    server.enqueue(behaviours.refusal());
    await compactConversation(ctx(), open);
    const [pending] = await summariesOfConversationRead(db.pool, open);
    expect(pending!.status).toBe('pending');
    for (const change of [
      `updated_at = now(), source_hash = repeat('b', 64)`,
      `updated_at = now(), scope = 'tenant-b'`,
      `updated_at = now(), model = 'other'`,
      `updated_at = now(), from_pair = 10, to_pair = 19`,
    ]) {
      await expect(
        db.pool.query(`update sourcebound.conversation_summaries set ${change} where id = $1`, [pending!.id]),
        change,
      ).rejects.toThrow(/identity|violates/);
    }
    await expect(
      db.pool.query(`update sourcebound.conversation_summaries set updated_at = now(), attempts_spent = 0 where id = $1`, [pending!.id]),
    ).rejects.toThrow(/cannot decrease/);
    // A writer that sets another updated_at (or none) still gets the transaction's now().
    const {
      rows: [t],
    } = await db.pool.query<{ same: boolean }>(
      `with u as (update sourcebound.conversation_summaries set updated_at = '2000-01-01', failure_reason = 'x' where id = $1 returning updated_at)
       select (select updated_at from u) = now() as same`,
      [pending!.id],
    );
    expect(t!.same).toBe(true);
    const {
      rows: [attempt],
    } = await db.pool.query<{ id: string }>(`select id from sourcebound.conversation_summary_attempts where summary_id = $1`, [
      pending!.id,
    ]);
    await expect(
      db.pool.query(`update sourcebound.conversation_summary_attempts set worker_id = 'other' where id = $1`, [attempt!.id]),
    ).rejects.toThrow(/immutable|identity/);
  });

  it('a failed record is final in the database too', async () => {
    const { c } = await conversationWith(30);
    server.enqueue(behaviours.refusal(), behaviours.refusal());
    await compactConversation(ctx(), c);
    await compactConversation(ctx(), c);
    const [record] = await summariesOfConversationRead(db.pool, c);
    expect(record!.status).toBe('failed');
    await expect(
      db.pool.query(
        `update sourcebound.conversation_summaries set status = 'running', lease_owner = 'x', lease_expires_at = now() where id = $1`,
        [record!.id],
      ),
    ).rejects.toThrow(/immutable/);
  });

  it('the database refuses a third spent attempt, a misaligned range and a wrong number of source ids', async () => {
    const { c } = await conversationWith(30);
    server.enqueue(behaviours.refusal());
    await compactConversation(ctx(), c);
    const [record] = await summariesOfConversationRead(db.pool, c);
    await expect(
      db.pool.query(`update sourcebound.conversation_summaries set attempts_spent = 3 where id = $1`, [record!.id]),
    ).rejects.toThrow(/attempts_bounded/);
    await expect(
      db.pool.query(`update sourcebound.conversation_summaries set attempts_spent = 0 where id = $1`, [record!.id]),
    ).rejects.toThrow(/cannot decrease/);
    const insert = (from: number, to: number, ids: number) =>
      db.pool.query(
        `insert into sourcebound.conversation_summaries (conversation_id, scope, from_pair, to_pair, source_message_ids, source_hash, hash_version, model, prompt_version, status)
       values ($1, 'tenant-a', $2, $3, array(select gen_random_uuid() from generate_series(1, $4)), repeat('a', 64), 1, 'm', 'conversation-compaction@3', 'pending')`,
        [c, from, to, ids],
      );
    await expect(insert(5, 14, 20)).rejects.toThrow(/range_aligned/);
    await expect(insert(10, 20, 20)).rejects.toThrow(/range_aligned/);
    await expect(insert(10, 19, 19)).rejects.toThrow(/twenty_sources/);
    // And a record can never claim a scope its conversation is not in.
    await expect(
      db.pool.query(
        `insert into sourcebound.conversation_summaries (conversation_id, scope, from_pair, to_pair, source_message_ids, source_hash, hash_version, model, prompt_version, status)
       values ($1, 'tenant-b', 10, 19, array(select gen_random_uuid() from generate_series(1, 20)), repeat('a', 64), 1, 'm', 'v', 'pending')`,
        [c],
      ),
    ).rejects.toThrow(/conversation_summaries_conversation_fk/);
  });
});
