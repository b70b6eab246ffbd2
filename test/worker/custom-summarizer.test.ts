import { createServer, type AddressInfo } from 'node:net';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import pino from 'pino';
import { Gauge } from 'prom-client';
import { afterAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/support/config.ts';
import { openDatabase } from '../../src/db/database.ts';
import { attemptsOfConversationRead, summariesOfConversationRead } from '../../src/db/queries/summaries.ts';
import { createFleetModels, workerApplicationName } from '../../src/gateway/fleet-models.ts';
import { createOfflineSummarizer, OFFLINE_MODEL } from '../../src/gateway/offline.ts';
import { prepareSummary, outcomeFromAnswer, type Summarizer } from '../../src/gateway/index.ts';
import { silentLogger } from '../../src/support/logger.ts';
import { startWorker } from '../../src/worker/supervisor.ts';
import { createTestDatabase } from '../support/db.ts';
import { addPairs, createConversation } from '../support/fixtures.ts';
import { startChatServer } from '../support/chat-server.ts';
import { spawnSourcebound, until } from '../support/processes.ts';

const db = await createTestDatabase();
const chatServer = await startChatServer();
afterAll(() => chatServer.close());

function recordingLogger() {
  const lines: { level: number; msg: string; [k: string]: unknown }[] = [];
  const logger = pino(
    { level: 'info' },
    {
      write: (line: string) => {
        lines.push(JSON.parse(line) as never);
      },
    },
  );
  return { logger, lines };
}

async function withWorker<T>(
  env: Record<string, string>,
  summarizer: Summarizer | undefined,
  work: (h: Awaited<ReturnType<typeof startWorker>>) => Promise<T>,
  logger = silentLogger,
): Promise<T> {
  const config = loadConfig({ DATABASE_URL: db.url, SOURCEBOUND_POLL_INTERVAL_MS: '200', SOURCEBOUND_FLEET_CONCURRENCY: '0', ...env });
  const database = await openDatabase(config, logger, 8);
  const handle = await startWorker({ config, logger, database, summarizer, skipMigrations: true });
  try {
    return await work(handle);
  } finally {
    await handle.stop();
    await database.close();
  }
}

/** Echoes the material's first words: a custom summarizer that calls nothing. */
function localSummarizer(model: string, onCall?: () => Promise<void>): Summarizer {
  return {
    model,
    async summarize(request) {
      const call = prepareSummary(request, { model });
      if (!call.send) return call.outcome;
      await onCall?.();
      return outcomeFromAnswer({ model, maxChars: call.maxChars, text: request.items.map((i) => i.text).join(' '), finishReason: 'stop' });
    },
  };
}

async function closedPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve));
  const { port } = s.address() as AddressInfo;
  await new Promise<void>((resolve) => s.close(() => resolve()));
  return port;
}

describe('startWorker({ summarizer }) keeps the guarantees of a built-in summarizer', () => {
  it('a refused connection thrown by it defers the range: no attempt spent, not `unknown`', async () => {
    const port = await closedPort();
    const dead: Summarizer = {
      model: 'custom/dead-endpoint',
      async summarize() {
        await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, { method: 'POST' });
        throw new Error('unreachable');
      },
    };
    await withWorker({}, dead, async () => {
      const c = await createConversation(db.pool);
      await addPairs(db.pool, c, 30);
      await until(async () => (await attemptsOfConversationRead(db.pool, c)).some((a) => a.outcome !== null), 30_000, 'a settled attempt');
      const [attempt] = await attemptsOfConversationRead(db.pool, c);
      expect(attempt).toMatchObject({ outcome: 'deferred', spent: false, reason: 'connect_failed:ECONNREFUSED' });
      const [record] = await summariesOfConversationRead(db.pool, c);
      expect(record).toMatchObject({ status: 'pending', attemptsSpent: 0, model: 'custom/dead-endpoint' });
    });
  });

  it('its calls go through admission: SOURCEBOUND_MODEL_CONCURRENCY=1 holds with four jobs at once', async () => {
    let inFlight = 0;
    let maxInFlight = 0;
    let calls = 0;
    // Each call stays open until a second call joins it or 600 ms pass: without admission, calls overlap.
    const waiting: (() => void)[] = [];
    const summarizer = localSummarizer('custom/admitted', async () => {
      calls++;
      inFlight++;
      maxInFlight = Math.max(maxInFlight, inFlight);
      for (const wake of waiting.splice(0)) wake();
      await new Promise<void>((resolve) => {
        waiting.push(resolve);
        setTimeout(resolve, 600);
      });
      inFlight--;
    });
    const conversations = await Promise.all([0, 1, 2].map(() => createConversation(db.pool)));
    for (const c of conversations) await addPairs(db.pool, c, 30);
    await withWorker({ SOURCEBOUND_MODEL_CONCURRENCY: '1', SOURCEBOUND_WORKER_CONCURRENCY: '4' }, summarizer, async () => {
      await until(async () => calls >= 3, 30_000, 'three calls');
    });
    expect(maxInFlight).toBe(1);
  });
});

describe('workers with different model identities on one database', () => {
  it('the later one warns at start and counts them on sourcebound_fleet_model_identities', async () => {
    await withWorker({}, createOfflineSummarizer({ maxChars: 6000 }), async (first) => {
      expect(await first.metrics.fleetModelIdentities.get()).toMatchObject({ values: [{ value: 1 }] });
      const { logger, lines } = recordingLogger();
      await withWorker(
        {},
        localSummarizer('custom/other-model'),
        async (second) => {
          const warning = lines.find(
            (l) => l.level === 40 && l.msg.startsWith('workers with 2 different model identities share this database'),
          );
          expect(warning).toMatchObject({ model: 'custom/other-model', otherModels: [OFFLINE_MODEL] });
          expect(await second.metrics.fleetModelIdentities.get()).toMatchObject({ values: [{ value: 2 }] });
        },
        logger,
      );
    });
  });

  it('a running worker sees another identity arrive and leave, saying each change once', async () => {
    const { logger, lines } = recordingLogger();
    const gauge = new Gauge({ name: 'test_fleet_model_identities', help: 'test', registers: [] });
    const models = createFleetModels({ pool: db.pool, model: 'custom/mine', logger, gauge });
    expect(await models.check()).toEqual({ own: 'custom/mine', others: [] });
    const { Client } = (await import('pg')).default;
    const other = new Client({ connectionString: db.url, application_name: workerApplicationName('openai-compatible/qwen3:8b') });
    await other.connect();
    try {
      expect(await models.check()).toEqual({ own: 'custom/mine', others: ['openai-compatible/qwen3:8b'] });
      await models.check();
      expect(lines.filter((l) => l.level === 40)).toHaveLength(1);
      expect((await gauge.get()).values[0]!.value).toBe(2);
    } finally {
      await other.end();
    }
    await until(async () => (await models.check()).others.length === 0, 10_000, 'the other session gone');
    expect(lines.at(-1)).toMatchObject({
      level: 30,
      msg: "every worker on this database now summarizes with this worker's model identity",
    });
    expect((await gauge.get()).values[0]!.value).toBe(1);
  });

  it("an identity too long or not ASCII fits PostgreSQL's 63 bytes and still differs from its neighbours", () => {
    const long = `openai-compatible/${'x'.repeat(80)}`;
    expect(Buffer.byteLength(workerApplicationName(long))).toBe(63);
    expect(workerApplicationName(`${long}-a`)).not.toBe(workerApplicationName(`${long}-b`));
    expect(workerApplicationName('custom/modèle')).toMatch(/^sourcebound-worker m=[0-9a-f]{8} custom\/mod\?le$/);
  });
});

describe('sourcebound worker --summarizer (a real process)', () => {
  it("summarizes with the module's summarizer behind admission and records its identity", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sourcebound-worker-'));
    const index = pathToFileURL(join(process.cwd(), 'src/index.ts')).href;
    writeFileSync(
      join(dir, 'mine.mjs'),
      [
        `import { createOpenAISummarizer } from '${index}';`,
        '// A factory: it gets the validated configuration and the logger.',
        'export function createSummarizer({ config, logger }) {',
        "  const inner = createOpenAISummarizer({ apiKey: process.env.TEST_KEY, baseURL: process.env.TEST_URL, model: 'wrapped', maxChars: config.summaryMaxChars, timeoutMs: 10000, logger });",
        "  return { model: 'custom/wrapped-openai', summarize: (request) => inner.summarize(request) };",
        '}',
      ].join('\n'),
    );
    const w = spawnSourcebound(['worker', '--summarizer', join(dir, 'mine.mjs')], {
      DATABASE_URL: db.url,
      SOURCEBOUND_POLL_INTERVAL_MS: '200',
      SOURCEBOUND_FLEET_CONCURRENCY: '1',
      TEST_URL: chatServer.url,
      TEST_KEY: chatServer.apiKey!,
    });
    try {
      await w.waitForLog((l) => l.msg === 'worker started', 60_000);
      expect(w.logs.find((l) => l.msg === 'summarizing with a custom summarizer')).toMatchObject({ model: 'custom/wrapped-openai' });
      const c = await createConversation(db.pool);
      await addPairs(db.pool, c, 30);
      await until(
        async () => (await summariesOfConversationRead(db.pool, c)).some((r) => r.status === 'completed'),
        30_000,
        'range 0-9 completed',
      );
      const [record] = await summariesOfConversationRead(db.pool, c);
      expect(record).toMatchObject({ model: 'custom/wrapped-openai', status: 'completed' });
      expect(chatServer.count).toBe(1);
    } finally {
      w.child.kill('SIGTERM');
      expect(await w.exited).toBe(0);
    }
  }, 90_000);
});
