import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAdmission } from '../../src/gateway/admission.ts';
import { createAnthropicSummarizer } from '../../src/gateway/anthropic.ts';
import { createGateway } from '../../src/gateway/gateway.ts';
import type { GatewayLogger } from '../../src/gateway/logger.ts';
import { createOfflineSummarizer, OFFLINE_MODEL } from '../../src/gateway/offline.ts';
import type { Outcome, Summarizer, SummaryRequest } from '../../src/gateway/types.ts';
import { behaviours, startMessagesServer, type MessagesServer } from '../support/messages-server.ts';
import { databaseUrl, namespaceFor } from './database.ts';

/** This file's advisory-lock namespaces (admission.test.ts uses 0x7E5A0100 + n). */
const NAMESPACE_BASE = 0x7e5a0200;

const request: SummaryRequest = { promptVersion: 'conversation-compaction@4', items: [{ id: 'msg_1', text: 'The total is 42.' }] };

/** A summarizer that records what it was asked and answers with `answer`. */
function scripted(answer: (r: SummaryRequest) => Outcome | Promise<Outcome>): Summarizer & { seen: SummaryRequest[] } {
  const seen: SummaryRequest[] = [];
  return { model: 'test/scripted@1', seen, summarize: async (r) => { seen.push(r); return answer(r); } };
}

const ok = (text: string): Outcome => ({ kind: 'ok', text, model: 'test/scripted@1', usage: null, requestId: null });

function recordingLogger(): GatewayLogger & { entries: { level: string; obj: object; msg: string }[] } {
  const entries: { level: string; obj: object; msg: string }[] = [];
  return {
    entries,
    info(obj, msg) { entries.push({ level: 'info', obj, msg }); },
    warn(obj, msg) { entries.push({ level: 'warn', obj, msg }); },
    error(obj, msg) { entries.push({ level: 'error', obj, msg }); },
  };
}

describe('gateway', () => {
  it('applies the defaults a request leaves out and keeps the ones it gives', async () => {
    const summarizer = scripted(() => ok('fine'));
    const gateway = createGateway({ summarizer, defaults: { maxChars: 123, deadlineMs: 4567 } });
    await gateway.summarize(request);
    await gateway.summarize({ ...request, maxChars: 10, deadlineMs: 20 });
    expect(summarizer.seen.map((r) => [r.maxChars, r.deadlineMs])).toEqual([[123, 4567], [10, 20]]);
    expect(gateway.model).toBe('test/scripted@1');
  });

  it('turns a throwing summarizer into unknown with the message, and still releases the slot', async () => {
    const admission = createAdmission({ localLimit: 1, fleetLimit: 0, waitTimeoutMs: 100 });
    const logger = recordingLogger();
    const gateway = createGateway({ summarizer: scripted(() => { throw new Error('boom'); }), admission, defaults: { maxChars: 100, deadlineMs: 100 }, logger });
    expect(await gateway.summarize(request)).toEqual({ kind: 'unknown', reason: 'summarizer_threw:boom', requestId: null });
    // With a limit of one, a leaked slot would make this second call wait out its timeout.
    expect(await gateway.summarize(request)).toMatchObject({ kind: 'unknown' });
    expect(logger.entries.some((e) => e.level === 'error' && e.msg.includes('threw'))).toBe(true);
    await admission.close();
  });

  it('never lets a contract-breaking ok through: over the cap or empty becomes invalid', async () => {
    const gateway = (text: string) => createGateway({ summarizer: scripted(() => ok(text)), defaults: { maxChars: 5, deadlineMs: 100 } });
    expect(await gateway('123456').summarize(request)).toMatchObject({ kind: 'invalid', reason: 'contract:too_long:6>5', model: 'test/scripted@1' });
    expect(await gateway('  ').summarize(request)).toMatchObject({ kind: 'invalid', reason: 'contract:empty_text' });
    expect(await gateway('12345').summarize(request)).toMatchObject({ kind: 'ok', text: '12345' });
  });

  it('passes non-ok outcomes through unchanged', async () => {
    const deferred: Outcome = { kind: 'deferred', reason: 'http_529:overloaded_error', retryAfterMs: 100 };
    const gateway = createGateway({ summarizer: scripted(() => deferred), defaults: { maxChars: 5, deadlineMs: 100 } });
    expect(await gateway.summarize(request)).toEqual(deferred);
  });

  it('does not call the summarizer when no slot comes, and says why', async () => {
    const admission = createAdmission({ localLimit: 1, fleetLimit: 0, waitTimeoutMs: 50 });
    const held = await admission.acquire();
    const summarizer = scripted(() => ok('x'));
    const gateway = createGateway({ summarizer, admission, defaults: { maxChars: 100, deadlineMs: 100 } });
    expect(await gateway.summarize(request)).toEqual({ kind: 'deferred', reason: 'admission_timeout', retryAfterMs: null });
    expect(await gateway.summarize({ ...request, signal: AbortSignal.abort() })).toEqual({ kind: 'deferred', reason: 'aborted_before_send', retryAfterMs: null });
    expect(summarizer.seen).toHaveLength(0);
    held!.release();
    expect(await gateway.summarize(request)).toMatchObject({ kind: 'ok' });
    await admission.close();
  });

  it('logs outcomes without the summary text', async () => {
    const logger = recordingLogger();
    const gateway = createGateway({ summarizer: scripted(() => ok('SECRET-SUMMARY-TEXT')), defaults: { maxChars: 100, deadlineMs: 100 }, logger });
    await gateway.summarize(request);
    expect(logger.entries).toHaveLength(1);
    expect(JSON.stringify(logger.entries)).not.toContain('SECRET-SUMMARY-TEXT');
    expect(logger.entries[0]).toMatchObject({ level: 'info', obj: { outcome: { kind: 'ok', chars: 19 } } });
  });

  it('accepts a pino logger as is', async () => {
    const lines: string[] = [];
    const logger = pino({ level: 'info' }, { write: (line: string) => { lines.push(line); } });
    const gateway = createGateway({ summarizer: createOfflineSummarizer({ maxChars: 100 }), defaults: { maxChars: 100, deadlineMs: 100 }, logger });
    expect(await gateway.summarize(request)).toMatchObject({ kind: 'ok', model: OFFLINE_MODEL });
    expect(JSON.parse(lines[0]!)).toMatchObject({ msg: 'summary ok', model: OFFLINE_MODEL });
  });
});

describe('gateway with the Anthropic summarizer and a fleet limit', () => {
  let server: MessagesServer;
  beforeAll(async () => { server = await startMessagesServer(); });
  afterAll(async () => { await server.close(); });

  it('a caller abort during a slow call ends it as unknown and frees the fleet slot', async () => {
    server.setDefault(behaviours.hang());
    const admission = createAdmission({ connectionString: databaseUrl(), localLimit: 1, fleetLimit: 1, waitTimeoutMs: 5_000, namespace: namespaceFor(NAMESPACE_BASE) });
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
      admission: { acquire: async () => { throw new Error('lost'); }, close: async () => {} },
      defaults: { maxChars: 10, deadlineMs: 10 },
    });
    expect(await gateway.summarize(request)).toEqual({ kind: 'deferred', reason: 'admission_error:lost', retryAfterMs: null });
    expect(summarizer.seen).toHaveLength(0);
  });
});
