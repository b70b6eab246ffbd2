import { parseArgs, type ParseArgsConfig } from 'node:util';
import { loadConfig, type Config, type LogLevel } from '../support/config.ts';
import { decimalIntegerProblem, parseDecimalInteger } from '../support/integers.ts';
import { createLogger, type Logger } from '../support/logger.ts';
import { openDatabase, type Database } from '../db/database.ts';
import { SourceboundError } from '../support/errors.ts';

/** How a person runs this CLI: the installed package's bin, or the repository's source entry. */
export const CLI_COMMAND = import.meta.url.includes('/dist/src/cli/') ? 'npx sourcebound' : 'node bin/sourcebound.js';

/** Wrong arguments: the CLI prints the message and the command's usage, exit 2. */
export class UsageError extends SourceboundError {
  override name = 'UsageError';
}

export interface Command {
  name: string;
  summary: string;
  usage: string;
  run(argv: string[]): Promise<number | void>;
}

type Options = NonNullable<ParseArgsConfig['options']>;
/** What parseCommandArgs returns, named so that declaration emit (`npm run build`) can write it. */
export type ParsedCommandArgs<T extends Options> = ReturnType<
  typeof parseArgs<{ args: string[]; options: T & { help: { type: 'boolean'; short: 'h' } }; allowPositionals: boolean; strict: true }>
>;

/** Parses a command's arguments; unknown options or missing values are UsageErrors. */
export function parseCommandArgs<T extends Options>(argv: string[], options: T, positionals = 0): ParsedCommandArgs<T> {
  try {
    const parsed = parseArgs({
      args: argv,
      options: { ...options, help: { type: 'boolean', short: 'h' } },
      allowPositionals: positionals > 0,
      strict: true,
    });
    if (parsed.positionals.length > positionals) throw new UsageError(`unexpected argument: ${parsed.positionals[positionals]}`);
    return parsed;
  } catch (error) {
    if (error instanceof UsageError) throw error;
    throw new UsageError((error as Error).message);
  }
}

/**
 * A whole-number option (`--budget`, `--timeout`), parsed as the environment's numbers are
 * (src/support/integers.ts: plain decimal digits only), at least `min`. @throws UsageError naming the option.
 */
export function wholeNumberArg(option: string, value: string, unit: string, min = 0): number {
  const parsed = parseDecimalInteger(value);
  if (!parsed.ok) throw new UsageError(`${option} ${decimalIntegerProblem(parsed.problem, value, `a whole number of ${unit}`)}`);
  if (parsed.value < min) throw new UsageError(`${option} must be at least ${min}, got ${value}`);
  return parsed.value;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** A conversation id argument, checked. */
export function conversationIdArg(value: string | undefined): string {
  if (value === undefined) throw new UsageError('missing <conversationId>');
  if (!UUID.test(value)) throw new UsageError(`not a conversation id (uuid): ${value}`);
  return value.toLowerCase();
}

/**
 * Runs a command's work on one conversation: a conversation that does not exist in the scope is
 * the command's one-line answer (exit 1, no stack trace), not a crash.
 */
export async function reportingMissingConversation<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (error) {
    if ((error as Error).name === 'ConversationNotFoundError') throw Object.assign(error as Error, { exitQuietly: true });
    throw error;
  }
}

export interface Session {
  config: Readonly<Config>;
  logger: Logger;
  database: Database;
}

/**
 * Loads configuration, a logger and the database for a command; closes them afterwards.
 * `logLevel`: the command's level whatever LOG_LEVEL says; `defaultLogLevel`: its level when LOG_LEVEL is unset.
 */
export async function withSession<T>(
  fn: (session: Session) => Promise<T>,
  options: { poolSize?: number | ((config: Readonly<Config>) => number); logLevel?: LogLevel; defaultLogLevel?: LogLevel } = {},
): Promise<T> {
  const config = loadConfig(process.env, { logLevel: options.defaultLogLevel });
  const logger = createLogger({ level: options.logLevel ?? config.logLevel, pretty: config.prettyLogs });
  const poolSize = typeof options.poolSize === 'function' ? options.poolSize(config) : options.poolSize;
  const database = await openDatabase(config, logger, poolSize);
  try {
    return await fn({ config, logger, database });
  } finally {
    await database.close();
  }
}
