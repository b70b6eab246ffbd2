import { afterAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/support/config.ts';
import { openDatabase } from '../../src/db/database.ts';
import { silentLogger } from '../../src/support/logger.ts';
import { startWorker } from '../../src/worker/supervisor.ts';
import { createTestDatabase } from '../support/db.ts';
import { addPairs, createConversation } from '../support/fixtures.ts';
import { gatewayFor } from '../support/gateway.ts';
import { behaviours, startMessagesServer } from '../support/messages-server.ts';

/**
 * Regression (issue 17, "ranges wait a whole lease when crossings come
 * fast"): a second job meeting a range held by the first rescheduled the
 * conversation to the lease's expiry, and with preserve_run_at every later
 * enqueue kept that time: a conversation written at speed settled minutes
 * after its last write. A live holder now carries on with what became
 * plannable, and the job that found it busy only leaves a watch on the lease.
 */
const db = await createTestDatabase();
const server = await startMessagesServer({ defaultBehaviour: behaviours.delayed(800, behaviours.echo()) });
afterAll(() => server.close());

const SUMMARIZER_MS = 800;

describe('a conversation written faster than it is summarized', () => {
  it('150 pairs written at speed with an 800 ms summarizer: every range settles seconds after the last write, not after a lease', async () => {
    // A long lease (5 minutes, the default when this was found): the old behaviour waits for it.
    const config = loadConfig({
      DATABASE_URL: db.url,
      SOURCEBOUND_POLL_INTERVAL_MS: '200',
      SOURCEBOUND_LEASE_MS: '300000',
      LOG_LEVEL: 'silent',
    });
    const database = await openDatabase(config, silentLogger, 8);
    const worker = await startWorker({ config, logger: silentLogger, database, summarizer: gatewayFor(server), skipMigrations: true });
    try {
      const c = await createConversation(db.pool);
      for (let i = 0; i < 150; i++) await addPairs(db.pool, c, 1, undefined, { startAt: i });
      const lastWrite = performance.now();
      const ranges = 13; // (150 - 30) / 10 + 1
      await until(async () => {
        const { rows } = await db.pool.query(
          `select count(*)::int as n from sourcebound.conversation_summaries where conversation_id = $1 and status = 'completed'`,
          [c],
        );
        return rows[0].n === ranges;
      }, 60_000);
      const settledAfterMs = performance.now() - lastWrite;
      // Even one job doing every range alone would take 13 x 800 ms; a lease is 300 s.
      expect(settledAfterMs).toBeLessThan(ranges * SUMMARIZER_MS + 5_000);
      // One model call per range: nothing was summarized twice on the way.
      expect(server.count).toBe(ranges);
      // Nothing is left waiting under the conversation's key for a far-off time.
      const { rows: far } = await db.pool.query(
        `select key, run_at from graphile_worker._private_jobs where key = $1 and run_at > now() + interval '30 seconds'`,
        [`sourcebound:compact:${c}`],
      );
      expect(far).toEqual([]);
    } finally {
      await worker.stop();
      await database.close();
    }
  }, 90_000);
});

async function until(condition: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!(await condition())) {
    if (performance.now() > deadline) throw new Error(`not settled within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
