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

  it('allows a lower summary cap but refuses one above the contract\'s 6,000 characters', () => {
    expect(loadConfig({ SOURCEBOUND_SUMMARY_MAX_CHARS: '2500' }).summaryMaxChars).toBe(2500);
    expect(loadConfig({ SOURCEBOUND_SUMMARY_MAX_CHARS: '6000' }).summaryMaxChars).toBe(6000);
    expect(() => loadConfig({ SOURCEBOUND_SUMMARY_MAX_CHARS: '6001' })).toThrow(ConfigError);
    expect(() => loadConfig({ SOURCEBOUND_SUMMARY_MAX_CHARS: '20000' })).toThrow(/SOURCEBOUND_SUMMARY_MAX_CHARS: at most 6000: the 6,000-character cap is the summary contract's ceiling/);
  });

  it('rejects ungrounded summaries by default; flag is the one alternative', () => {
    expect(loadConfig({}).grounding).toBe('reject');
    expect(loadConfig({ SOURCEBOUND_GROUNDING: 'flag' }).grounding).toBe('flag');
    expect(() => loadConfig({ SOURCEBOUND_GROUNDING: 'ignore' })).toThrow(/SOURCEBOUND_GROUNDING/);
  });

  it('production topology: a direct URL beside a pooled one, recovery and metrics settings', () => {
    const config = loadConfig({
      DATABASE_URL: 'postgres://app@pooler:6543/db', DATABASE_DIRECT_URL: 'postgres://app@db:5432/db',
      SOURCEBOUND_RECOVERY_TIMEOUT_MS: '5000', SOURCEBOUND_METRICS_PORT: '9464',
    });
    expect(config).toMatchObject({ databaseDirectUrl: 'postgres://app@db:5432/db', recoveryTimeoutMs: 5000, metricsPort: 9464, metricsHost: '127.0.0.1' });
    expect(loadConfig({})).toMatchObject({ databaseDirectUrl: undefined, recoveryTimeoutMs: 120_000, metricsPort: undefined });
    // A direct URL alone would silently pair with an embedded server: refused.
    expect(() => loadConfig({ DATABASE_DIRECT_URL: 'postgres://app@db:5432/db' })).toThrow(/DATABASE_DIRECT_URL: set DATABASE_URL too/);
    expect(() => loadConfig({ SOURCEBOUND_METRICS_PORT: '70000' })).toThrow(/SOURCEBOUND_METRICS_PORT/);
  });
});
