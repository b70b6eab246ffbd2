import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../src/config.ts';

describe('configuration', () => {
  it('has the documented defaults and is frozen', () => {
    const config = loadConfig({});
    expect(config).toMatchObject({
      databaseUrl: undefined, embeddedPort: 54329, summaryMaxChars: 6000, modelTimeoutMs: 120_000, modelConcurrency: 4,
      fleetConcurrency: 8, leaseMs: 300_000, workerConcurrency: 4, pollIntervalMs: 2000, logLevel: 'info',
    });
    expect(config.dataDir).toMatch(/\.sourcebound\/pgdata$/);
    expect(config.anthropic).toEqual({ apiKey: undefined, baseURL: undefined, model: 'claude-haiku-4-5' });
    expect(Object.isFrozen(config)).toBe(true);
  });

  it('treats empty variables as unset and parses numbers and flags', () => {
    const config = loadConfig({ DATABASE_URL: '', SOURCEBOUND_LEASE_MS: '5000', SOURCEBOUND_PRETTY_LOGS: 'false', ANTHROPIC_API_KEY: 'k' });
    expect(config.databaseUrl).toBeUndefined();
    expect(config.leaseMs).toBe(5000);
    expect(config.prettyLogs).toBe(false);
    expect(config.anthropic.apiKey).toBe('k');
  });

  it('fails fast naming every bad variable', () => {
    let error: unknown;
    try {
      loadConfig({ DATABASE_URL: 'not a url', SOURCEBOUND_WORKER_CONCURRENCY: '0', LOG_LEVEL: 'loud' });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ConfigError);
    const message = (error as Error).message;
    expect(message).toMatch(/DATABASE_URL/);
    expect(message).toMatch(/SOURCEBOUND_WORKER_CONCURRENCY/);
    expect(message).toMatch(/LOG_LEVEL/);
  });
});
