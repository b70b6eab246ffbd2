import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAdmission } from '../../src/gateway/admission.ts';
import { createAnthropicSummarizer } from '../../src/gateway/anthropic-summarizer.ts';
import { MAX_RETRY_AFTER_MS, REQUEST_ID_MAX_CHARS } from '../../src/gateway/provider-fields.ts';
import { DEFAULT_DEFERRAL_BACKOFF } from '../../src/gateway/deferral.ts';
import { createGateway, REASON_MAX_CHARS } from '../../src/gateway/gateway.ts';
import type { GatewayLogger } from '../../src/gateway/gateway-logger.ts';
import { createOfflineSummarizer, OFFLINE_MODEL } from '../../src/gateway/offline.ts';
import { CONVERSATION_PROMPT_VERSION } from '../../src/gateway/prompts.ts';
import type { Outcome, Summarizer, SummaryRequest } from '../../src/support/summary-contract.ts';
import { behaviours, startMessagesServer, type MessagesServer } from '../support/messages-server.ts';
import { databaseUrl, namespaceFor } from './database.ts';

/** This file's advisory-lock namespaces (admission.test.ts uses 0x7E5A0100 + n). */
const NAMESPACE_BASE = 0x7e5a0200;

const request: SummaryRequest = { promptVersion: CONVERSATION_PROMPT_VERSION, items: [{ id: '10', text: 'The total is 42.' }] };

/** A summarizer that records what it was asked and answers with `answer`. */
function scripted(answer: (r: SummaryRequest) => Outcome | Promise<Outcome>): Summarizer & { seen: SummaryRequest[] } {
  const seen: SummaryRequest[] = [];
  return {
    model: 'test/scripted@1',
    seen,
    summarize: async (r) => {
      seen.push(r);
      return answer(r);
    },
  };
}

const ok = (text: string): Outcome => ({ kind: 'ok', text, model: 'test/scripted@1', usage: null, requestId: null });

function recordingLogger(): GatewayLogger & { entries: { level: string; obj: object; msg: string }[] } {
  const entries: { level: string; obj: object; msg: string }[] = [];
  return {
    entries,
    info(obj, msg) {
      entries.push({ level: 'info', obj, msg });
    },
    warn(obj, msg) {
      entries.push({ level: 'warn', obj, msg });
    },
    error(obj, msg) {
      entries.push({ level: 'error', obj, msg });
    },
  };
}

describe('gateway', () => {
  it('applies the defaults a request leaves out and keeps the ones it gives', async () => {
    const summarizer = scripted(() => ok('fine'));
    const gateway = createGateway({ summarizer, defaults: { maxChars: 123, deadlineMs: 4567 } });
    await gateway.summarize(request);
    await gateway.summarize({ ...request, maxChars: 10, deadlineMs: 20 });
    expect(summarizer.seen.map((r) => [r.maxChars, r.deadlineMs])).toEqual([
      [123, 4567],
      [10, 20],
    ]);
    expect(gateway.model).toBe('test/scripted@1');
  });

  it('turns a throwing summarizer into unknown with the message, and still releases the slot', async () => {
    const admission = createAdmission({ localLimit: 1, fleetLimit: 0, waitTimeoutMs: 100 });
    const logger = recordingLogger();
    const gateway = createGateway({
      summarizer: scripted(() => {
        throw new Error('boom');
      }),
      admission,
      defaults: { maxChars: 100, deadlineMs: 100 },
      logger,
    });
    expect(await gateway.summarize(request)).toEqual({ kind: 'unknown', reason: 'summarizer_threw:Error: boom', requestId: null });
    // With a limit of one, a leaked slot would make this second call wait out its timeout.
    expect(await gateway.summarize(request)).toMatchObject({ kind: 'unknown' });
    expect(logger.entries.some((e) => e.level === 'error' && e.msg.includes('threw'))).toBe(true);
    await admission.close();
  });

  it('reads an outcome of the wrong shape from a plain JS summarizer for what can be known (one rule with the Run path)', async () => {
    const gateway = (value: unknown) =>
      createGateway({ summarizer: scripted(() => value as Outcome), defaults: { maxChars: 100, deadlineMs: 100 } }).summarize(request);
    expect(await gateway({ kind: 'done', text: 'x' })).toEqual({
      kind: 'unknown',
      reason: 'contract:malformed_outcome:done',
      requestId: null,
    });
    expect(await gateway(null)).toEqual({ kind: 'unknown', reason: 'contract:malformed_outcome:null', requestId: null });
    expect(await gateway({ kind: 'deferred', reason: 'busy' })).toEqual({ kind: 'deferred', reason: 'busy', retryAfterMs: null });
    expect(await gateway({ kind: 'config', reason: 7 })).toEqual({ kind: 'config', reason: 'config', status: null });
    expect(
      await gateway({ kind: 'ok', text: 'fine', usage: { inputTokens: 1.5, outputTokens: 2 }, grounding: { checked: [], ungrounded: [] } }),
    ).toEqual({ kind: 'ok', text: 'fine', model: 'test/scripted@1', usage: null, requestId: null });
  });

  it('never lets a contract-breaking ok through: over the cap or empty becomes invalid', async () => {
    const gateway = (text: string) => createGateway({ summarizer: scripted(() => ok(text)), defaults: { maxChars: 5, deadlineMs: 100 } });
    expect(await gateway('123456').summarize(request)).toMatchObject({
      kind: 'invalid',
      reason: 'contract:too_long:6>5',
      model: 'test/scripted@1',
    });
    expect(await gateway('  ').summarize(request)).toMatchObject({ kind: 'invalid', reason: 'contract:empty_text' });
    expect(await gateway('12345').summarize(request)).toMatchObject({ kind: 'ok', text: '12345' });
  });

  it('never lets an answer of invisible characters, or one PostgreSQL cannot store, through as ok', async () => {
    const gateway = (text: string) => createGateway({ summarizer: scripted(() => ok(text)), defaults: { maxChars: 50, deadlineMs: 100 } });
    for (const blank of ['\u200B\u200C\u200D\u2060\uFEFF', '\u3164\u2800', ' \u00AD\u200E\n']) {
      expect(await gateway(blank).summarize(request)).toMatchObject({ kind: 'invalid', reason: 'contract:empty_text' });
    }
    expect(await gateway('Total 42.\u0000').summarize(request)).toMatchObject({
      kind: 'invalid',
      reason: 'contract:unstorable_text:U+0000',
    });
  });

  it('passes non-ok outcomes through unchanged', async () => {
    const outcomes: Outcome[] = [
      { kind: 'deferred', reason: 'http_529:overloaded_error', retryAfterMs: 60_000 },
      { kind: 'deferred', reason: 'admission_timeout', retryAfterMs: null },
      { kind: 'unknown', reason: 'timeout', requestId: 'req_1' },
      {
        kind: 'invalid',
        reason: 'block:tool_use',
        model: 'test/scripted@1',
        usage: { inputTokens: 1, outputTokens: 2 },
        requestId: 'req_2',
      },
      { kind: 'config', reason: 'http_401:authentication_error: invalid x-api-key', status: 401 },
    ];
    for (const outcome of outcomes) {
      const gateway = createGateway({ summarizer: scripted(() => outcome), defaults: { maxChars: 5, deadlineMs: 100 } });
      expect(await gateway.summarize(request)).toEqual(outcome);
    }
  });

  it('makes whatever a summarizer returns storable: no NUL, bounded strings, a sane wait, real token counts', async () => {
    const hostile = (outcome: Outcome) =>
      createGateway({ summarizer: scripted(() => outcome), defaults: { maxChars: 50, deadlineMs: 100 } });
    const long = 'y'.repeat(5000);
    const invalid = await hostile({
      kind: 'invalid',
      reason: `odd\u0000${long}`,
      model: 'm\u0000',
      usage: { inputTokens: 1e300, outputTokens: -1 },
      requestId: `req\u0000${long}`,
    }).summarize(request);
    expect(invalid).toMatchObject({ kind: 'invalid', model: 'm', usage: null });
    const { reason, requestId } = invalid as { reason: string; requestId: string };
    expect(reason.startsWith('odd yyy')).toBe(true);
    expect([...reason]).toHaveLength(REASON_MAX_CHARS);
    expect(requestId.startsWith('req yyy')).toBe(true);
    expect([...requestId]).toHaveLength(REQUEST_ID_MAX_CHARS);
    expect(JSON.stringify(invalid)).not.toContain('\\u0000');

    expect(
      await hostile({ kind: 'ok', text: 'fine', model: 'm', usage: { inputTokens: 2, outputTokens: 3 }, requestId: '\u0000' }).summarize(
        request,
      ),
    ).toEqual({ kind: 'ok', text: 'fine', model: 'm', usage: { inputTokens: 2, outputTokens: 3 }, requestId: null });
    for (const [wait, expected] of [
      [1e300, MAX_RETRY_AFTER_MS],
      [Infinity, MAX_RETRY_AFTER_MS],
      [Number.NaN, null],
      [-5, null],
    ] as const) {
      expect(await hostile({ kind: 'deferred', reason: 'r\u0000', retryAfterMs: wait }).summarize(request)).toMatchObject({
        reason: 'r',
        retryAfterMs: expected === null ? null : expected,
      });
    }
    expect(await hostile({ kind: 'config', reason: 'bad\u0000key', status: 401 }).summarize(request)).toMatchObject({ reason: 'bad key' });
  });

  it('does not call the summarizer when no slot comes, and says why', async () => {
    const admission = createAdmission({ localLimit: 1, fleetLimit: 0, waitTimeoutMs: 50 });
    const held = await admission.acquire();
    const summarizer = scripted(() => ok('x'));
    const gateway = createGateway({ summarizer, admission, defaults: { maxChars: 100, deadlineMs: 100 } });
    expect(await gateway.summarize(request)).toEqual({ kind: 'deferred', reason: 'admission_timeout', retryAfterMs: null });
    expect(await gateway.summarize({ ...request, signal: AbortSignal.abort() })).toEqual({
      kind: 'deferred',
      reason: 'aborted_before_send',
      retryAfterMs: null,
    });
    expect(summarizer.seen).toHaveLength(0);
    held!.release();
    expect(await gateway.summarize(request)).toMatchObject({ kind: 'ok' });
    await admission.close();
  });

  it('logs outcomes without the summary text', async () => {
    const logger = recordingLogger();
    const gateway = createGateway({
      summarizer: scripted(() => ok('SECRET-SUMMARY-TEXT')),
      defaults: { maxChars: 100, deadlineMs: 100 },
      logger,
    });
    await gateway.summarize(request);
    expect(logger.entries).toHaveLength(1);
    expect(JSON.stringify(logger.entries)).not.toContain('SECRET-SUMMARY-TEXT');
    expect(logger.entries[0]).toMatchObject({ level: 'info', obj: { outcome: { kind: 'ok', chars: 19 } } });
  });

  it('accepts a pino logger as is', async () => {
    const lines: string[] = [];
    const logger = pino(
      { level: 'info' },
      {
        write: (line: string) => {
          lines.push(line);
        },
      },
    );
    const gateway = createGateway({
      summarizer: createOfflineSummarizer({ maxChars: 100 }),
      defaults: { maxChars: 100, deadlineMs: 100 },
      logger,
    });
    expect(await gateway.summarize(request)).toMatchObject({ kind: 'ok', model: OFFLINE_MODEL });
    expect(JSON.parse(lines[0]!)).toMatchObject({ msg: 'summary ok', model: OFFLINE_MODEL });
  });
});

describe('gateway with the Anthropic summarizer and a fleet limit', () => {
  let server: MessagesServer;
  beforeAll(async () => {
    server = await startMessagesServer();
  });
  afterAll(async () => {
    await server.close();
  });

  it('a caller abort during a slow call ends it as unknown and frees the fleet slot', async () => {
    server.setDefault(behaviours.hang());
    const admission = createAdmission({
      connectionString: databaseUrl(),
      localLimit: 1,
      fleetLimit: 1,
      waitTimeoutMs: 5_000,
      namespace: namespaceFor(NAMESPACE_BASE),
    });
    const gateway = createGateway({
      summarizer: createAnthropicSummarizer({ apiKey: server.apiKey, baseURL: server.url, model: 'm', maxChars: 6000, timeoutMs: 10_000 }),
      admission,
      defaults: { maxChars: 6000, deadlineMs: 10_000 },
    });
    const controller = new AbortController();
    const pending = gateway.summarize({ ...request, signal: controller.signal });
    await server.waitFor(() => server.inFlight === 1);
    controller.abort();
    expect(await pending).toMatchObject({ kind: 'unknown', reason: 'aborted_after_send' });

    server.setDefault(behaviours.echo());
    expect(await gateway.summarize(request)).toMatchObject({ kind: 'ok', model: 'anthropic/m' });
    expect(server.count).toBe(2);
    await admission.close();
  });
});

describe('gateway with a broken admission', () => {
  it('defers instead of throwing when admission throws', async () => {
    const summarizer = scripted(() => ok('x'));
    const gateway = createGateway({
      summarizer,
      admission: {
        acquire: async () => {
          throw new Error('lost');
        },
        close: async () => {},
      },
      defaults: { maxChars: 10, deadlineMs: 10 },
    });
    expect(await gateway.summarize(request)).toEqual({ kind: 'deferred', reason: 'admission_error:lost', retryAfterMs: null });
    expect(summarizer.seen).toHaveLength(0);
  });
});

describe('gateway: backoff of provider deferrals (real SDK, local Messages server)', () => {
  let server: MessagesServer;
  beforeAll(async () => {
    server = await startMessagesServer();
  });
  afterAll(async () => {
    await server.close();
  });

  const gatewayOn = () =>
    createGateway({
      summarizer: createAnthropicSummarizer({ apiKey: server.apiKey, baseURL: server.url, model: 'm', maxChars: 6000, timeoutMs: 10_000 }),
      defaults: { maxChars: 6000, deadlineMs: 10_000 },
    });
  const other: SummaryRequest = { ...request, items: [{ id: 'msg_2', text: 'Another reply, 17 items.' }] };
  const waitOf = (outcome: Outcome) => (outcome as { retryAfterMs: number }).retryAfterMs;
  const { firstMs } = DEFAULT_DEFERRAL_BACKOFF;

  it("retry-after: 0 waits at least a second, doubling (jittered) over the same material's deferrals in a row", async () => {
    const gateway = gatewayOn();
    server.setDefault(behaviours.rateLimited(0));
    const waits: number[] = [];
    for (let i = 0; i < 5; i++) waits.push(waitOf(await gateway.summarize(request)));
    expect(waits[0]).toBe(firstMs);
    // n-th deferral: between half and all of firstMs * 2^(n-1), never under firstMs.
    for (let n = 2; n <= 5; n++) {
      expect(waits[n - 1]).toBeGreaterThanOrEqual(Math.max(firstMs, (firstMs * 2 ** (n - 1)) / 2));
      expect(waits[n - 1]).toBeLessThanOrEqual(firstMs * 2 ** (n - 1));
    }
    // Other material has a streak of its own.
    expect(waitOf(await gateway.summarize(other))).toBe(firstMs);
    // An answer ends the streak.
    server.setDefault(behaviours.echo());
    expect(await gateway.summarize(request)).toMatchObject({ kind: 'ok' });
    server.setDefault(behaviours.rateLimited(0));
    expect(waitOf(await gateway.summarize(request))).toBe(firstMs);
    server.setDefault(behaviours.echo());
  });

  it('a retry-after date in the past (or a clock running ahead) is backed off too; a longer retry-after is kept', async () => {
    const gateway = gatewayOn();
    server.enqueue(behaviours.httpError(529, 'overloaded_error', { 'retry-after': new Date(Date.now() - 60_000).toUTCString() }));
    expect(await gateway.summarize(request)).toMatchObject({ kind: 'deferred', retryAfterMs: firstMs });
    server.enqueue(behaviours.rateLimited(7));
    expect(await gateway.summarize(request)).toMatchObject({ kind: 'deferred', retryAfterMs: 7000 });
    // No retry-after at all: the caller's own delay applies (compaction: retryDelays.deferMs).
    server.enqueue(behaviours.overloaded());
    expect(await gateway.summarize(request)).toMatchObject({ kind: 'deferred', retryAfterMs: null });
  });
});
