import { describe, expect, it } from 'vitest';
import { compactConversation } from '../../src/conversation/compact.ts';
import { MAX_RETRY_AFTER_MS } from '../../src/gateway/provider-fields.ts';
import { DEFAULT_DEFERRAL_BACKOFF } from '../../src/gateway/deferral.ts';
import { attemptsOfConversationRead, summariesOfConversationRead } from '../../src/db/queries/summaries.ts';
import { addPairs, createConversation } from '../support/fixtures.ts';
import { behaviours, type Behaviour } from '../support/messages-server.ts';
import { compactionSetup } from './setup.ts';

/**
 * What the provider says reaches the database: a material the API finds over
 * its context window, a `retry-after` that would loop or overflow, a NUL where
 * PostgreSQL text cannot take one. Each must settle at once, in one commit,
 * as the right outcome: never a throw that leaves the claim running until its
 * lease ends, never a configuration error that calls the model forever.
 */

const { db, server, ctx } = await compactionSetup();

const reply = (i: number) => ({ user: `question ${i}`, assistant: `Fund ${i} had a NAV of ${100 + i}.25 on 2026-10-0${(i % 9) + 1}.` });

async function conversation(): Promise<string> {
  const c = await createConversation(db.pool);
  await addPairs(db.pool, c, 30, reply);
  return c;
}

const tooLong = (tokens: number): Behaviour => ({
  kind: 'error',
  status: 400,
  errorType: 'invalid_request_error',
  message: `prompt is too long: ${tokens} tokens > 200000 maximum`,
});

describe('material over the context window (HTTP 400 "prompt is too long")', () => {
  it("is invalid, not config: an attempt spent each time, the second fails the identity for good, the API's message kept", async () => {
    const c = await conversation();
    server.enqueue(tooLong(212_345), tooLong(212_345));
    const first = await compactConversation(ctx(), c);
    expect(first.ranges.map((r) => r.result)).toEqual(['attempt_spent']);
    const second = await compactConversation(ctx(), c);
    expect(second.ranges.map((r) => r.result)).toEqual(['failed']);
    const third = await compactConversation(ctx(), c);
    expect(third.ranges.map((r) => r.result)).toEqual(['failed']);
    expect(server.count).toBe(2);

    const [record] = await summariesOfConversationRead(db.pool, c);
    expect(record).toMatchObject({
      status: 'failed',
      attemptsSpent: 2,
      failureReason: 'invalid: too_large:http_400:invalid_request_error: prompt is too long: 212345 tokens > 200000 maximum',
    });
    expect((await attemptsOfConversationRead(db.pool, c)).map((a) => [a.outcome, a.spent])).toEqual([
      ['invalid', true],
      ['invalid', true],
    ]);
  });
});

describe('retry-after: 0 from a rate-limiting provider', () => {
  it('defers with a wait (no hot loop): asked again at once, no call is made', async () => {
    const c = await conversation();
    server.setDefault(behaviours.rateLimited(0));
    try {
      const before = Date.now();
      expect((await compactConversation(ctx(), c)).ranges.map((r) => r.result)).toEqual(['deferred']);
      const [record] = await summariesOfConversationRead(db.pool, c);
      expect(record!.attemptsSpent).toBe(0);
      expect(record!.notBefore!.getTime() - before).toBeGreaterThanOrEqual(DEFAULT_DEFERRAL_BACKOFF.firstMs - 50);
      for (let i = 0; i < 5; i++) {
        expect((await compactConversation(ctx(), c)).ranges.map((r) => r.result)).toEqual(['deferred']);
      }
      expect(server.count).toBe(1);
    } finally {
      server.setDefault(behaviours.echo());
    }
  });
});

describe('hostile values in a provider answer are settled at once, in one commit', () => {
  it("a NUL in a 429's error type and message: deferred, stored without the NUL", async () => {
    const c = await conversation();
    server.enqueue({
      kind: 'error',
      status: 429,
      errorType: 'rate_limit_error\u0000',
      message: 'slow\u0000down',
      headers: { 'retry-after': '30' },
    });
    expect((await compactConversation(ctx(), c)).ranges.map((r) => r.result)).toEqual(['deferred']);
    const [record] = await summariesOfConversationRead(db.pool, c);
    expect(record).toMatchObject({ status: 'pending', attemptsSpent: 0, failureReason: 'deferred: http_429:rate_limit_error: slow down' });
  });

  it("a NUL in a 500's error type: unknown, the attempt spent with a storable reason", async () => {
    const c = await conversation();
    server.enqueue({ kind: 'error', status: 500, errorType: 'api_error\u0000', message: 'internal\u0000' });
    expect((await compactConversation(ctx(), c)).ranges.map((r) => r.result)).toEqual(['attempt_spent']);
    expect((await attemptsOfConversationRead(db.pool, c)).map((a) => [a.outcome, a.spent, a.reason])).toEqual([
      ['unknown', true, 'http_500:api_error: internal'],
    ]);
  });

  it.each([
    ['retry-after: 1e13 (seconds)', { 'retry-after': '1e13' }],
    ['retry-after-ms: 1e300', { 'retry-after-ms': '1e300' }],
  ])('%s: deferred for at most MAX_RETRY_AFTER_MS (one hour), not a timestamp out of range', async (_name, headers) => {
    const c = await conversation();
    server.enqueue(behaviours.httpError(429, 'rate_limit_error', headers));
    const before = Date.now();
    expect((await compactConversation(ctx(), c)).ranges.map((r) => r.result)).toEqual(['deferred']);
    const [record] = await summariesOfConversationRead(db.pool, c);
    const waitMs = record!.notBefore!.getTime() - before;
    expect(waitMs).toBeGreaterThan(MAX_RETRY_AFTER_MS - 60_000);
    expect(waitMs).toBeLessThanOrEqual(MAX_RETRY_AFTER_MS + 5_000);
  });

  it('a NUL inside an otherwise good answer: invalid at once with a reason that says so, not a lease run out', async () => {
    const c = await conversation();
    server.enqueue(behaviours.text('Fund 3 had a NAV of 103.25.\u0000'));
    expect((await compactConversation(ctx(), c)).ranges.map((r) => r.result)).toEqual(['attempt_spent']);
    const [record] = await summariesOfConversationRead(db.pool, c);
    expect(record).toMatchObject({ status: 'pending', attemptsSpent: 1, summary: null, failureReason: 'invalid: unstorable_text:U+0000' });
  });

  it('an answer of invisible characters only: invalid empty_text, never a summary', async () => {
    const c = await conversation();
    server.enqueue(behaviours.text('\u200B\u200C\u200D\u2060\uFEFF'), behaviours.text('\u3164\u2800'));
    await compactConversation(ctx(), c);
    await compactConversation(ctx(), c);
    const [record] = await summariesOfConversationRead(db.pool, c);
    expect(record).toMatchObject({ status: 'failed', attemptsSpent: 2, summary: null });
    expect((await attemptsOfConversationRead(db.pool, c)).map((a) => [a.outcome, a.reason])).toEqual([
      ['invalid', 'empty_text'],
      ['invalid', 'empty_text'],
    ]);
  });
});
