import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { compactConversation, SummarizerConfigError } from '../../src/conversation/compact.ts';
import { retryRange, RetryRefusedError } from '../../src/conversation/retry.ts';
import { attemptsOfConversationRead, summariesOfConversationRead } from '../../src/db/queries/summaries.ts';
import { addPairs, createConversation } from '../support/fixtures.ts';
import { gatewayFor } from '../support/gateway.ts';
import { behaviours } from '../support/messages-server.ts';
import { startChatServer } from '../support/chat-server.ts';
import { spawnSourcebound } from '../support/processes.ts';
import { UsageError } from '../../src/cli/common.ts';
import { retryCommand } from '../../src/cli/retry-command.ts';
import { loadSummarizerModule } from '../../src/cli/summarizer-module.ts';
import { loadConfig } from '../../src/support/config.ts';
import { silentLogger } from '../../src/support/logger.ts';
import { compactionSetup } from './setup.ts';

const { db, server, ctx } = await compactionSetup();
const chatServer = await startChatServer();
afterAll(() => chatServer.close());

const other = () => gatewayFor(server, { model: 'claude-other' });

/** A conversation whose range 0-9 failed for good under anthropic/claude-test (two truncated answers). */
async function failedRange(): Promise<string> {
  const c = await createConversation(db.pool);
  await addPairs(db.pool, c, 30);
  server.enqueue(behaviours.maxTokens(), behaviours.maxTokens());
  await compactConversation(ctx(), c);
  await compactConversation(ctx(), c);
  const [record] = await summariesOfConversationRead(db.pool, c);
  expect(record).toMatchObject({ status: 'failed', attemptsSpent: 2, model: 'anthropic/claude-test' });
  server.reset();
  return c;
}

async function refusal(work: Promise<unknown>): Promise<string> {
  const error = await work.then(
    () => null,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(RetryRefusedError);
  return (error as Error).message;
}

describe('retryRange', () => {
  it('refuses the identity that failed (no third attempt, no call) and completes under another model', async () => {
    const c = await failedRange();
    expect(await refusal(retryRange(ctx(), c, 'tenant-a', 0))).toMatch(
      /^range 0-9 already failed for good under anthropic\/claude-test \(record [0-9a-f-]+\): a third attempt of the same identity is never made\. Retry with another model/,
    );
    expect(server.count).toBe(0);

    const report = await retryRange(ctx({ summarizer: other() }), c, 'tenant-a', 0);
    expect(report).toMatchObject({
      result: 'completed',
      model: 'anthropic/claude-other',
      calls: 1,
      failed: [{ model: 'anthropic/claude-test', failureReason: 'invalid: stop_reason:max_tokens' }],
    });
    expect(server.count).toBe(1);
    const records = await summariesOfConversationRead(db.pool, c);
    expect(records.map((r) => [r.model, r.status, r.attemptsSpent]).sort()).toEqual([
      ['anthropic/claude-other', 'completed', 1],
      ['anthropic/claude-test', 'failed', 2],
    ]);

    // Completed now: a retry under any model is refused.
    expect(await refusal(retryRange(ctx({ summarizer: gatewayFor(server, { model: 'claude-third' }) }), c, 'tenant-a', 0))).toMatch(
      /^range 0-9 already has a completed summary \(record [0-9a-f-]+, anthropic\/claude-other\): nothing to retry$/,
    );
    expect(server.count).toBe(1);
  });

  it('refuses a range that did not fail for good, a range that is not one, and a conversation of another scope', async () => {
    const c = await createConversation(db.pool);
    await addPairs(db.pool, c, 30);
    expect(await refusal(retryRange(ctx({ summarizer: other() }), c, 'tenant-a', 0))).toMatch(
      /^range 0-9 has not failed for good: nothing to retry/,
    );
    expect(await refusal(retryRange(ctx({ summarizer: other() }), c, 'tenant-a', 5))).toMatch(/a range starts at a multiple of 10, got 5/);
    await expect(retryRange(ctx({ summarizer: other() }), c, 'tenant-b', 0)).rejects.toThrow(/not found/i);
    expect(server.count).toBe(0);
  });

  it('makes both attempts of the new identity when the first is spent; a third retry under it is refused', async () => {
    const c = await failedRange();
    server.enqueue(behaviours.toolUse(), behaviours.refusal());
    const report = await retryRange(ctx({ summarizer: other() }), c, 'tenant-a', 0);
    expect(report).toMatchObject({ result: 'failed', calls: 2, reason: 'stop_reason:refusal' });
    expect(await refusal(retryRange(ctx({ summarizer: other() }), c, 'tenant-a', 0))).toMatch(
      /already failed for good under anthropic\/claude-other/,
    );
    expect(server.count).toBe(2);

    server.enqueue(behaviours.maxTokens());
    const third = await retryRange(ctx({ summarizer: gatewayFor(server, { model: 'claude-third' }) }), c, 'tenant-a', 0);
    expect(third).toMatchObject({ result: 'completed', calls: 2 });
    expect(third.failed.map((f) => f.model).sort()).toEqual(['anthropic/claude-other', 'anthropic/claude-test']);
  });

  it('a deferral ends it with no attempt spent; run again, it goes on', async () => {
    const c = await failedRange();
    server.enqueue(behaviours.rateLimited(0));
    const deferred = await retryRange(ctx({ summarizer: other() }), c, 'tenant-a', 0);
    expect(deferred).toMatchObject({ result: 'deferred', calls: 1, reason: 'http_429:rate_limit_error: rate limited' });
    const waiting = (await summariesOfConversationRead(db.pool, c)).find((r) => r.model === 'anthropic/claude-other')!;
    expect(waiting).toMatchObject({ status: 'pending', attemptsSpent: 0 });
    await db.pool.query('update sourcebound.conversation_summaries set not_before = now() where id = $1', [waiting.id]);
    expect(await retryRange(ctx({ summarizer: other() }), c, 'tenant-a', 0)).toMatchObject({ result: 'completed', calls: 1 });
  });

  it('a configuration error is loud and spends nothing', async () => {
    const c = await failedRange();
    server.enqueue(behaviours.httpError(401, 'authentication_error'));
    await expect(retryRange(ctx({ summarizer: other() }), c, 'tenant-a', 0)).rejects.toBeInstanceOf(SummarizerConfigError);
    const attempts = await attemptsOfConversationRead(db.pool, c);
    expect(attempts.filter((a) => a.outcome === 'config').map((a) => a.spent)).toEqual([false]);
  });
});

describe('sourcebound retry (real processes)', () => {
  const env = () => ({
    DATABASE_URL: db.url,
    SOURCEBOUND_SUMMARIZER: 'openai',
    OPENAI_BASE_URL: chatServer.url,
    OPENAI_API_KEY: chatServer.apiKey!,
    SOURCEBOUND_MODEL: 'llama-test:8b',
    SOURCEBOUND_FLEET_CONCURRENCY: '0',
  });

  it('retries under the OpenAI-compatible model configuration chooses, then refuses to go again', async () => {
    chatServer.reset();
    const c = await failedRange();
    const cli = spawnSourcebound(['retry', c, '--scope', 'tenant-a', '--from-pair', '0'], env());
    expect(await cli.exited).toBe(0);
    expect(cli.logs.map((l) => l.msg).join('\n')).toMatch(
      new RegExp(
        `^range 0-9 of ${c} under openai-compatible/llama-test:8b: completed \\(record [0-9a-f-]+; it had failed for good under anthropic/claude-test\\); 1 model call\\(s\\)$`,
        'm',
      ),
    );
    expect(chatServer.count).toBe(1);

    const again = spawnSourcebound(['retry', c, '--scope', 'tenant-a', '--from-pair', '0'], env());
    expect(await again.exited).toBe(1);
    expect(again.stderr).toMatch(/^sourcebound retry: range 0-9 already has a completed summary/);
    expect(chatServer.count).toBe(1);
  });

  it('takes a summarizer module (--summarizer) and says what is wrong with a module that gives none', async () => {
    chatServer.reset();
    const c = await failedRange();
    const dir = mkdtempSync(join(tmpdir(), 'sourcebound-retry-'));
    const index = pathToFileURL(join(process.cwd(), 'src/index.ts')).href;
    writeFileSync(
      join(dir, 'mine.mjs'),
      [
        `import { prepareSummary, outcomeFromAnswer, outcomeFromError } from '${index}';`,
        'export default () => ({',
        "  model: 'custom/echo',",
        '  async summarize(request) {',
        "    const call = prepareSummary(request, { model: 'custom/echo' });",
        '    if (!call.send) return call.outcome;',
        "    return outcomeFromAnswer({ model: 'custom/echo', maxChars: call.maxChars, text: request.items.map((i) => i.text).join(' '), finishReason: 'stop' });",
        '  },',
        '});',
      ].join('\n'),
    );
    writeFileSync(join(dir, 'none.mjs'), 'export const nothing = 1;\n');
    writeFileSync(join(dir, 'reserved.mjs'), "export default { model: 'sourcebound/extractive@9', summarize: async () => null };\n");

    const none = spawnSourcebound(['retry', c, '--scope', 'tenant-a', '--from-pair', '0', '--summarizer', join(dir, 'none.mjs')], env());
    expect(await none.exited).toBe(1);
    expect(none.stderr).toMatch(/^sourcebound retry: the summarizer module .*none\.mjs exports no summarizer: export default/);

    const mine = spawnSourcebound(
      ['retry', c, '--scope', 'tenant-a', '--from-pair', '0', '--summarizer', join(dir, 'mine.mjs'), '--json'],
      env(),
    );
    expect(await mine.exited).toBe(0);
    expect(mine.logs.find((l) => 'result' in l)).toMatchObject({ result: 'completed', model: 'custom/echo', calls: 1 });
    expect(chatServer.count).toBe(0);

    // In this process: what the loader refuses, and what it hands a factory.
    const context = { config: loadConfig({}), logger: silentLogger };
    await expect(loadSummarizerModule(join(dir, 'reserved.mjs'), context)).rejects.toThrow(
      /names itself sourcebound\/extractive@9: identities under sourcebound\/ are the offline summarizer's/,
    );
    await expect(loadSummarizerModule(join(dir, 'missing.mjs'), context)).rejects.toThrow(
      /^cannot load the summarizer module .*missing\.mjs: Error ERR_MODULE_NOT_FOUND: Cannot find module/,
    );
    expect((await loadSummarizerModule(join(dir, 'mine.mjs'), context)).model).toBe('custom/echo');
  });

  it("--from-pair must be a range's first pair", async () => {
    await expect(retryCommand.run(['00000000-0000-0000-0000-000000000001', '--scope', 's', '--from-pair', '15'])).rejects.toThrow(
      /^--from-pair must be a multiple of 10 \(a range's first pair\), got 15$/,
    );
    await expect(retryCommand.run(['00000000-0000-0000-0000-000000000001', '--scope', 's'])).rejects.toBeInstanceOf(UsageError);
  });
});
