import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { compactConversation, type CompactionContext } from '../../src/conversation/compact.ts';
import { claimNextRange } from '../../src/conversation/claim.ts';
import { commitRetrying } from '../../src/conversation/commit-retry.ts';
import { DEFAULT_RETRY_DELAYS } from '../../src/conversation/commit.ts';
import { compactionSweepRun, summaryAttemptRead } from '../../src/db/queries/summaries.ts';
import { createOfflineSummarizer } from '../../src/gateway/index.ts';
import { silentLogger } from '../../src/support/logger.ts';
import { createTestDatabase } from '../support/db.ts';
import { addPairs, createConversation } from '../support/fixtures.ts';

/**
 * Cost guards (issue 14): a compaction job and the sweep cost what needs
 * work, not the length of history. Measured in statements sent and in rows
 * the database read (pg_stat_xact_user_tables, the transaction's own
 * counters, so nothing else running on the server counts), never in time.
 * Each measured call runs inside one transaction on one client for that
 * reason; the functions it calls are the same ones a worker runs.
 */
const db = await createTestDatabase();
const summarizer = createOfflineSummarizer({ maxChars: 6000 });

interface Cost {
  statements: number;
  /** Heap rows read in sourcebound's tables: sequential plus index fetches. */
  rowsRead: number;
}

/** Runs `fn` on one client inside a transaction and returns what it cost; rolls back nothing (commits). */
async function measured(fn: (db: pg.ClientBase) => Promise<void>): Promise<Cost> {
  const client = await db.pool.connect();
  let statements = 0;
  const counting = new Proxy(client, {
    get(target, prop, receiver) {
      if (prop === 'query')
        return (...args: unknown[]) => {
          statements++;
          return (target.query as (...a: unknown[]) => unknown)(...args);
        };
      return Reflect.get(target, prop, receiver);
    },
  });
  // The view also shows counts of this backend's earlier transactions not yet
  // flushed, and nothing is flushed inside a transaction: take the difference.
  const read = async () =>
    Number(
      (
        await client.query<{ n: string }>(
          `select coalesce(sum(seq_tup_read + coalesce(idx_tup_fetch, 0)), 0) as n from pg_stat_xact_user_tables where schemaname = 'sourcebound'`,
        )
      ).rows[0]!.n,
    );

  try {
    await client.query('begin');
    const before = await read();
    await fn(counting);
    const rowsRead = (await read()) - before;
    await client.query('commit');
    return { statements, rowsRead };
  } finally {
    client.release();
  }
}

const ctxOn = (client: pg.ClientBase): CompactionContext => ({
  pool: client as unknown as pg.Pool,
  summarizer,
  logger: silentLogger,
  workerId: 'cost',
  leaseMs: 60_000,
});

/** A conversation of `pairs` pairs whose every plannable range is compacted. */
async function compacted(pairs: number): Promise<string> {
  const c = await createConversation(db.pool);
  await addPairs(db.pool, c, pairs);
  await compactConversation({ pool: db.pool, summarizer, logger: silentLogger, workerId: 'setup', leaseMs: 60_000 }, c);
  await db.pool.query('analyze sourcebound.pairs, sourcebound.messages, sourcebound.conversation_summaries, sourcebound.compaction_marks');
  return c;
}

/** The job's cost after 10 more pairs: one new range. */
async function jobAfterTenMore(c: string, pairs: number): Promise<Cost> {
  await addPairs(db.pool, c, 10, undefined, { startAt: pairs });
  let ranges: string[] = [];
  const cost = await measured(async (client) => {
    const report = await compactConversation(ctxOn(client), c, undefined, pairs + 10);
    ranges = report.ranges.map((r) => `${r.fromPair}:${r.result}`);
  });
  expect(ranges).toEqual([`${pairs + 10 - 30}:completed`]);
  return cost;
}

describe('what a compaction job costs', () => {
  it('a job on a 2,000-pair compacted conversation with 10 new pairs: 2 statements and the rows of one range, as at 100 pairs', async () => {
    const small = await compacted(100);
    const large = await compacted(2000);
    const atSmall = await jobAfterTenMore(small, 100);
    const atLarge = await jobAfterTenMore(large, 2000);
    // The claim (it finds the mark) and the commit (it says none is left): no pair count, no history.
    expect(atLarge.statements).toBe(2);
    expect(atLarge.statements).toBe(atSmall.statements);
    // Ten pairs and their twenty messages, read at claim and again at commit, plus a few single rows.
    expect(atLarge.rowsRead).toBeLessThanOrEqual(100);
    expect(atLarge.rowsRead).toBeLessThanOrEqual(atSmall.rowsRead * 1.5);
  }, 120_000);

  it('a one-range job enters PL/pgSQL for the claim and the commit only', async () => {
    const c = await createConversation(db.pool);
    await addPairs(db.pool, c, 30);
    const client = await db.pool.connect();
    try {
      // Calls of PL/pgSQL (and not inlined SQL) functions in this transaction; superuser setting.
      await client.query(`set track_functions = 'all'`);
      await client.query('begin');
      expect((await compactConversation(ctxOn(client), c, undefined, 30)).ranges.map((r) => r.result)).toEqual(['completed']);
      const { rows } = await client.query<{ name: string; calls: number }>(
        `select funcname as name, sum(calls)::int as calls from pg_stat_xact_user_functions where schemaname = 'sourcebound' group by funcname order by funcname`,
      );
      await client.query('commit');
      // claim_range twice: the next-mark form and the one-range form it runs. Not
      // compaction_mark_clear (0027 clears the mark in the commit's own DELETE), nor
      // the guard triggers (0027: their WHEN clauses hold only for a write they refuse).
      expect(rows).toEqual([
        { name: 'claim_range', calls: 2 },
        { name: 'commit_summary', calls: 1 },
      ]);
    } finally {
      client.release(true);
    }
  });

  it('a job with nothing to do: one claim that finds no mark', async () => {
    const c = await compacted(300);
    const cost = await measured(async (client) => {
      expect((await compactConversation(ctxOn(client), c, undefined, 300)).ranges).toEqual([]);
    });
    expect(cost.statements).toBe(1);
    expect(cost.rowsRead).toBeLessThanOrEqual(1);
  });

  it('an edit of one old message marks its range only, and the job redoes that range alone', async () => {
    const c = await createConversation(db.pool);
    const written = await addPairs(db.pool, c, 500);
    await compactConversation({ pool: db.pool, summarizer, logger: silentLogger, workerId: 'setup', leaseMs: 60_000 }, c);
    await db.pool.query(`update sourcebound.messages set content = 'edited' where id = $1`, [written[42]!.assistantMessageId]);
    const { rows } = await db.pool.query('select from_pair from sourcebound.compaction_marks where conversation_id = $1', [c]);
    expect(rows).toEqual([{ from_pair: 40 }]);
    let ranges: string[] = [];
    const cost = await measured(async (client) => {
      ranges = (await compactConversation(ctxOn(client), c, undefined, 500)).ranges.map((r) => `${r.fromPair}:${r.result}`);
    });
    expect(ranges).toEqual(['40:completed']);
    expect(cost.statements).toBe(2);
    expect(cost.rowsRead).toBeLessThanOrEqual(100);
  }, 60_000);
});

describe('named prepared statements on a direct connection', () => {
  it('three one-range jobs on one connection prepare the claim and the commit once and execute each three times; unnamed otherwise', async () => {
    const client = await db.pool.connect();
    try {
      const run = async (preparedStatements: boolean) => {
        for (let i = 0; i < 3; i++) {
          const c = await createConversation(db.pool);
          await addPairs(db.pool, c, 30);
          const report = await compactConversation({ ...ctxOn(client), preparedStatements }, c, undefined, 30);
          expect(report.ranges.map((r) => r.result)).toEqual(['completed']);
        }
        // custom + generic plans: executions of each named statement on this backend (PostgreSQL 14+).
        const { rows } = await client.query<{ name: string; runs: number }>(
          `select name, (custom_plans + generic_plans)::int as runs from pg_prepared_statements where name like 'sourcebound.%' order by name`,
        );
        return rows;
      };
      expect(await run(false)).toEqual([]);
      expect(await run(true)).toEqual([
        { name: 'sourcebound.range_next_claim', runs: 3 },
        { name: 'sourcebound.summary_commit', runs: 3 },
      ]);
    } finally {
      client.release(true);
    }
  });
});

describe('what a commit retry costs after a cut commit that landed', () => {
  /**
   * The claim of the conversation's newest range, then commitRetrying() on a
   * client whose first commit lands and then reports a lost connection (as a
   * connection cut while the server answered does): the retry finds the
   * attempt settled and reads back whether the landed commit was ours.
   */
  async function cutCommit(c: string): Promise<{ cost: Cost; kind: string }> {
    let kind = '';
    const cost = await measured(async (client) => {
      const claim = await claimNextRange(client, {
        conversationId: c,
        after: -1,
        wrap: true,
        skip: new Map(),
        model: summarizer.model,
        promptVersion: 'conversation-compaction@3',
        workerId: 'cost',
        leaseMs: 60_000,
      });
      if (claim.kind !== 'claimed') throw new Error(`expected a claim, got ${claim.kind}`);
      let cut = false;
      const cutting = {
        query: async (...args: unknown[]) => {
          const result = await (client.query as (...a: unknown[]) => Promise<unknown>)(...args);
          const text = typeof args[0] === 'string' ? args[0] : (args[0] as { text: string }).text;
          if (!cut && text.includes('commit_summary(')) {
            cut = true;
            throw Object.assign(new Error('Connection terminated unexpectedly'), { code: '57P01' });
          }
          return result;
        },
      };
      const result = await commitRetrying(
        cutting as never,
        { record: claim.record, attemptId: claim.attemptId, workerId: 'cost' },
        {
          kind: 'ok',
          text: 'summary of ten replies',
          model: summarizer.model,
          usage: null,
          requestId: null,
          grounding: { checked: [], ungrounded: [] },
        },
        DEFAULT_RETRY_DELAYS,
        { logger: silentLogger, deadlineAt: Date.now() + 30_000 },
      );
      kind = result.kind;
    });
    return { cost, kind };
  }

  it('reads its own attempt and record by id: one statement and the same rows at 500 pairs as at 40', async () => {
    const small = await createConversation(db.pool);
    await addPairs(db.pool, small, 40);
    const large = await compacted(490);
    await addPairs(db.pool, large, 10, undefined, { startAt: 490 });
    const atSmall = await cutCommit(small);
    const atLarge = await cutCommit(large);
    expect([atSmall.kind, atLarge.kind]).toEqual(['completed', 'completed']);
    // claim, the commit that landed, its retry (lease_lost: settled), the landed read.
    expect(atLarge.cost.statements).toBe(4);
    // 47 records and their attempts behind the large one: none of them is read.
    expect(atLarge.cost.rowsRead).toBeLessThanOrEqual(atSmall.cost.rowsRead + 5);
  }, 120_000);

  it('summaryAttemptRead gives null for an attempt of another record', async () => {
    const c = await compacted(50);
    const { rows } = await db.pool.query<{ id: string; attempt: string }>(
      `select s.id, a.id as attempt from sourcebound.conversation_summaries s join sourcebound.conversation_summary_attempts a on a.summary_id = s.id
       where s.conversation_id = $1 order by s.from_pair`,
      [c],
    );
    expect(rows).toHaveLength(3);
    const [first, second] = rows as [{ id: string; attempt: string }, { id: string; attempt: string }];
    expect(await summaryAttemptRead(db.pool, first.id, Number(second.attempt))).toBeNull();
    const read = await summaryAttemptRead(db.pool, second.id, Number(second.attempt));
    expect(read?.record).toMatchObject({ id: second.id, conversationId: c, fromPair: 10, status: 'completed' });
    expect(read?.attempt).toMatchObject({
      id: Number(second.attempt),
      summaryId: second.id,
      outcome: 'ok',
      spent: true,
      workerId: 'setup',
    });
    expect(read?.attempt.startedAt).toBeInstanceOf(Date);
  });
});

describe('what the sweep costs', () => {
  it('with nothing to repair it reads nothing of the conversations, however many there are', async () => {
    for (let i = 0; i < 40; i++) await compacted(35);
    await db.pool.query('delete from graphile_worker._private_jobs');
    // Marks left over by other tests would be repaired: clear them so nothing needs repair.
    await db.pool.query('delete from sourcebound.compaction_marks');
    let enqueued = -1;
    const cost = await measured(async (client) => {
      enqueued = await compactionSweepRun(client);
    });
    expect(enqueued).toBe(0);
    expect(cost.statements).toBe(1);
    // The cursor row at most: no pairs, messages or summaries.
    expect(cost.rowsRead).toBeLessThanOrEqual(1);
  }, 120_000);

  it('with conversations to repair it reads their marks, not their history', async () => {
    const lost: string[] = [];
    for (let i = 0; i < 20; i++) {
      const c = await createConversation(db.pool);
      await addPairs(db.pool, c, 60); // three plannable ranges each
      lost.push(c);
    }
    await db.pool.query('delete from graphile_worker._private_jobs');
    let enqueued = -1;
    const cost = await measured(async (client) => {
      enqueued = await compactionSweepRun(client);
    });
    expect(enqueued).toBeGreaterThanOrEqual(20);
    const marks = Number((await db.pool.query('select count(*) from sourcebound.compaction_marks')).rows[0].count);
    // Each mark once and each enqueued conversation's row (enqueue_compaction checks it
    // exists), and nothing of the 60 pairs and 120 messages behind each conversation.
    expect(cost.rowsRead).toBeLessThanOrEqual(marks + enqueued + 2);
  });
});
