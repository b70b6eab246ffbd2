import { Writable } from 'node:stream';
import pg from 'pg';
import pino from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { compactConversation, type CompactionContext } from '../../src/conversation/compact.ts';
import { createPool } from '../../src/db/database.ts';
import { attemptsOfConversationRead, summariesOfConversationRead } from '../../src/db/queries/summaries.ts';
import { createOfflineSummarizer } from '../../src/gateway/index.ts';
import type { Summarizer } from '../../src/support/summary-contract.ts';
import { silentLogger } from '../../src/support/logger.ts';
import { createTestDatabase } from '../support/db.ts';
import { addPairs, createConversation } from '../support/fixtures.ts';
import { until } from '../support/processes.ts';
import { startTcpProxy } from '../support/tcp-proxy.ts';

/**
 * Regression (test/faults/03-connection-faults.test.ts ended with 2-5 of 40 ranges failed for good):
 * a commit whose connection was cut failed the task with the model's answer
 * in hand; the claim ran out its lease and the takeover settled the attempt
 * as `unknown`, spent. Two such cuts and the identity was failed for good.
 * Now the commit is tried again on a new connection (src/conversation/commit-retry.ts),
 * and the database decides what the retry may do: complete once, never twice,
 * never a source that changed meanwhile.
 *
 * The cuts are made at a hook, not by timing: a harness transaction holds the
 * record's row lock from inside the summarizer call, so the commit waits inside
 * commit_summary() where pg_terminate_backend() finds it; or a TCP proxy lets
 * the commit through and drops the connection as the server answers.
 */
const db = await createTestDatabase();
const pools: pg.Pool[] = [];
afterAll(async () => {
  await Promise.all(pools.map((p) => p.end()));
});

/** The offline summarizer; `beforeAnswer` runs inside the first call, once the claim is made. */
function hookedSummarizer(beforeAnswer: () => Promise<void>): Summarizer {
  const offline = createOfflineSummarizer({ maxChars: 6000 });
  let calls = 0;
  return {
    model: offline.model,
    async summarize(request) {
      if (calls++ === 0) await beforeAnswer();
      return offline.summarize(request);
    },
  };
}

function context(url: string, summarizer: Summarizer, logger = silentLogger): CompactionContext {
  const pool = createPool(url, silentLogger, 4);
  pools.push(pool);
  return { pool, summarizer, logger, workerId: 'host:1:cut', leaseMs: 60_000 };
}

/** A harness session that takes the conversation's running record's row lock in a transaction it keeps open. */
async function rowLocker(conversationId: string) {
  const client = new pg.Client({ connectionString: db.url, application_name: 'test-row-locker' });
  client.on('error', () => {});
  await client.connect();
  return {
    client,
    async lock() {
      await client.query('begin');
      const { rowCount } = await client.query(
        `select 1 from sourcebound.conversation_summaries where conversation_id = $1 and status = 'running' for update`,
        [conversationId],
      );
      expect(rowCount).toBe(1);
    },
    async end() {
      await client.end();
    },
  };
}

/** Terminates the backend running commit_summary() once it waits for a lock; returns its pid. */
async function terminateWaitingCommit(): Promise<number> {
  let pid = 0;
  await until(
    async () => {
      const { rows } = await db.pool.query<{ pid: number }>(
        `select pid from pg_stat_activity
       where datname = current_database() and wait_event_type = 'Lock' and query like '%sourcebound.commit_summary(%'`,
      );
      pid = rows[0]?.pid ?? 0;
      return pid !== 0;
    },
    30_000,
    'the commit waiting for the row lock',
  );
  const {
    rows: [t],
  } = await db.pool.query<{ ok: boolean }>('select pg_terminate_backend($1) as ok', [pid]);
  expect(t!.ok).toBe(true);
  return pid;
}

const attemptsOf = async (c: string) => (await attemptsOfConversationRead(db.pool, c)).map((a) => [a.outcome, a.spent]);

describe('a commit cut mid-statement with the answer in hand', () => {
  it('is committed on retry: one attempt spent, the range completed', async () => {
    const c = await createConversation(db.pool);
    await addPairs(db.pool, c, 30);
    const locker = await rowLocker(c);
    try {
      const ctx = context(
        db.url,
        hookedSummarizer(() => locker.lock()),
      );
      const pass = compactConversation(ctx, c);
      await terminateWaitingCommit();
      await locker.client.query('rollback');
      const report = await pass;
      expect(report.ranges.map((r) => r.result)).toEqual(['completed']);
      expect(await attemptsOf(c)).toEqual([['ok', true]]);
      const [record] = await summariesOfConversationRead(db.pool, c);
      expect(record).toMatchObject({ status: 'completed', attemptsSpent: 1 });
    } finally {
      await locker.end();
    }
  });

  it('a retry after a first commit that did land completes nothing twice: the range is reported completed, one attempt', async () => {
    const c = await createConversation(db.pool);
    await addPairs(db.pool, c, 30);
    const proxy = await startTcpProxy({ host: new URL(db.url).hostname, port: Number(new URL(db.url).port || 5432) });
    try {
      const lines: { msg: string; kind?: string }[] = [];
      const logger = pino(
        { level: 'info' },
        new Writable({
          write(chunk, _enc, done) {
            lines.push(JSON.parse(String(chunk)));
            done();
          },
        }),
      );
      const ctx = context(proxy.through(db.url), createOfflineSummarizer({ maxChars: 6000 }), logger);
      const cut = proxy.cutReplyTo('sourcebound.commit_summary(');
      const report = await compactConversation(ctx, c);
      await cut;
      expect(report.ranges.map((r) => r.result)).toEqual(['completed']);
      // The first commit landed; the retry found its attempt settled and read back that it was ours.
      expect(lines.find((l) => l.msg === 'the commit that lost its connection had landed')).toMatchObject({ kind: 'completed' });
      expect(await attemptsOf(c)).toEqual([['ok', true]]);
      const [record] = await summariesOfConversationRead(db.pool, c);
      expect(record).toMatchObject({ status: 'completed', attemptsSpent: 1 });
    } finally {
      await proxy.close();
    }
  });

  it('a retry after the source changed records the answer stale, never completes it; the new source is summarized', async () => {
    const c = await createConversation(db.pool);
    const pairs = await addPairs(db.pool, c, 30);
    const locker = await rowLocker(c);
    try {
      const ctx = context(
        db.url,
        hookedSummarizer(() => locker.lock()),
      );
      const pass = compactConversation(ctx, c);
      await terminateWaitingCommit();
      // The edit commits with the lock's release: the retry then re-hashes the changed source.
      await locker.client.query('update sourcebound.messages set content = $2 where id = $1', [
        pairs[3]!.assistantMessageId,
        'answer 3, edited',
      ]);
      await locker.client.query('commit');
      const report = await pass;
      expect(report.ranges.map((r) => r.result)).toEqual(['stale', 'completed']);
      const records = await summariesOfConversationRead(db.pool, c);
      const first = records.find((r) => r.id === report.ranges[0]!.recordId)!;
      expect(first).toMatchObject({ status: 'stale', attemptsSpent: 1, summary: null });
      expect(records.filter((r) => r.status === 'completed').map((r) => r.id)).toEqual([report.ranges[1]!.recordId]);
      expect(await attemptsOf(c)).toEqual([
        ['stale', true],
        ['ok', true],
      ]);
    } finally {
      await locker.end();
    }
  });
});
