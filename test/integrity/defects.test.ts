import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { summariesOfConversationRead } from '../../src/db/queries/summaries.ts';
import { createTestDatabase } from '../support/db.ts';
import { addPairs, compactionJobs, createConversation, drift, pairCount } from '../support/fixtures.ts';
import { spawnSourcebound } from '../support/processes.ts';
import { UsageError } from '../../src/cli/common.ts';
import { projectCliCommand } from '../../src/cli/project-command.ts';
import { projectConversationHistory } from '../../src/projection/index.ts';
import { insertSummary } from '../projection/support.ts';
import { compactOffline, longText, projectAll, shape, summaryVerdicts } from './support.ts';

/**
 * Regression tests of issue 11 (conversation integrity): each would fail on
 * the main branch the issue was filed against.
 */
const db = await createTestDatabase();

async function eligibleRows(conversationId: string): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>(
    'select count(*)::int as n from sourcebound.eligible_pairs where conversation_id = $1',
    [conversationId],
  );
  return rows[0]!.n;
}

describe('1. a message whose id changes', () => {
  it('is a new pair: the index follows, the summary unbinds, the originals are projected and the range is compacted again', async () => {
    const c = await createConversation(db.pool);
    const written = await addPairs(db.pool, c, 50, longText);
    await compactOffline(db.pool, c);
    const [first] = await summariesOfConversationRead(db.pool, c);
    expect(first).toMatchObject({ fromPair: 0, status: 'completed' });
    expect((await summaryVerdicts(db.pool, c)).usable).toEqual([0, 10, 20]);
    await db.pool.query('delete from graphile_worker._private_jobs');

    const {
      rows: [changed],
    } = await db.pool.query<{ id: string }>('update sourcebound.messages set id = gen_random_uuid() where id = $1 returning id', [
      written[3]!.userMessageId,
    ]);
    const newId = changed!.id;

    expect(await drift(db.pool, c)).toEqual([]);
    expect(await pairCount(db.pool, c)).toBe(50);
    expect(await eligibleRows(c)).toBe(50);
    // Case B: a change of identity unbinds the summary; the valid originals are projected.
    const p = await projectAll(db.pool, c);
    expect(p.problems).toEqual([]);
    const after = await summaryVerdicts(db.pool, c);
    expect(after.usable).toEqual([10, 20]);
    expect(after.reasons.get(0)).toBe('binding_changed');
    expect(p.items.find((i) => i.kind === 'pair' && i.pairIndex === 3)).toMatchObject({ userMessageId: newId, userText: longText(3).user });
    // The edit is inside a planned range: it is enqueued, and the next pass summarizes the new source.
    expect(await compactionJobs(db.pool, c)).toBe(1);
    const report = await compactOffline(db.pool, c);
    expect(report.ranges[0]).toMatchObject({ fromPair: 0, result: 'completed' });
    expect(report.ranges[0]!.recordId).not.toBe(first!.id);
    expect((await summaryVerdicts(db.pool, c)).usable).toEqual([0, 10, 20]);
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

/** Resolves once the backend is waiting for a lock (deterministic: no sleep). */
async function waitUntilBlocked(pid: number): Promise<void> {
  for (let i = 0; i < 2000; i++) {
    const { rows } = await db.pool.query<{ waiting: boolean }>(
      `select wait_event_type = 'Lock' as waiting from pg_stat_activity where pid = $1`,
      [pid],
    );
    if (rows[0]?.waiting) return;
    await new Promise((r) => setImmediate(r));
  }
  throw new Error(`backend ${pid} never waited for a lock`);
}

async function order(conversationId: string): Promise<string[]> {
  const { rows } = await db.pool.query<{ run_id: string }>(
    'select run_id from sourcebound.pairs where conversation_id = $1 order by pair_index',
    [conversationId],
  );
  return rows.map((r) => r.run_id);
}

/** Moves a run and its messages to another conversation in one statement, as the foreign key requires. */
async function moveRun(runId: string, to: string, client: Pick<typeof db.pool, 'query'> = db.pool): Promise<void> {
  await client.query(
    `with m as (update sourcebound.messages set conversation_id = $2 where run_id = $1)
     update sourcebound.runs set conversation_id = $2 where id = $1`,
    [runId, to],
  );
}

describe('2. a run that moves to another conversation', () => {
  it('leaves the source and enters the target at its run-order place; both are renumbered, locked and enqueued', async () => {
    const source = await createConversation(db.pool);
    const written = await addPairs(db.pool, source, 50, longText);
    await compactOffline(db.pool, source);
    const target = await createConversation(db.pool);
    const targetPairs = await addPairs(db.pool, target, 5);
    await db.pool.query('delete from graphile_worker._private_jobs');

    await moveRun(written[20]!.runId, target);

    expect(await drift(db.pool, source)).toEqual([]);
    expect(await drift(db.pool, target)).toEqual([]);
    expect(await order(source)).toEqual(written.filter((_, i) => i !== 20).map((w) => w.runId));
    // Its run is older than the target's: it goes first, and the target's pairs shift up.
    expect(await order(target)).toEqual([written[20]!.runId, ...targetPairs.map((w) => w.runId)]);
    expect(await pairCount(db.pool, target)).toBe(6);
    expect(await eligibleRows(target)).toBe(6);
    expect(await pairCount(db.pool, source)).toBe(49);
    // The source lost pair 20: at 49 pairs range 20-29 is no longer plannable (its summary is not
    // used), ranges 0-19 are untouched and still bind, so no job is needed.
    const p = await projectAll(db.pool, source);
    expect(p.problems).toEqual([]);
    const verdicts = await summaryVerdicts(db.pool, source);
    expect(verdicts.usable).toEqual([0, 10]);
    expect(verdicts.reasons.get(20)).toBe('not_plannable');
    expect(await compactionJobs(db.pool, source)).toBe(0);
    // A move out of a planned range unbinds it and enqueues.
    await moveRun(written[3]!.runId, target);
    expect(await compactionJobs(db.pool, source)).toBe(1);
    expect((await summaryVerdicts(db.pool, source)).usable).toEqual([]);
    await moveRun(written[3]!.runId, source);
    const t = await projectAll(db.pool, target);
    expect(t.problems).toEqual([]);
    expect(shape(t).raw).toEqual([0, 1, 2, 3, 4, 5]);
    expect(t.items[0]).toMatchObject({ kind: 'pair', runId: written[20]!.runId, assistantText: longText(20).assistant });

    // And back: it returns to its old place.
    await moveRun(written[20]!.runId, source);
    expect(await order(source)).toEqual(written.map((w) => w.runId));
    expect(await order(target)).toEqual(targetPairs.map((w) => w.runId));
    expect(await drift(db.pool, source)).toEqual([]);
    expect(await drift(db.pool, target)).toEqual([]);
  });

  it('two transactions moving runs in opposite directions between the same conversations both complete, exact', async () => {
    const a = await createConversation(db.pool);
    const b = await createConversation(db.pool);
    const inA = await addPairs(db.pool, a, 12);
    const inB = await addPairs(db.pool, b, 12);
    for (let round = 0; round < 4; round++) {
      const x = new pg.Client({ connectionString: db.url });
      const y = new pg.Client({ connectionString: db.url });
      await Promise.all([x.connect(), y.connect()]);
      try {
        const yPid = (await y.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid;
        await Promise.all([x.query('begin'), y.query('begin')]);
        // Run inA[round] goes to b while run inB[round] goes to a.
        await moveRun(inA[round]!.runId, b, x);
        // y waits for x's locks (the same two conversations, in the same order), then sees its result.
        const yDone = moveRun(inB[round]!.runId, a, y);
        await waitUntilBlocked(yPid);
        await x.query('commit');
        await yDone;
        await y.query('commit');
      } finally {
        await Promise.all([x.end(), y.end()]);
      }
      expect(await drift(db.pool, a)).toEqual([]);
      expect(await drift(db.pool, b)).toEqual([]);
      expect((await pairCount(db.pool, a)) + (await pairCount(db.pool, b))).toBe(24);
    }
  });

  it("a message cannot leave its run's conversation alone (the foreign key refuses)", async () => {
    const c = await createConversation(db.pool);
    const other = await createConversation(db.pool);
    const [p] = await addPairs(db.pool, c, 1);
    // Messages alone cannot leave their run's conversation.
    await expect(
      db.pool.query('update sourcebound.messages set conversation_id = $1 where id = $2', [other, p!.userMessageId]),
    ).rejects.toThrow(/messages_run_same_conversation_fk/);
    expect(await drift(db.pool, c)).toEqual([]);
  });
});

describe('3. reordering runs', () => {
  it('SET seq = DEFAULT moves the pair to the end; the summaries it shifts unbind and the ranges are enqueued', async () => {
    const c = await createConversation(db.pool);
    const written = await addPairs(db.pool, c, 50, longText);
    await compactOffline(db.pool, c);
    await db.pool.query('delete from graphile_worker._private_jobs');

    await db.pool.query('update sourcebound.runs set seq = default where id = $1', [written[5]!.runId]);

    expect(await drift(db.pool, c)).toEqual([]);
    expect(await order(c)).toEqual([...written.filter((_, i) => i !== 5), written[5]!].map((w) => w.runId));
    const p = await projectAll(db.pool, c);
    expect(p.problems).toEqual([]);
    const verdicts = await summaryVerdicts(db.pool, c);
    expect(verdicts.usable).toEqual([]);
    expect([0, 10, 20].map((k) => verdicts.reasons.get(k))).toEqual(['binding_changed', 'binding_changed', 'binding_changed']);
    expect(p.items.at(-1)).toMatchObject({ kind: 'pair', pairIndex: 49, runId: written[5]!.runId });
    expect(await compactionJobs(db.pool, c)).toBe(1);
    const report = await compactOffline(db.pool, c);
    expect(report.ranges.map((r) => r.result)).toEqual(['completed', 'completed', 'completed']);
  });

  it('a bulk reorder of many runs in one statement ends exact', async () => {
    const c = await createConversation(db.pool);
    const written = await addPairs(db.pool, c, 40);
    const moved = written.filter((_, i) => i % 3 === 0);
    await db.pool.query('update sourcebound.runs set seq = default where id = any($1::uuid[])', [moved.map((w) => w.runId)]);
    expect(await drift(db.pool, c)).toEqual([]);
    const { rows } = await db.pool.query<{ id: string }>('select id from sourcebound.runs where conversation_id = $1 order by seq', [c]);
    expect(await order(c)).toEqual(rows.map((r) => r.id));
  });

  it('no other value can be written to seq (the database refuses)', async () => {
    const c = await createConversation(db.pool);
    const [p] = await addPairs(db.pool, c, 1);
    await expect(db.pool.query('update sourcebound.runs set seq = 1 where id = $1', [p!.runId])).rejects.toThrow(
      /can only be updated to DEFAULT/,
    );
  });
});

describe('4. a summary inside the newest 20 again', () => {
  it('is never projected, in either layout, even from a layout made before the pairs left', async () => {
    const c = await createConversation(db.pool);
    const written = await addPairs(db.pool, c, 50, longText);
    await compactOffline(db.pool, c);
    // A budget at which the stable layout shows all three summaries.
    const whole = await projectAll(db.pool, c);
    const at = (budgetBytes: number) =>
      projectConversationHistory({ pool: db.pool, conversationId: c, scope: 'tenant-a', budgetBytes, persistLayout: false });
    let budget = whole.bytes;
    while (shape(await at(budget)).summaries.join() !== '0,10,20' && budget > 1000) budget = Math.floor(budget * 0.95);
    const stable = () => projectConversationHistory({ pool: db.pool, conversationId: c, scope: 'tenant-a', budgetBytes: budget });
    expect(shape(await stable()).summaries).toEqual([0, 10, 20]);
    // The newest 10 runs fail: 40 eligible pairs, so range 20-29 is inside the newest 20.
    await db.pool.query(`update sourcebound.runs set status = 'failed' where id = any($1::uuid[])`, [
      written.slice(40).map((w) => w.runId),
    ]);
    expect(await pairCount(db.pool, c)).toBe(40);
    for (const p of [await stable(), await projectAll(db.pool, c, 'tenant-a', budget)]) {
      expect(p.problems).toEqual([]);
      expect(shape(p).summaries).not.toContain(20);
      expect(shape(p).raw).toContain(39);
    }
    expect((await summaryVerdicts(db.pool, c)).reasons.get(20)).toBe('not_plannable');
  });
});

describe('8. a summary that costs more than its originals', () => {
  it('is never used, and more budget never carries fewer pairs, in the stable layout too', async () => {
    const c = await createConversation(db.pool);
    await addPairs(db.pool, c, 40);
    const raw = await projectAll(db.pool, c);
    await insertSummary(db.pool, { conversationId: c, fromPair: 10, summary: 'A verbose but valid summary. '.repeat(140) });
    let carried = 0;
    for (let budget = 0; budget <= raw.bytes + 300; budget += 211) {
      const p = await projectConversationHistory({ pool: db.pool, conversationId: c, scope: 'tenant-a', budgetBytes: budget });
      expect(shape(p).summaries, `budget ${budget}`).toEqual([]);
      const n = p.pairCount - p.omitted.reduce((m, o) => m + o.toPair - o.fromPair + 1, 0);
      expect(n, `budget ${budget}`).toBeGreaterThanOrEqual(carried);
      carried = n;
    }
    // Budgets within 25% of each other share one layout (an app whose budget moves every turn keeps its
    // cache), so the largest here may carry what a smaller one laid out, never less than the smaller
    // budgets did; a budget more than 25% away from every stored one lays the history out anew: all of it.
    expect(
      (await projectConversationHistory({ pool: db.pool, conversationId: c, scope: 'tenant-a', budgetBytes: 100_000_000 })).bytes,
    ).toBe(raw.bytes);
    const fresh = await createConversation(db.pool);
    await addPairs(db.pool, fresh, 40);
    await insertSummary(db.pool, { conversationId: fresh, fromPair: 10, summary: 'A verbose but valid summary. '.repeat(140) });
    const whole = await projectConversationHistory({
      pool: db.pool,
      conversationId: fresh,
      scope: 'tenant-a',
      budgetBytes: raw.bytes + 300,
    });
    expect(shape(whole).summaries).toEqual([]);
    expect(whole.omitted).toEqual([]);
  });
});

describe('every other change the tables allow keeps the index exact', () => {
  it('a run whose id changes (with its messages, in one statement)', async () => {
    const c = await createConversation(db.pool);
    const written = await addPairs(db.pool, c, 35);
    await db.pool.query('delete from graphile_worker._private_jobs');
    await db.pool.query(
      `with m as (update sourcebound.messages set run_id = '00000000-0000-4000-8000-0000000000aa' where run_id = $1)
       update sourcebound.runs set id = '00000000-0000-4000-8000-0000000000aa' where id = $1`,
      [written[2]!.runId],
    );
    expect(await drift(db.pool, c)).toEqual([]);
    expect((await order(c))[2]).toBe('00000000-0000-4000-8000-0000000000aa');
    expect(await eligibleRows(c)).toBe(35);
    expect(await compactionJobs(db.pool, c)).toBe(1);
  });

  it('status flips between eligible states change nothing; out of eligibility and back restore the pair', async () => {
    const c = await createConversation(db.pool);
    const written = await addPairs(db.pool, c, 31);
    await db.pool.query('delete from graphile_worker._private_jobs');
    await db.pool.query(`update sourcebound.runs set status = 'partial' where id = $1`, [written[4]!.runId]);
    await db.pool.query(`update sourcebound.runs set status = 'clarify_pending' where id = $1`, [written[4]!.runId]);
    expect(await compactionJobs(db.pool, c)).toBe(0);
    await db.pool.query(`update sourcebound.runs set status = 'failed' where id = $1`, [written[4]!.runId]);
    expect(await pairCount(db.pool, c)).toBe(30);
    await db.pool.query(`update sourcebound.messages set status = 'failed' where id = $1`, [written[6]!.assistantMessageId]);
    expect(await pairCount(db.pool, c)).toBe(29);
    await db.pool.query(`update sourcebound.runs set status = 'completed' where id = $1`, [written[4]!.runId]);
    await db.pool.query(`update sourcebound.messages set status = 'completed' where id = $1`, [written[6]!.assistantMessageId]);
    expect(await order(c)).toEqual(written.map((w) => w.runId));
    expect(await drift(db.pool, c)).toEqual([]);
  });

  it('inserting the messages of an already completed run, assistant first, makes the pair', async () => {
    const c = await createConversation(db.pool);
    const {
      rows: [r],
    } = await db.pool.query<{ id: string }>(
      `insert into sourcebound.runs (conversation_id, status) values ($1, 'completed') returning id`,
      [c],
    );
    await db.pool.query(`insert into sourcebound.messages (conversation_id, run_id, role, content) values ($1, $2, 'assistant', 'a')`, [
      c,
      r!.id,
    ]);
    expect(await pairCount(db.pool, c)).toBe(0);
    await db.pool.query(`insert into sourcebound.messages (conversation_id, run_id, role, content) values ($1, $2, 'user', ' \u00a0')`, [
      c,
      r!.id,
    ]);
    expect(await pairCount(db.pool, c)).toBe(0);
    await db.pool.query(`update sourcebound.messages set content = 'q' where run_id = $1 and role = 'user'`, [r!.id]);
    expect(await pairCount(db.pool, c)).toBe(1);
    expect(await drift(db.pool, c)).toEqual([]);
  });
});

describe('10. sourcebound project --budget', () => {
  it("'' prints the usage and exits 2 (it was read as 0)", async () => {
    const cli = spawnSourcebound(['project', '00000000-0000-4000-8000-000000000000', '--scope', 's', '--budget', ''], {
      DATABASE_URL: db.url,
    });
    expect(await cli.exited).toBe(2);
    expect(cli.stderr).toMatch(/--budget must be a whole number of bytes, got ''/);
    expect(cli.stderr).toMatch(/usage: sourcebound project/);
  });

  it.each([[' '], ['1e3'], ['0x10'], ['-1'], ['12abc'], ['1.5']])('%j is a usage error', async (budget) => {
    await expect(projectCliCommand.run(['00000000-0000-4000-8000-000000000000', '--scope', 's', `--budget=${budget}`])).rejects.toThrow(
      UsageError,
    );
  });
});
