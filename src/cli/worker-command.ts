import type { Logger } from '../support/logger.ts';
import { startWorker } from '../worker/supervisor.ts';
import { parseCommandArgs, withSession, type Command } from './common.ts';
import { loadSummarizerModule } from './summarizer-module.ts';

/** How long past SOURCEBOUND_SHUTDOWN_TIMEOUT_MS a worker that gave up may take to exit (closing what is left). */
export const GIVE_UP_EXIT_MARGIN_MS = 1000;

/**
 * After a give-up, the process exits 1 within the shutdown deadline plus a margin, stopped cleanly
 * or not: the database is gone, and stopping can hang on it (a pooler that hangs answers no query,
 * and the pool's sockets to it keep the process alive after everything else stopped). The timer is
 * unref'd: a process that ends by itself before then exits as usual, with exit code 1.
 */
function exitAfterGiveUp(shutdownTimeoutMs: number, logger: Logger): void {
  const afterMs = shutdownTimeoutMs + GIVE_UP_EXIT_MARGIN_MS;
  setTimeout(() => {
    // pino writes stdout through sonic-boom, flushed synchronously on process exit.
    logger.error(
      { afterMs },
      'the worker gave up and did not stop within SOURCEBOUND_SHUTDOWN_TIMEOUT_MS (connections to its database hang): exiting 1 without a clean stop',
    );
    process.exit(1);
  }, afterMs).unref();
}

export const workerCommand: Command = {
  name: 'worker',
  summary: 'run the compaction worker (graphile-worker) until SIGTERM/SIGINT',
  usage: [
    'usage: sourcebound worker [--no-migrate] [--summarizer <module>]',
    '',
    'Migrates, then runs compact_conversation jobs and the sweep crontab.',
    '--summarizer <module>: summarize with the summarizer a JavaScript module exports (default export, or a function given',
    '  { config, logger } that returns one) instead of the one SOURCEBOUND_SUMMARIZER chooses; admission, classification',
    '  and grounding apply to it as to a built-in one (README, "A summarizer of your own").',
    'SIGTERM/SIGINT: stop taking jobs, let running ones finish (SOURCEBOUND_SHUTDOWN_TIMEOUT_MS), exit 0.',
    'A lost database (restart, failover): reconnects and restarts its runner in-process; exits 1 if PostgreSQL',
    'does not come back within SOURCEBOUND_RECOVERY_TIMEOUT_MS (at most SOURCEBOUND_SHUTDOWN_TIMEOUT_MS + 1 s later, stopped',
    'cleanly or not). SOURCEBOUND_METRICS_PORT serves /healthz and /metrics.',
    'Cannot start (the metrics port cannot be opened; --no-migrate on an unmigrated database): one line, exit 1, no job taken.',
    'Concurrency: SOURCEBOUND_WORKER_CONCURRENCY; poll interval: SOURCEBOUND_POLL_INTERVAL_MS.',
  ].join('\n'),
  async run(argv) {
    const { values } = parseCommandArgs(argv, { 'no-migrate': { type: 'boolean' }, summarizer: { type: 'string' } });
    // Signals are taken from the start: one that arrives while the worker starts (it logs 'worker started'
    // before startWorker returns) stops it as soon as it has started, instead of killing the process
    // with its jobs, slots and embedded server left behind.
    let received: NodeJS.Signals | null = null;
    let onSignal = (signal: NodeJS.Signals) => {
      received ??= signal;
    };
    const handler = (signal: NodeJS.Signals) => onSignal(signal);
    process.on('SIGTERM', handler);
    process.on('SIGINT', handler);
    try {
      await withSession(
        async ({ config, logger, database }) => {
          const summarizer =
            values.summarizer === undefined ? undefined : await loadSummarizerModule(values.summarizer, { config, logger });
          const worker = await startWorker({ config, logger, database, summarizer, skipMigrations: values['no-migrate'] === true });
          await new Promise<void>((resolve) => {
            onSignal = (signal: NodeJS.Signals) => {
              logger.info({ signal }, 'signal received');
              // A second signal during the shutdown ends the process at once, as before.
              process.off('SIGTERM', handler);
              process.off('SIGINT', handler);
              resolve();
            };
            if (received !== null) onSignal(received);
            // A worker that gives up (its database did not come back in time) ends the process with exit 1.
            worker.runner.promise.then(resolve, (error) => {
              logger.error({ err: error }, 'worker runner failed');
              process.exitCode = 1;
              exitAfterGiveUp(config.shutdownTimeoutMs, logger);
              resolve();
            });
          });
          await worker.stop();
        },
        { poolSize: (config) => config.workerConcurrency + 6 },
      );
    } finally {
      process.off('SIGTERM', handler);
      process.off('SIGINT', handler);
    }
  },
};
