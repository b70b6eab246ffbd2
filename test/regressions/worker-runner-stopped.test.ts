import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.ts';
import { openDatabase } from '../../src/db/database.ts';
import { silentLogger } from '../../src/logger.ts';
import { createOfflineSummarizer } from '../../src/gateway/index.ts';
import { startWorker, WorkerRunnerStoppedError } from '../../src/worker.ts';
import { createTestDatabase } from '../support/db.ts';

/**
 * Regression (fault suite, scenario 2): when PostgreSQL restarts while a job
 * finishes, graphile-worker's pool cannot mark the job and its runner stops
 * itself, resolving runner.promise. The worker then called runner.stop() a
 * second time, which rejected with "Runner is already stopped": the CLI
 * printed that stack trace, and runner.promise resolving as after a clean stop
 * hid that the worker had died (the CLI's "worker runner failed" never ran).
 */
const db = await createTestDatabase();

async function worker() {
  const config = loadConfig({ DATABASE_URL: db.url, SOURCEBOUND_POLL_INTERVAL_MS: '200', LOG_LEVEL: 'silent' });
  const database = await openDatabase(config, silentLogger, 8);
  const handle = await startWorker({ config, logger: silentLogger, database, summarizer: createOfflineSummarizer({ maxChars: 6000 }), skipMigrations: true });
  return { handle, database };
}

describe('a worker whose graphile-worker runner stops by itself', () => {
  it('reports it through runner.promise, and stop() releases everything, then says so too', async () => {
    const { handle, database } = await worker();
    // The library's own stop, not ours: what its runner does when its worker pool fails.
    await handle.runner.stop();
    await expect(handle.runner.promise).rejects.toBeInstanceOf(WorkerRunnerStoppedError);
    // Not "Runner is already stopped", and quiet: the CLI prints one line and exits 1.
    const stopped = await handle.stop().then(() => null, (error: unknown) => error);
    expect(stopped).toBeInstanceOf(WorkerRunnerStoppedError);
    expect((stopped as WorkerRunnerStoppedError).exitQuietly).toBe(true);
    await database.close();
  });

  it('a stop() we asked for resolves runner.promise cleanly', async () => {
    const { handle, database } = await worker();
    await handle.stop();
    await expect(handle.runner.promise).resolves.toBeUndefined();
    await database.close();
  });
});
