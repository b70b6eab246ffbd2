import { loadConfig } from '../support/config.ts';
import { startEmbeddedPostgres } from '../db/embedded.ts';
import { migrateDatabase } from '../db/migrate.ts';
import { createLogger } from '../support/logger.ts';
import { parseCommandArgs, type Command } from './common.ts';

/**
 * `sourcebound dev-db`: the embedded PostgreSQL as a server of its own for
 * development. A worker or an app that starts the embedded server itself
 * stops it when it exits, taking the database from everything else using
 * it; this command owns it instead, until it is told to stop, and prints the
 * URL the others use.
 */
export const devDbCommand: Command = {
  name: 'dev-db',
  summary: 'run the embedded PostgreSQL for development until SIGINT/SIGTERM, and print its DATABASE_URL',
  usage: [
    'usage: sourcebound dev-db [--no-migrate]',
    '',
    'Starts the embedded PostgreSQL (data in SOURCEBOUND_DATA_DIR, port SOURCEBOUND_EMBEDDED_PORT; DATABASE_URL is',
    'not read), migrates it (unless --no-migrate), prints the line DATABASE_URL=... for apps, workers and tests,',
    'and keeps it running until SIGINT (Ctrl-C) or SIGTERM, whatever starts and stops meanwhile.',
    "A data folder already in use by a server another process started: one line with that server's URL, exit 1.",
    'Exits 1 if the server stops by itself.',
  ].join('\n'),
  async run(argv) {
    const { values } = parseCommandArgs(argv, { 'no-migrate': { type: 'boolean' } });
    const config = loadConfig(process.env, { logLevel: 'warn' });
    const logger = createLogger({ level: config.logLevel, pretty: config.prettyLogs });
    const say = (line: string) => process.stdout.write(`${line}\n`);

    // Signals are taken from the start: one during start-up stops the server as soon as it is up.
    let stopAsked: NodeJS.Signals | undefined;
    let onStop: (signal: NodeJS.Signals) => void = (signal) => {
      stopAsked = signal;
    };
    const onSignal = (signal: NodeJS.Signals) => onStop(signal);
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
    try {
      const server = await startEmbeddedPostgres({ dataDir: config.dataDir, port: config.embeddedPort, logger, ifRunning: 'refuse' });
      try {
        if (values['no-migrate'] !== true && stopAsked === undefined) await migrateDatabase(server.connectionString, logger);
        if (stopAsked === undefined) {
          say(
            `sourcebound dev-db: the embedded PostgreSQL is running (data folder ${config.dataDir}, port ${config.embeddedPort}` +
              `${values['no-migrate'] === true ? '' : ', migrated'}); Ctrl-C or SIGTERM stops it. Apps, workers and tests use:`,
          );
          say(`DATABASE_URL=${server.connectionString}`);
          const ended = await new Promise<'signal' | 'exited'>((resolve) => {
            onStop = (signal) => {
              stopAsked = signal;
              resolve('signal');
            };
            void server.exited?.then(() => resolve('exited'));
          });
          if (ended === 'exited') {
            process.stderr.write('sourcebound dev-db: the PostgreSQL server stopped by itself (see its log with LOG_LEVEL=debug)\n');
            return 1;
          }
        }
      } finally {
        await server.stop();
      }
      say(`sourcebound dev-db: stopped (${stopAsked}).`);
      return 0;
    } finally {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
    }
  },
};
