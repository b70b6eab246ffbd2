import { afterAll, describe, expect, it } from 'vitest';
import { compactConversation } from '../src/conversation/compact.ts';
import { inspectConversation } from '../src/conversation/inspect.ts';
import { ConversationNotFoundError } from '../src/projection/projection-errors.ts';
import { renderInspection } from '../src/cli/inspect-command.ts';
import { silentLogger } from '../src/support/logger.ts';
import { createTestDatabase } from './support/db.ts';
import { addPairs, createConversation } from './support/fixtures.ts';
import { gatewayFor } from './support/gateway.ts';
import { behaviours, startMessagesServer } from './support/messages-server.ts';
import { spawnSourcebound } from './support/processes.ts';

const db = await createTestDatabase();
const server = await startMessagesServer();
afterAll(() => server.close());

describe('sourcebound inspect', () => {
  it('shows pairs, planned ranges, records with every attempt and whether each binding holds', async () => {
    const c = await createConversation(db.pool);
    const written = await addPairs(db.pool, c, 40);
    const ctx = {
      pool: db.pool,
      summarizer: gatewayFor(server),
      logger: silentLogger,
      workerId: 'w1',
      leaseMs: 60_000,
      retryDelays: { deferMs: 0, afterSpentMs: 0 },
    };
    server.enqueue(behaviours.refusal());
    await compactConversation(ctx, c); // 0-9 spends an attempt, 10-19 completes
    await compactConversation(ctx, c); // 0-9 completes on its second attempt
    await db.pool.query(`update sourcebound.messages set content = 'edited' where id = $1`, [written[12]!.assistantMessageId]);

    const inspection = await inspectConversation(db.pool, c, 'tenant-a');
    expect(inspection.pairCount).toBe(40);
    expect(inspection.plannedRanges).toEqual([
      { fromPair: 0, toPair: 9 },
      { fromPair: 10, toPair: 19 },
    ]);
    const [first, second] = inspection.records;
    expect(first).toMatchObject({ fromPair: 0, status: 'completed', attemptsSpent: 2, bindingHolds: true, projectableVersion: true });
    expect(first!.attempts.map((a) => [a.outcome, a.spent])).toEqual([
      ['invalid', true],
      ['ok', true],
    ]);
    expect(first!.attempts[0]!.reason).toMatch(/refusal/);
    expect(second).toMatchObject({ fromPair: 10, status: 'completed', bindingHolds: false });

    const text = renderInspection(inspection);
    expect(text).toMatch(/range 0-9 {2}COMPLETED/);
    expect(text).toMatch(/attempt 1: invalid \(spent\) — stop_reason:refusal/);
    expect(text).toMatch(/BROKEN \(source changed\)/);

    await expect(inspectConversation(db.pool, c, 'tenant-b')).rejects.toThrow(ConversationNotFoundError);

    const cli = spawnSourcebound(['inspect', c, '--scope', 'tenant-a', '--json'], { DATABASE_URL: db.url });
    const out: string[] = [];
    cli.child.stdout!.on('data', (chunk: Buffer) => out.push(chunk.toString()));
    expect(await cli.exited).toBe(0);
    expect(JSON.parse(out.join('')).records).toHaveLength(2);
    const wrongScope = spawnSourcebound(['inspect', c, '--scope', 'tenant-b'], { DATABASE_URL: db.url });
    expect(await wrongScope.exited).toBe(1);
    expect(wrongScope.stderr).toMatch(/not found/);
  });
});
