import { afterAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/support/config.ts';
import { openDatabase } from '../../src/db/database.ts';
import { summariesOfConversationRead } from '../../src/db/queries/summaries.ts';
import { silentLogger } from '../../src/support/logger.ts';
import { createWorkerMetrics, reasonLabel } from '../../src/worker/metrics.ts';
import { startWorker } from '../../src/worker/supervisor.ts';
import { startWorkerHttp } from '../../src/worker/http.ts';
import { NOT_STARTED, type WorkerHealth } from '../../src/worker/health.ts';
import { createTestDatabase } from '../support/db.ts';
import { addPairs, createConversation } from '../support/fixtures.ts';
import { behaviours, startMessagesServer } from '../support/messages-server.ts';
import { until } from '../support/processes.ts';

/**
 * The worker's opt-in HTTP port: /metrics is scraped as Prometheus would, and
 * its counters must move with what the worker does (the real SDK against the
 * local Messages server, so outcomes and reasons are the gateway's own).
 */
const db = await createTestDatabase();
const server = await startMessagesServer();
afterAll(() => server.close());

/** The value of one sample in Prometheus text, or undefined when the series is absent. */
function sample(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  const wanted = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  for (const line of text.split('\n')) {
    if (line.startsWith('#') || !line.startsWith(name)) continue;
    const match = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!match || match[1] !== name) continue;
    const have = (match[2] ?? '').split(',').filter(Boolean);
    if (wanted.every((w) => have.includes(w)) && have.length === wanted.length) return Number(match[3]);
  }
  return undefined;
}

describe('reason labels', () => {
  it("keep a reason's names and leave out its prose, so a count or a message never makes a new series", () => {
    expect(reasonLabel('stop_reason:max_tokens')).toBe('stop_reason:max_tokens');
    expect(reasonLabel('too_large:http_413:request_too_large')).toBe('too_large:http_413');
    expect(reasonLabel('http_400:invalid_request_error: prompt is too long: 212345 tokens > 200000 maximum')).toBe(
      'http_400:invalid_request_error',
    );
    expect(reasonLabel('ungrounded: 3 fact(s) not in the material: number:0.9%')).toBe('ungrounded');
    expect(reasonLabel('summarizer_threw:socket hang up')).toBe('summarizer_threw');
    expect(reasonLabel('empty_text')).toBe('empty_text');
  });
});

describe('worker /metrics and /healthz', () => {
  it('counters move as ranges complete and fail; health is ok; queue gauges read from the database', async () => {
    server.reset();
    server.setDefault(behaviours.echo());
    const config = loadConfig({
      DATABASE_URL: db.url,
      ANTHROPIC_API_KEY: server.apiKey,
      ANTHROPIC_BASE_URL: server.url,
      SOURCEBOUND_MODEL: 'claude-test',
      SOURCEBOUND_FLEET_CONCURRENCY: '0',
      SOURCEBOUND_POLL_INTERVAL_MS: '200',
      SOURCEBOUND_METRICS_PORT: '0',
      LOG_LEVEL: 'silent',
    });
    const database = await openDatabase(config, silentLogger, 8);
    const handle = await startWorker({ config, logger: silentLogger, database, skipMigrations: true });
    const base = `http://127.0.0.1:${handle.httpPort}`;
    const scrape = async () => {
      const res = await fetch(`${base}/metrics`);
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toMatch(/^text\/plain/);
      return res.text();
    };
    try {
      const health = await fetch(`${base}/healthz`);
      expect(health.status).toBe(200);
      const healthBody = (await health.json()) as { beatOkAt: number | null };
      expect(healthBody).toMatchObject({ status: 'ok', running: true, restarts: 0 });
      // Its heartbeat was recorded at start, before any job.
      expect(healthBody.beatOkAt).toBeGreaterThan(Date.now() - 30_000);
      expect((await fetch(`${base}/nothing`)).status).toBe(404);

      const before = await scrape();
      expect(sample(before, 'sourcebound_ranges_total', { result: 'completed' })).toBeUndefined();
      expect(sample(before, 'sourcebound_worker_runner_up')).toBe(1);
      expect(sample(before, 'sourcebound_queue_scrape_ok')).toBe(1);
      expect(sample(before, 'sourcebound_queue_depth')).toBe(0);

      // One range completes.
      const good = await createConversation(db.pool);
      await addPairs(db.pool, good, 30);
      await until(
        async () => (await summariesOfConversationRead(db.pool, good)).some((r) => r.status === 'completed'),
        30_000,
        'range completed',
      );
      // One range fails for good: two truncated answers.
      server.enqueue(behaviours.maxTokens(), behaviours.maxTokens());
      const bad = await createConversation(db.pool);
      await addPairs(db.pool, bad, 30);
      await until(
        async () => (await summariesOfConversationRead(db.pool, bad)).some((r) => r.status === 'failed'),
        30_000,
        'range failed for good',
      );
      await until(
        async () => sample(await scrape(), 'sourcebound_ranges_total', { result: 'failed' }) === 1,
        10_000,
        'failed range counted',
      );

      const after = await scrape();
      expect(sample(after, 'sourcebound_ranges_total', { result: 'completed' })).toBe(1);
      expect(sample(after, 'sourcebound_ranges_total', { result: 'attempt_spent' })).toBe(1);
      expect(sample(after, 'sourcebound_ranges_total', { result: 'failed' })).toBe(1);
      expect(sample(after, 'sourcebound_summarizer_outcomes_total', { outcome: 'ok', reason: '' })).toBe(1);
      expect(sample(after, 'sourcebound_summarizer_outcomes_total', { outcome: 'invalid', reason: 'stop_reason:max_tokens' })).toBe(2);
      expect(sample(after, 'sourcebound_summarizer_duration_seconds_count', { outcome: 'ok' })).toBe(1);
      expect(sample(after, 'sourcebound_summarizer_duration_seconds_count', { outcome: 'invalid' })).toBe(2);
      expect(sample(after, 'sourcebound_admission_wait_seconds_count', { result: 'admitted' })).toBe(3);
      expect(sample(after, 'sourcebound_jobs_total', { task: 'compact_conversation', outcome: 'success' })).toBeGreaterThanOrEqual(3);
      expect(sample(after, 'sourcebound_worker_restarts_total')).toBeUndefined();
      expect(sample(after, 'sourcebound_database_last_ok_timestamp_seconds')).toBeGreaterThan(Date.now() / 1000 - 30);
    } finally {
      await handle.stop();
      await database.close();
    }
  });

  it("/healthz is 503 once the heartbeat is older than the fleet's patience, though PostgreSQL answers", async () => {
    let health: WorkerHealth = { ...NOT_STARTED, running: true, databaseOkAt: Date.now(), beatOkAt: Date.now() };
    const http = await startWorkerHttp({
      host: '127.0.0.1',
      port: 0,
      registry: createWorkerMetrics({ pool: db.pool, defaultMetrics: false }).registry,
      health: () => health,
      probeIntervalMs: 1000,
      beatStaleAfterMs: 20_000,
    });
    try {
      const get = async () => {
        const r = await fetch(`http://127.0.0.1:${http.port}/healthz`);
        return { status: r.status, body: (await r.json()) as { problem: string | null } };
      };
      expect((await get()).status).toBe(200);
      health = { ...health, databaseOkAt: Date.now(), beatOkAt: Date.now() - 21_000 };
      const stale = await get();
      expect(stale.status).toBe(503);
      expect(stale.body.problem).toMatch(
        /^the heartbeat has not been recorded for 2\d{4} ms: the other workers take this worker's jobs and claims over$/,
      );
      health = { ...health, beatOkAt: null };
      expect((await get()).status).toBe(503);
    } finally {
      await http.close();
    }
  });

  it("queue gauges: runnable compaction jobs and the oldest one's wait, from the database at scrape time", async () => {
    const metrics = createWorkerMetrics({ pool: db.pool, defaultMetrics: false });
    await db.pool.query('delete from graphile_worker._private_jobs');
    for (const [key, ago] of [
      ['a', 90],
      ['b', 5],
    ] as const) {
      await db.pool.query(
        `select graphile_worker.add_job('compact_conversation', json_build_object('conversationId', gen_random_uuid()), job_key := $1, run_at := now() - make_interval(secs => $2))`,
        [`metrics-test-${key}`, ago],
      );
    }
    // Not runnable yet: not counted.
    await db.pool.query(
      `select graphile_worker.add_job('compact_conversation', json_build_object('conversationId', gen_random_uuid()), run_at := now() + interval '1 hour')`,
    );
    const text = await metrics.registry.metrics();
    expect(sample(text, 'sourcebound_queue_depth')).toBe(2);
    expect(sample(text, 'sourcebound_queue_oldest_job_age_seconds')).toBeGreaterThanOrEqual(90);
    expect(sample(text, 'sourcebound_queue_oldest_job_age_seconds')).toBeLessThan(120);
    await db.pool.query('delete from graphile_worker._private_jobs');
  });
});
