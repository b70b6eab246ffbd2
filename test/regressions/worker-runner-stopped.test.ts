import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/support/config.ts';
import { openDatabase } from '../../src/db/database.ts';
import { summariesOfConversationRead } from '../../src/db/queries/summaries.ts';
import { silentLogger } from '../../src/support/logger.ts';
import { createOfflineSummarizer } from '../../src/gateway/index.ts';
import { startWorker } from '../../src/worker/supervisor.ts';
import { createTestDatabase } from '../support/db.ts';
import { addPairs, createConversation } from '../support/fixtures.ts';
import { until } from '../support/processes.ts';

/**
 * Regression (fault suite, scenario 2): when PostgreSQL restarts while a job
 * finishes, graphile-worker's pool cannot mark the job and its runner stops
 * itself, resolving runner.promise. The worker first called runner.stop() a
 * second time ("Runner is already stopped" printed as a stack trace), then
 * exited 1 and waited for a process manager. Now it starts a new runner in the
 * same process and goes on compacting.
 */
const db = await createTestDatabase();

async function worker() {
  const config = loadConfig({ DATABASE_URL: db.url, SOURCEBOUND_POLL_INTERVAL_MS: '200', LOG_LEVEL: 'silent' });
  const database = await openDatabase(config, silentLogger, 8);
  const handle = await startWorker({
    config,
    logger: silentLogger,
    database,
    summarizer: createOfflineSummarizer({ maxChars: 6000 }),
    skipMigrations: true,
  });
  return { handle, database };
}

describe('a worker whose graphile-worker runner stops by itself', () => {
  it('starts a new runner in the same process and goes on compacting; stop() then resolves cleanly', async () => {
    const { handle, database } = await worker();
    let settled = false;
    void handle.runner.promise.then(
      () => {
        settled = true;
      },
      () => {
        settled = true;
      },
    );
    // The library's own stop, not ours: what its runner does when its worker pool fails.
    await handle.runner.stop();
    await until(async () => handle.health().restarts === 1 && handle.health().running, 20_000, 'a new runner');
    expect(settled).toBe(false);
    const c = await createConversation(db.pool);
    await addPairs(db.pool, c, 30);
    await until(
      async () => (await summariesOfConversationRead(db.pool, c)).some((r) => r.status === 'completed'),
      20_000,
      'range compacted by the new runner',
    );
    await handle.stop();
    await expect(handle.runner.promise).resolves.toBeUndefined();
    await database.close();
  });

  it('a stop() we asked for resolves runner.promise cleanly', async () => {
    const { handle, database } = await worker();
    await handle.stop();
    await expect(handle.runner.promise).resolves.toBeUndefined();
    await database.close();
  });
});
