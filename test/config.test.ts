import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../src/support/config.ts';
import { parseDecimalInteger } from '../src/support/integers.ts';

describe('configuration', () => {
  it('has the documented defaults and is frozen', () => {
    const config = loadConfig({});
    expect(config).toMatchObject({
      databaseUrl: undefined,
      embeddedPort: 54329,
      summaryMaxChars: 6000,
      modelTimeoutMs: 120_000,
      modelConcurrency: 4,
      fleetConcurrency: 8,
      leaseMs: 30_000,
      leaseRenewMs: 10_000,
      workerConcurrency: 4,
      pollIntervalMs: 2000,
      logLevel: 'info',
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

  it('renews a lease every third of it unless told; a renewal interval must leave room for a late one', () => {
    expect(loadConfig({ SOURCEBOUND_LEASE_MS: '9000' }).leaseRenewMs).toBe(3000);
    expect(loadConfig({ SOURCEBOUND_LEASE_MS: '9000', SOURCEBOUND_LEASE_RENEW_MS: '0' }).leaseRenewMs).toBe(0);
    expect(() => loadConfig({ SOURCEBOUND_LEASE_MS: '9000', SOURCEBOUND_LEASE_RENEW_MS: '5000' })).toThrow(
      /SOURCEBOUND_LEASE_RENEW_MS: at most half of SOURCEBOUND_LEASE_MS \(9000\)/,
    );
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

  it("allows a lower summary cap but refuses one above the contract's 6,000 characters", () => {
    expect(loadConfig({ SOURCEBOUND_SUMMARY_MAX_CHARS: '2500' }).summaryMaxChars).toBe(2500);
    expect(loadConfig({ SOURCEBOUND_SUMMARY_MAX_CHARS: '6000' }).summaryMaxChars).toBe(6000);
    expect(() => loadConfig({ SOURCEBOUND_SUMMARY_MAX_CHARS: '6001' })).toThrow(ConfigError);
    expect(() => loadConfig({ SOURCEBOUND_SUMMARY_MAX_CHARS: '20000' })).toThrow(
      /SOURCEBOUND_SUMMARY_MAX_CHARS: at most 6000: the 6,000-character cap is the summary contract's ceiling/,
    );
  });

  it('rejects ungrounded summaries by default; flag is the one alternative', () => {
    expect(loadConfig({}).grounding).toBe('reject');
    expect(loadConfig({ SOURCEBOUND_GROUNDING: 'flag' }).grounding).toBe('flag');
    expect(() => loadConfig({ SOURCEBOUND_GROUNDING: 'ignore' })).toThrow(/SOURCEBOUND_GROUNDING/);
  });

  it('production topology: a direct URL beside a pooled one, recovery and metrics settings', () => {
    const config = loadConfig({
      DATABASE_URL: 'postgres://app@pooler:6543/db',
      DATABASE_DIRECT_URL: 'postgres://app@db:5432/db',
      SOURCEBOUND_RECOVERY_TIMEOUT_MS: '5000',
      SOURCEBOUND_METRICS_PORT: '9464',
    });
    expect(config).toMatchObject({
      databaseDirectUrl: 'postgres://app@db:5432/db',
      recoveryTimeoutMs: 5000,
      metricsPort: 9464,
      metricsHost: '127.0.0.1',
    });
    expect(loadConfig({})).toMatchObject({ databaseDirectUrl: undefined, recoveryTimeoutMs: 120_000, metricsPort: undefined });
    // A direct URL alone would silently pair with an embedded server: refused.
    expect(() => loadConfig({ DATABASE_DIRECT_URL: 'postgres://app@db:5432/db' })).toThrow(/DATABASE_DIRECT_URL: set DATABASE_URL too/);
    expect(() => loadConfig({ SOURCEBOUND_METRICS_PORT: '70000' })).toThrow(/SOURCEBOUND_METRICS_PORT/);
  });

  it('numbers are plain decimal digits: blanks, hex, binary, exponents and signs stop the process naming the variable', () => {
    const numeric = [
      'SOURCEBOUND_EMBEDDED_PORT',
      'SOURCEBOUND_SUMMARY_MAX_CHARS',
      'SOURCEBOUND_MODEL_TIMEOUT_MS',
      'SOURCEBOUND_MODEL_CONCURRENCY',
      'SOURCEBOUND_FLEET_CONCURRENCY',
      'SOURCEBOUND_ADMISSION_WAIT_MS',
      'SOURCEBOUND_LEASE_MS',
      'SOURCEBOUND_WORKER_CONCURRENCY',
      'SOURCEBOUND_POLL_INTERVAL_MS',
      'SOURCEBOUND_SHUTDOWN_TIMEOUT_MS',
      'SOURCEBOUND_RECOVERY_TIMEOUT_MS',
      'SOURCEBOUND_METRICS_PORT',
    ];
    // Number() read each of these as a number: ' ' and '\t' as 0 (SOURCEBOUND_FLEET_CONCURRENCY=' ' was "no fleet limit").
    for (const bad of [
      ' ',
      '\t',
      '0x1000',
      '1e6',
      '0b11',
      '0o7',
      ' 5000',
      '5000 ',
      '+5000',
      '-1',
      '1.5',
      '5000.0',
      '1_000',
      '1,000',
      'Infinity',
      'NaN',
      '５０００',
    ]) {
      for (const name of numeric) {
        expect(() => loadConfig({ [name]: bad }), `${name}=${JSON.stringify(bad)}`).toThrow(
          `\n  ${name}: must be a whole number, got '${bad}' (plain decimal digits 0-9 only: no sign, spaces, hex, binary or exponent)`,
        );
      }
    }
    expect(() => loadConfig({ SOURCEBOUND_LEASE_MS: '99999999999999999999' })).toThrow(/SOURCEBOUND_LEASE_MS: is too large/);
    expect(() => loadConfig({ SOURCEBOUND_POLL_INTERVAL_MS: '10' })).toThrow(/SOURCEBOUND_POLL_INTERVAL_MS: at least 50, got 10/);
    expect(() => loadConfig({ SOURCEBOUND_METRICS_PORT: '65536' })).toThrow(/SOURCEBOUND_METRICS_PORT: at most 65535, got 65536/);
    // Plain digits (leading zeros are decimal), zero where it is allowed, and empty = unset (the default) still work.
    expect(
      loadConfig({
        SOURCEBOUND_LEASE_MS: '0100000',
        SOURCEBOUND_FLEET_CONCURRENCY: '0',
        SOURCEBOUND_METRICS_PORT: '0',
        SOURCEBOUND_ADMISSION_WAIT_MS: '',
      }),
    ).toMatchObject({ leaseMs: 100_000, fleetConcurrency: 0, metricsPort: 0, admissionWaitMs: 30_000 });
    expect(loadConfig({ SOURCEBOUND_FLEET_CONCURRENCY: '' }).fleetConcurrency).toBe(8);
    expect(parseDecimalInteger('0012')).toEqual({ ok: true, value: 12 });
    expect(parseDecimalInteger('')).toMatchObject({ ok: false });
  });

  it("LOG_LEVEL: empty is unset, so a command's own default applies (the demo's warn)", () => {
    expect(loadConfig({ LOG_LEVEL: '' }).logLevel).toBe('info');
    expect(loadConfig({ LOG_LEVEL: '' }, { logLevel: 'warn' }).logLevel).toBe('warn');
    expect(loadConfig({}, { logLevel: 'warn' }).logLevel).toBe('warn');
    expect(loadConfig({ LOG_LEVEL: 'debug' }, { logLevel: 'warn' }).logLevel).toBe('debug');
    expect(() => loadConfig({ LOG_LEVEL: ' ' })).toThrow(/LOG_LEVEL/);
    expect(() => loadConfig({ SOURCEBOUND_METRICS_HOST: ' ' })).toThrow(/SOURCEBOUND_METRICS_HOST: a host name or address, without spaces/);
  });

  it('DATABASE_URL and DATABASE_DIRECT_URL must be PostgreSQL URLs (postgres:, postgresql:, socket:); the message never echoes the URL', () => {
    expect(loadConfig({ DATABASE_URL: 'postgresql://app@db:5432/app' }).databaseUrl).toBe('postgresql://app@db:5432/app');
    expect(loadConfig({ DATABASE_URL: 'socket:/var/run/postgresql?db=app' }).databaseUrl).toBe('socket:/var/run/postgresql?db=app');
    for (const url of ['http://app:S3cret@db:5432/app', 'mysql://app:S3cret@db/app', 'file:///tmp/db', 'postgres']) {
      let message = '';
      try {
        loadConfig({ DATABASE_URL: url });
      } catch (error) {
        expect(error).toBeInstanceOf(ConfigError);
        message = (error as Error).message;
      }
      expect(message, url).toMatch(/DATABASE_URL: (a PostgreSQL URL starts with postgres:\/\/|not a URL)/);
      expect(message).not.toContain('S3cret');
    }
    expect(() => loadConfig({ DATABASE_URL: 'postgres://app@pooler/app', DATABASE_DIRECT_URL: 'https://db/app' })).toThrow(
      /DATABASE_DIRECT_URL: a PostgreSQL URL starts with postgres:\/\//,
    );
  });

  describe('the summarizer', () => {
    const message = (env: Record<string, string>) => {
      try {
        loadConfig(env);
      } catch (error) {
        expect(error).toBeInstanceOf(ConfigError);
        return (error as Error).message;
      }
      throw new Error('no ConfigError');
    };

    it('is Anthropic with ANTHROPIC_API_KEY, offline without, unless SOURCEBOUND_SUMMARIZER says', () => {
      expect(loadConfig({}).summarizer).toBe('offline');
      expect(loadConfig({ ANTHROPIC_API_KEY: 'k' })).toMatchObject({ summarizer: 'anthropic', openai: undefined });
      expect(loadConfig({ ANTHROPIC_API_KEY: 'k', SOURCEBOUND_SUMMARIZER: 'offline' }).summarizer).toBe('offline');
      // The application's own OpenAI key in the same environment chooses nothing.
      expect(loadConfig({ OPENAI_API_KEY: 'sk-app' }).summarizer).toBe('offline');
    });

    it('openai takes OPENAI_BASE_URL, OPENAI_API_KEY and SOURCEBOUND_MODEL', () => {
      expect(loadConfig({ SOURCEBOUND_SUMMARIZER: 'openai', OPENAI_API_KEY: 'sk-x', SOURCEBOUND_MODEL: 'gpt-4o-mini' })).toMatchObject({
        summarizer: 'openai',
        openai: { apiKey: 'sk-x', baseURL: undefined, model: 'gpt-4o-mini' },
      });
      // A server of your own needs no key.
      expect(
        loadConfig({ SOURCEBOUND_SUMMARIZER: 'openai', OPENAI_BASE_URL: 'http://localhost:11434/v1', SOURCEBOUND_MODEL: 'llama3.1:8b' })
          .openai,
      ).toEqual({ apiKey: undefined, baseURL: 'http://localhost:11434/v1', model: 'llama3.1:8b' });
    });

    it('fails fast saying what to set', () => {
      expect(message({ SOURCEBOUND_SUMMARIZER: 'openai', OPENAI_API_KEY: 'sk-x' })).toMatch(
        /SOURCEBOUND_MODEL: required with SOURCEBOUND_SUMMARIZER=openai: the model name as the server knows it/,
      );
      expect(message({ SOURCEBOUND_SUMMARIZER: 'openai', SOURCEBOUND_MODEL: 'gpt-4o-mini' })).toMatch(
        /OPENAI_API_KEY: required for OpenAI's endpoint; for a server of your own .* set OPENAI_BASE_URL/,
      );
      expect(message({ SOURCEBOUND_SUMMARIZER: 'anthropic' })).toMatch(/ANTHROPIC_API_KEY: required with SOURCEBOUND_SUMMARIZER=anthropic/);
      expect(message({ SOURCEBOUND_SUMMARIZER: 'gemini' })).toMatch(
        /SOURCEBOUND_SUMMARIZER: .*"anthropic"\|"openai"\|"offline"|SOURCEBOUND_SUMMARIZER: Invalid option/,
      );
      expect(message({ SOURCEBOUND_SUMMARIZER: 'openai', SOURCEBOUND_MODEL: 'm', OPENAI_BASE_URL: 'localhost:11434' })).toMatch(
        /OPENAI_BASE_URL: an http:\/\/ or https:\/\/ URL/,
      );
      expect(message({ SOURCEBOUND_MODEL: 'gpt 4o' })).toMatch(/SOURCEBOUND_MODEL: a model name, without spaces/);
      // Every problem at once, the key never echoed.
      const all = message({ SOURCEBOUND_SUMMARIZER: 'openai', DATABASE_DIRECT_URL: 'postgres://db/x', ANTHROPIC_API_KEY: 'sk-ant-secret' });
      expect(all).toMatch(/DATABASE_DIRECT_URL[^]*SOURCEBOUND_MODEL[^]*OPENAI_API_KEY/);
      expect(all).not.toContain('sk-ant-secret');
    });
  });
});
