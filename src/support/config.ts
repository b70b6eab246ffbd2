import { resolve } from 'node:path';
import { z } from 'zod';
import { GROUNDING_POLICIES, SUMMARY_CHAR_CEILING, type GroundingPolicy } from './summary-contract.ts';
import { decimalIntegerProblem, parseDecimalInteger } from './integers.ts';
import { SourceboundError } from './errors.ts';

/**
 * Configuration: the environment is read and validated once, here, and turned
 * into a frozen typed object. Every other module takes what it needs from that
 * object, never from process.env.
 */

/** Raised when the environment is invalid; the message says what to set. */
export class ConfigError extends SourceboundError {
  override name = 'ConfigError';
}

/**
 * A whole-number setting: plain decimal digits only (src/support/integers.ts), so a
 * blank, hex, binary or exponent value is an error naming the variable, never
 * 0 or a surprise. `tooLarge`: the message when the value is above `max`.
 */
const int = (min: number, max = Number.MAX_SAFE_INTEGER, tooLarge = `at most ${max}`) =>
  z.string().transform((text, ctx) => {
    const parsed = parseDecimalInteger(text);
    if (!parsed.ok) {
      ctx.addIssue({ code: 'custom', message: decimalIntegerProblem(parsed.problem, text) });
      return z.NEVER;
    }
    if (parsed.value < min || parsed.value > max) {
      ctx.addIssue({
        code: 'custom',
        message: parsed.value < min ? `at least ${min}, got ${parsed.value}` : `${tooLarge}, got ${parsed.value}`,
      });
      return z.NEVER;
    }
    return parsed.value;
  });

/**
 * A PostgreSQL connection string as pg reads it: a `postgres:` or
 * `postgresql:` URL, or pg's `socket:` form (`socket:/var/run/postgresql?db=app`).
 */
const POSTGRES_SCHEMES = ['postgres:', 'postgresql:', 'socket:'];
const postgresUrl = z.string().superRefine((text, ctx) => {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    ctx.addIssue({ code: 'custom', message: 'not a URL; expected postgres://user:password@host:port/database' });
    return;
  }
  if (!POSTGRES_SCHEMES.includes(url.protocol)) {
    ctx.addIssue({
      code: 'custom',
      message: `a PostgreSQL URL starts with postgres:// or postgresql:// (or socket: for a Unix socket), got ${url.protocol}//...`,
    });
  }
});

/** An http(s) URL (a provider's base URL). */
const httpUrl = z.string().superRefine((text, ctx) => {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    ctx.addIssue({ code: 'custom', message: 'not a URL; expected http(s)://host[:port][/path]' });
    return;
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    ctx.addIssue({ code: 'custom', message: `an http:// or https:// URL, got ${url.protocol}//...` });
  // A key in the URL would be logged and sent where a key does not belong; every request would then be refused and spend an attempt.
  if (url.username !== '' || url.password !== '')
    ctx.addIssue({ code: 'custom', message: 'holds credentials (user:password@): remove them and pass the key in the API key variable' });
});

/** The summarizers configuration can choose (a custom one is plugged in through code or `sourcebound worker --summarizer`). */
export const SUMMARIZER_KINDS = ['anthropic', 'openai', 'offline'] as const;
export type SummarizerKind = (typeof SUMMARIZER_KINDS)[number];

/** The Anthropic model when SOURCEBOUND_MODEL is unset. */
export const DEFAULT_ANTHROPIC_MODEL = 'claude-haiku-4-5';

const bool = z.enum(['1', '0', 'true', 'false', 'yes', 'no', 'on', 'off']).transform((v) => ['1', 'true', 'yes', 'on'].includes(v));

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

const schema = z.object({
  /** PostgreSQL connection string. (Default: none: an embedded PostgreSQL is started.) */
  DATABASE_URL: postgresUrl.optional(),
  /**
   * A direct (session) connection to the same database, for what needs a
   * session: graphile-worker's LISTEN, the migrations' lock, fleet admission.
   * Set it when DATABASE_URL is a transaction pooler (PgBouncer, Supabase,
   * Neon, RDS Proxy); that also turns graphile-worker's prepared statements off.
   * (Default: DATABASE_URL)
   */
  DATABASE_DIRECT_URL: postgresUrl.optional(),
  /** Where the embedded PostgreSQL keeps its data. (Default: ./.sourcebound/pgdata) */
  SOURCEBOUND_DATA_DIR: z.string().min(1).default('.sourcebound/pgdata'),
  /** Port of the embedded PostgreSQL. (Default: 54329) */
  SOURCEBOUND_EMBEDDED_PORT: int(1, 65535).default(54329),
  /** Which summarizer the worker uses: anthropic, openai (any OpenAI-compatible server) or offline. (Default: anthropic when ANTHROPIC_API_KEY is set, else offline) */
  SOURCEBOUND_SUMMARIZER: z.enum(SUMMARIZER_KINDS).optional(),
  /** Anthropic API key; without it (and without SOURCEBOUND_SUMMARIZER) the offline extractive summarizer is used. */
  ANTHROPIC_API_KEY: z.string().min(1).optional(),
  /** Messages API base URL. (Default: the SDK's) */
  ANTHROPIC_BASE_URL: httpUrl.optional(),
  /** API key of the OpenAI-compatible server; optional for a server of your own (OPENAI_BASE_URL). */
  OPENAI_API_KEY: z.string().min(1).optional(),
  /** Base URL of an OpenAI-compatible server, e.g. http://localhost:11434/v1 for Ollama. (Default: https://api.openai.com/v1) */
  OPENAI_BASE_URL: httpUrl.optional(),
  /** Model used for summaries, as the provider knows it. (Default: claude-haiku-4-5 for Anthropic; required for openai) */
  SOURCEBOUND_MODEL: z.string().min(1).regex(/^\S+$/, 'a model name, without spaces').optional(),
  /** Maximum characters of an accepted summary; the contract's ceiling is 6000, a lower limit may be set. (Default: 6000) */
  SOURCEBOUND_SUMMARY_MAX_CHARS: int(
    100,
    SUMMARY_CHAR_CEILING,
    `at most ${SUMMARY_CHAR_CEILING}: the 6,000-character cap is the summary contract's ceiling; a lower limit may be configured, a higher one may not`,
  ).default(SUMMARY_CHAR_CEILING),
  /** What a summary fact not found in its material does: reject (invalid answer, attempt spent) or flag (completed, labelled). (Default: reject) */
  SOURCEBOUND_GROUNDING: z.enum(GROUNDING_POLICIES as [GroundingPolicy, ...GroundingPolicy[]]).default('reject'),
  /** Deadline of one model call in milliseconds. (Default: 120000) */
  SOURCEBOUND_MODEL_TIMEOUT_MS: int(100).default(120_000),
  /** Concurrent model calls per worker process. (Default: 4) */
  SOURCEBOUND_MODEL_CONCURRENCY: int(1, 1000).default(4),
  /** Concurrent model calls across all workers, shared through PostgreSQL; 0 = no fleet limit. (Default: 8) */
  SOURCEBOUND_FLEET_CONCURRENCY: int(0, 10_000).default(8),
  /** How long a call waits for an admission slot before it is deferred. (Default: 30000) */
  SOURCEBOUND_ADMISSION_WAIT_MS: int(0).default(30_000),
  /** How long a claim on a range is valid unless renewed; its holder renews it while the call runs, so a dead holder's range is taken over within this. (Default: 30000) */
  SOURCEBOUND_LEASE_MS: int(1000).default(30_000),
  /** How often a holder renews its claim's lease during the call; 0 turns renewal off (the lease must then outlive the admission wait plus the call). (Default: a third of the lease) */
  SOURCEBOUND_LEASE_RENEW_MS: int(0).optional(),
  /** Summarizer calls one scope (tenant) may start per clock hour, across the fleet; over it, ranges are deferred (no attempt spent) to the next hour. 0: no limit. (Default: 0) */
  SOURCEBOUND_SCOPE_CALLS_PER_HOUR: int(0, 1_000_000_000).default(0),
  /** graphile-worker jobs run at once per worker process. (Default: 4) */
  SOURCEBOUND_WORKER_CONCURRENCY: int(1, 1000).default(4),
  /** graphile-worker poll interval in milliseconds (LISTEN/NOTIFY does the fast path). (Default: 2000) */
  SOURCEBOUND_POLL_INTERVAL_MS: int(50).default(2000),
  /** How long a graceful shutdown waits for running jobs. (Default: 30000) */
  SOURCEBOUND_SHUTDOWN_TIMEOUT_MS: int(0).default(30_000),
  /** How long a worker that lost its database keeps trying to reconnect before it exits 1. (Default: 120000) */
  SOURCEBOUND_RECOVERY_TIMEOUT_MS: int(1000).default(120_000),
  /** Port of the worker's /healthz and /metrics; unset: no HTTP server. (Default: none) */
  SOURCEBOUND_METRICS_PORT: int(0, 65535).optional(),
  /** Address the /healthz and /metrics server listens on (0.0.0.0 in a container). (Default: 127.0.0.1) */
  SOURCEBOUND_METRICS_HOST: z.string().regex(/^\S+$/, 'a host name or address, without spaces').default('127.0.0.1'),
  /** pino level. (Default: info) */
  LOG_LEVEL: z.enum(LOG_LEVELS).optional(),
  /** Pretty logs: 1 forces them on, 0 off. (Default: on when stdout is a TTY) */
  SOURCEBOUND_PRETTY_LOGS: bool.optional(),
});

export interface Config {
  databaseUrl: string | undefined;
  /** Session-capable URL; undefined means "the same as databaseUrl". */
  databaseDirectUrl: string | undefined;
  dataDir: string;
  embeddedPort: number;
  /** The summarizer the worker builds from configuration. */
  summarizer: SummarizerKind;
  anthropic: { apiKey: string | undefined; baseURL: string | undefined; model: string };
  /** Set when `summarizer` is `openai`. */
  openai: { apiKey: string | undefined; baseURL: string | undefined; model: string } | undefined;
  summaryMaxChars: number;
  grounding: GroundingPolicy;
  modelTimeoutMs: number;
  modelConcurrency: number;
  fleetConcurrency: number;
  admissionWaitMs: number;
  leaseMs: number;
  /** Lease renewal interval during a call; 0: no renewal. */
  leaseRenewMs: number;
  /** Summarizer calls per scope per clock hour; 0: no limit. */
  scopeCallsPerHour: number;
  workerConcurrency: number;
  pollIntervalMs: number;
  shutdownTimeoutMs: number;
  recoveryTimeoutMs: number;
  metricsPort: number | undefined;
  metricsHost: string;
  logLevel: string;
  prettyLogs: boolean;
}

/**
 * Validates an environment and returns the frozen configuration.
 * `defaults.logLevel`: the level when LOG_LEVEL is unset (Default: info; the demo's is warn).
 * @throws ConfigError naming every variable that is wrong and what it expects.
 */
export function loadConfig(env: NodeJS.ProcessEnv = process.env, defaults: { logLevel?: LogLevel } = {}): Readonly<Config> {
  // Empty strings mean "unset" (for every variable): that is how most process managers blank a variable.
  // Anything else is validated as written: ' ' is not a number, not a level, not a URL.
  const cleaned = Object.fromEntries(Object.entries(env).filter(([, v]) => v !== undefined && v !== ''));
  const parsed = schema.safeParse(cleaned);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((i) => `  ${i.path.join('.')}: ${i.message}`);
    throw new ConfigError(`invalid configuration; fix these environment variables:\n${lines.join('\n')}`);
  }
  const e = parsed.data;
  const problems: string[] = [];
  if (e.DATABASE_DIRECT_URL !== undefined && e.DATABASE_URL === undefined) {
    problems.push('DATABASE_DIRECT_URL: set DATABASE_URL too (the direct URL only complements it)');
  }
  const summarizer: SummarizerKind = e.SOURCEBOUND_SUMMARIZER ?? (e.ANTHROPIC_API_KEY ? 'anthropic' : 'offline');
  if (summarizer === 'anthropic' && !e.ANTHROPIC_API_KEY) {
    problems.push('ANTHROPIC_API_KEY: required with SOURCEBOUND_SUMMARIZER=anthropic (or choose SOURCEBOUND_SUMMARIZER=openai or offline)');
  }
  if (summarizer === 'openai') {
    if (e.SOURCEBOUND_MODEL === undefined) {
      problems.push(
        'SOURCEBOUND_MODEL: required with SOURCEBOUND_SUMMARIZER=openai: the model name as the server knows it (e.g. gpt-4o-mini, or llama3.1:8b on Ollama)',
      );
    }
    if (e.OPENAI_API_KEY === undefined && e.OPENAI_BASE_URL === undefined) {
      problems.push(
        "OPENAI_API_KEY: required for OpenAI's endpoint; for a server of your own (Ollama, vLLM, llama.cpp) set OPENAI_BASE_URL instead, e.g. http://localhost:11434/v1",
      );
    }
  }
  const leaseRenewMs = e.SOURCEBOUND_LEASE_RENEW_MS ?? Math.floor(e.SOURCEBOUND_LEASE_MS / 3);
  if (leaseRenewMs > 0 && leaseRenewMs * 2 > e.SOURCEBOUND_LEASE_MS) {
    problems.push(
      `SOURCEBOUND_LEASE_RENEW_MS: at most half of SOURCEBOUND_LEASE_MS (${e.SOURCEBOUND_LEASE_MS}), so one late renewal does not lose the lease; 0 turns renewal off`,
    );
  }
  if (problems.length > 0) {
    throw new ConfigError(`invalid configuration; fix these environment variables:\n${problems.map((p) => `  ${p}`).join('\n')}`);
  }
  return Object.freeze({
    databaseUrl: e.DATABASE_URL,
    databaseDirectUrl: e.DATABASE_DIRECT_URL,
    dataDir: resolve(e.SOURCEBOUND_DATA_DIR),
    embeddedPort: e.SOURCEBOUND_EMBEDDED_PORT,
    summarizer,
    anthropic: Object.freeze({
      apiKey: e.ANTHROPIC_API_KEY,
      baseURL: e.ANTHROPIC_BASE_URL,
      model: e.SOURCEBOUND_MODEL ?? DEFAULT_ANTHROPIC_MODEL,
    }),
    openai:
      summarizer === 'openai'
        ? Object.freeze({ apiKey: e.OPENAI_API_KEY, baseURL: e.OPENAI_BASE_URL, model: e.SOURCEBOUND_MODEL! })
        : undefined,
    summaryMaxChars: e.SOURCEBOUND_SUMMARY_MAX_CHARS,
    grounding: e.SOURCEBOUND_GROUNDING,
    modelTimeoutMs: e.SOURCEBOUND_MODEL_TIMEOUT_MS,
    modelConcurrency: e.SOURCEBOUND_MODEL_CONCURRENCY,
    fleetConcurrency: e.SOURCEBOUND_FLEET_CONCURRENCY,
    admissionWaitMs: e.SOURCEBOUND_ADMISSION_WAIT_MS,
    leaseMs: e.SOURCEBOUND_LEASE_MS,
    leaseRenewMs,
    scopeCallsPerHour: e.SOURCEBOUND_SCOPE_CALLS_PER_HOUR,
    workerConcurrency: e.SOURCEBOUND_WORKER_CONCURRENCY,
    pollIntervalMs: e.SOURCEBOUND_POLL_INTERVAL_MS,
    shutdownTimeoutMs: e.SOURCEBOUND_SHUTDOWN_TIMEOUT_MS,
    recoveryTimeoutMs: e.SOURCEBOUND_RECOVERY_TIMEOUT_MS,
    metricsPort: e.SOURCEBOUND_METRICS_PORT,
    metricsHost: e.SOURCEBOUND_METRICS_HOST,
    logLevel: e.LOG_LEVEL ?? defaults.logLevel ?? 'info',
    prettyLogs: e.SOURCEBOUND_PRETTY_LOGS ?? Boolean(process.stdout.isTTY),
  });
}
