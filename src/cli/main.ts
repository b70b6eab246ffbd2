#!/usr/bin/env node
import { ConfigError } from '../support/config.ts';
import { SummarizerConfigError } from '../conversation/compact.ts';
import { SourceboundError } from '../support/errors.ts';
import { DatabaseUnreachableError } from '../db/database.ts';
import { UsageError, type Command } from './common.ts';
import { databaseCondition, databaseErrorWithin } from '../db/database-errors.ts';
import { migrateCommand } from './migrate-command.ts';
import { workerCommand } from './worker-command.ts';
import { enqueueCommand } from './enqueue-command.ts';
import { inspectCommand } from './inspect-command.ts';
import { projectCliCommand } from './project-command.ts';
import { demoCommand } from './demo-command.ts';
import { repairCommand } from './repair-command.ts';
import { devDbCommand } from './dev-db-command.ts';
import { retryCommand } from './retry-command.ts';
import { packageFile } from '../support/package-files.ts';
import { readFileSync } from 'node:fs';

/** The version of the sourcebound package this CLI belongs to (its package.json). */
function packageVersion(): string {
  return (JSON.parse(readFileSync(packageFile('package.json'), 'utf8')) as { version: string }).version;
}

const commands: Command[] = [
  migrateCommand,
  workerCommand,
  enqueueCommand,
  inspectCommand,
  repairCommand,
  retryCommand,
  projectCliCommand,
  demoCommand,
  devDbCommand,
];

function mainUsage(): string {
  const width = Math.max(...commands.map((c) => c.name.length));
  return [
    'usage: sourcebound <command> [options]',
    '',
    'commands:',
    ...commands.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`),
    '',
    "Run `sourcebound <command> --help` for a command's options, `sourcebound --version` for the version.",
    'Configuration comes from the environment (see README).',
  ].join('\n');
}

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
    process.stdout.write(`${mainUsage()}\n`);
    return name === undefined ? 2 : 0;
  }
  if (name === '--version' || name === '-v' || name === 'version') {
    process.stdout.write(`sourcebound ${packageVersion()}\n`);
    return 0;
  }
  const command = commands.find((c) => c.name === name);
  if (!command) {
    process.stderr.write(`sourcebound: unknown command '${name}'\n\n${mainUsage()}\n`);
    return 2;
  }
  if (rest.includes('--help') || rest.includes('-h')) {
    process.stdout.write(`${command.usage}\n`);
    return 0;
  }
  try {
    return (await command.run(rest)) ?? 0;
  } catch (error) {
    if (error instanceof UsageError) {
      process.stderr.write(`sourcebound ${command.name}: ${error.message}\n\n${command.usage}\n`);
      return 2;
    }
    if (
      error instanceof ConfigError ||
      error instanceof DatabaseUnreachableError ||
      error instanceof SummarizerConfigError ||
      error instanceof SourceboundError ||
      (error as { exitQuietly?: boolean }).exitQuietly
    ) {
      process.stderr.write(`sourcebound ${command.name}: ${(error as Error).message}\n`);
      return 1;
    }
    const within = databaseErrorWithin(error);
    if (within) {
      // The database refused (a state, a lock, a grant; not a bug here): PostgreSQL's own message and
      // SQLSTATE, found under any wrapper (drizzle's "Failed query: ..."), and what was being done.
      const condition = databaseCondition(within.error);
      const hint =
        condition?.kind === 'not_migrated'
          ? '; is the database migrated? run `sourcebound migrate` first'
          : condition?.kind === 'insufficient_privilege'
            ? '; does this role have the grants it needs? see docs/trust-boundaries.md'
            : '';
      const detail = (within.error as { detail?: unknown }).detail;
      const during = within.error === error ? '' : ` [while: ${firstLine((error as Error).message)}]`;
      process.stderr.write(
        `sourcebound ${command.name}: the database refused: ${within.error.message}${typeof detail === 'string' ? ` (${detail})` : ''} (SQLSTATE ${within.fields.code})${hint}${during}\n`,
      );
      return 1;
    }
    process.stderr.write(`sourcebound ${command.name}: ${(error as Error).stack ?? String(error)}\n`);
    return 1;
  }
}

function firstLine(text: string): string {
  const line = text.split('\n')[0] ?? '';
  return line.length > 200 ? `${line.slice(0, 200)}...` : line;
}

const code = await main(process.argv.slice(2));
// A command may already have set a failure code (a worker whose runner died): never overwrite it with success.
process.exitCode = Math.max(code, Number(process.exitCode ?? 0));
