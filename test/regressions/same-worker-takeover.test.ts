import { describe, expect, it } from 'vitest';
import { claimRange, type ClaimResult } from '../../src/conversation/claim.ts';
import { commitOutcome } from '../../src/conversation/commit.ts';
import { attemptsOfConversationRead, summariesOfConversationRead } from '../../src/db/queries/summaries.ts';
import { CONVERSATION_PROMPT_VERSION } from '../../src/gateway/prompts.ts';
import type { Outcome } from '../../src/support/summary-contract.ts';
import { createTestDatabase } from '../support/db.ts';
import { addPairs, createConversation } from '../support/fixtures.ts';

/**
 * Regression (found reading the claim/commit path for the fault suite): the
 * commit checked only that the record was still running under its worker's
 * id. Two jobs of one process share that id, so when a job's lease expired
 * mid-call and a second job of the SAME process took the claim over, the
 * first job's late commit still passed: it completed the record with an
 * attempt the takeover had already settled as `unknown` (no `ok` attempt
 * anywhere, attempts_spent 2) and left the second job's attempt open forever.
 * A commit must hold the claim it made, i.e. its own attempt must still be open.
 */
const db = await createTestDatabase();

const ok = (text: string): Outcome => ({ kind: 'ok', text, model: 'anthropic/claude-test', usage: null, requestId: null });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function claim(conversationId: string, leaseMs: number): Promise<Extract<ClaimResult, { kind: 'claimed' }>> {
  const result = await claimRange(db.pool, {
    conversationId,
    range: { fromPair: 0, toPair: 9 },
    model: 'anthropic/claude-test',
    promptVersion: CONVERSATION_PROMPT_VERSION,
    workerId: 'host:1:same',
    leaseMs,
  });
  if (result.kind !== 'claimed') throw new Error(`expected a claim, got ${result.kind}`);
  return result;
}

describe('a claim taken over by another job of the same worker process', () => {
  it("drops the first job's late result and completes with the second job's, every attempt settled", async () => {
    const c = await createConversation(db.pool);
    await addPairs(db.pool, c, 30);
    const first = await claim(c, 1);
    await sleep(20);
    const second = await claim(c, 60_000);
    expect(second.record.id).toBe(first.record.id);

    const late = await commitOutcome(
      db.pool,
      { record: first.record, attemptId: first.attemptId, workerId: 'host:1:same' },
      ok('the first job, too late'),
    );
    expect(late.kind).toBe('lease_lost');
    const done = await commitOutcome(
      db.pool,
      { record: second.record, attemptId: second.attemptId, workerId: 'host:1:same' },
      ok('the second job'),
    );
    expect(done.kind).toBe('completed');

    const [record] = await summariesOfConversationRead(db.pool, c);
    expect(record).toMatchObject({ status: 'completed', summary: 'the second job', attemptsSpent: 2 });
    const attempts = await attemptsOfConversationRead(db.pool, c);
    expect(attempts.map((a) => [a.id === first.attemptId ? 'first' : 'second', a.outcome, a.spent])).toEqual([
      ['first', 'unknown', true],
      ['second', 'ok', true],
    ]);
  });
});
