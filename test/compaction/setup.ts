import { afterAll, beforeEach } from 'vitest';
import type { CompactionContext } from '../../src/conversation/compact.ts';
import { silentLogger } from '../../src/support/logger.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { gatewayFor } from '../support/gateway.ts';
import { startMessagesServer, type MessagesServer } from '../support/messages-server.ts';

export interface CompactionSetup {
  db: TestDatabase;
  /** The local Messages API server the real gateway and SDK talk to; reset before each test. */
  server: MessagesServer;
  /** A compaction context on them, with `overrides`. */
  ctx(overrides?: Partial<CompactionContext>): CompactionContext;
}

/**
 * What the compaction tests that go through the real SDK share: the file's
 * own database, a local Messages server (closed after the file, reset before
 * each test), and a context whose retries are due at once (the tests drive
 * time, not the clock). Call it at a test file's top level.
 */
export async function compactionSetup(): Promise<CompactionSetup> {
  const db = await createTestDatabase();
  const server = await startMessagesServer();
  afterAll(() => server.close());
  beforeEach(() => server.reset());
  const ctx = (overrides: Partial<CompactionContext> = {}): CompactionContext => ({
    pool: db.pool,
    summarizer: gatewayFor(server),
    logger: silentLogger,
    workerId: 'test-worker',
    leaseMs: 60_000,
    retryDelays: { deferMs: 0, afterSpentMs: 0 },
    ...overrides,
  });
  return { db, server, ctx };
}
