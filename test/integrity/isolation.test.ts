import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { createTestDatabase } from '../support/db.ts';
import { addPairs, createConversation, drift, pairCount } from '../support/fixtures.ts';

/**
 * The pair triggers read the latest committed rows after taking the
 * conversation's lock (0031): exact under READ COMMITTED; under a transaction
 * snapshot (REPEATABLE READ, SERIALIZABLE) a write they must read for is
 * refused instead of indexed from rows another writer has changed since.
 * Each case: a session begins and reads (its snapshot), another session
 * commits a change to the same conversation, then the first one writes.
 */
const db = await createTestDatabase();

interface Setup {
  c: string;
  /** A run of the 31 completed pairs. */
  middleRun: string;
  /** A running run with both messages, the assistant's completed. */
  liveRun: string;
  /** A running run with only its user message. */
  bareRun: string;
}

async function setup(): Promise<Setup> {
  const c = await createConversation(db.pool);
  const pairs = await addPairs(db.pool, c, 31);
  const [live] = await addPairs(db.pool, c, 1, undefined, { runStatus: 'running', startAt: 100 });
  const {
    rows: [bare],
  } = await db.pool.query(`insert into sourcebound.runs (conversation_id, status) values ($1, 'running') returning id`, [c]);
  await db.pool.query(`insert into sourcebound.messages (conversation_id, run_id, role, content) values ($1, $2, 'user', 'q')`, [
    c,
    bare.id,
  ]);
  return { c, middleRun: pairs[5]!.runId, liveRun: live!.runId, bareRun: bare.id as string };
}

type Step = (s: Setup) => [string, unknown[]];

const races: { name: string; meanwhile: Step; write: Step }[] = [
  {
    // The old snapshot still has the pair that left: the new pair went to 31, nothing at 30.
    name: 'a run ends in the middle, then the session completes a new run',
    meanwhile: (s) => [`update sourcebound.runs set status = 'failed' where id = $1`, [s.middleRun]],
    write: (s) => [`update sourcebound.runs set status = 'completed' where id = $1`, [s.liveRun]],
  },
  {
    // The old snapshot sees the run still running: the pair was never indexed.
    name: 'the run completes, then the session writes its assistant message',
    meanwhile: (s) => [`update sourcebound.runs set status = 'completed' where id = $1`, [s.bareRun]],
    write: (s) => [
      `insert into sourcebound.messages (conversation_id, run_id, role, content) values ($1, $2, 'assistant', 'a')`,
      [s.c, s.bareRun],
    ],
  },
];

describe('pair writes under a transaction snapshot', () => {
  for (const isolation of ['repeatable read', 'serializable']) {
    it.each(races)(`${isolation}: $name: refused, and the index stays exact`, async ({ meanwhile, write }) => {
      const s = await setup();
      const session = new pg.Client({ connectionString: db.url });
      await session.connect();
      try {
        await session.query(`begin isolation level ${isolation}`);
        await session.query('select 1');
        await db.pool.query(...meanwhile(s));
        const error = await session.query(...write(s)).then(
          () => null,
          (e: { code?: string; message: string }) => e,
        );
        await session.query(error ? 'rollback' : 'commit');
        expect(error?.code, error?.message ?? 'the write was accepted').toBe('0A000');
        expect(error?.message).toMatch(/READ COMMITTED/);
      } finally {
        await session.end();
      }
      expect(await drift(db.pool, s.c)).toEqual([]);
    });
  }

  it('read committed: the same writes are exact', async () => {
    for (const { meanwhile, write } of races) {
      const s = await setup();
      const session = new pg.Client({ connectionString: db.url });
      await session.connect();
      try {
        await session.query('begin');
        await session.query('select 1');
        await db.pool.query(...meanwhile(s));
        await session.query(...write(s));
        await session.query('commit');
      } finally {
        await session.end();
      }
      expect(await drift(db.pool, s.c)).toEqual([]);
    }
  });

  it('repeatable read: writes the triggers read nothing for still pass', async () => {
    const s = await setup();
    const session = new pg.Client({ connectionString: db.url });
    await session.connect();
    try {
      await session.query('begin isolation level repeatable read');
      // A status change that keeps the run ineligible, a message outside any run.
      await session.query(`update sourcebound.runs set status = 'queued' where id = $1`, [s.liveRun]);
      const {
        rows: [m],
      } = await session.query(
        `insert into sourcebound.messages (conversation_id, role, content) values ($1, 'user', 'note') returning id`,
        [s.c],
      );
      await session.query(`update sourcebound.messages set content = 'note 2' where id = $1`, [m.id]);
      // And erasing a conversation, whose runs and messages go by cascade.
      const other = await createConversation(db.pool);
      await addPairs(db.pool, other, 3);
      await session.query('delete from sourcebound.conversations where id = $1', [other]);
      await session.query('commit');
    } finally {
      await session.end();
    }
    expect(await pairCount(db.pool, s.c)).toBe(31);
    expect(await drift(db.pool, s.c)).toEqual([]);
  });
});
