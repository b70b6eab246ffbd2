import { startWorker } from '../worker.ts';
import { parseCommandArgs, withSession, type Command } from './common.ts';

export const workerCommand: Command = {
  name: 'worker',
  summary: 'run the compaction worker (graphile-worker) until SIGTERM/SIGINT',
  usage: [
    'usage: sourcebound worker [--no-migrate]',
    '',
    'Migrates, then runs compact_conversation jobs and the sweep crontab.',
    'SIGTERM/SIGINT: stop taking jobs, let running ones finish (SOURCEBOUND_SHUTDOWN_TIMEOUT_MS), exit 0.',
    'A lost database (restart, failover): reconnects and restarts its runner in-process; exits 1 if PostgreSQL',
    'does not come back within SOURCEBOUND_RECOVERY_TIMEOUT_MS. SOURCEBOUND_METRICS_PORT serves /healthz and /metrics.',
    'Cannot start (the metrics port cannot be opened; --no-migrate on an unmigrated database): one line, exit 1, no job taken.',
    'Concurrency: SOURCEBOUND_WORKER_CONCURRENCY; poll interval: SOURCEBOUND_POLL_INTERVAL_MS.',
  ].join('\n'),
  async run(argv) {
    const { values } = parseCommandArgs(argv, { 'no-migrate': { type: 'boolean' } });
    await withSession(async ({ config, logger, database }) => {
      const worker = await startWorker({ config, logger, database, skipMigrations: values['no-migrate'] === true });
      await new Promise<void>((resolve) => {
        const onSignal = (signal: NodeJS.Signals) => {
          logger.info({ signal }, 'signal received');
          process.off('SIGTERM', onSignal);
          process.off('SIGINT', onSignal);
          resolve();
        };
        process.on('SIGTERM', onSignal);
        process.on('SIGINT', onSignal);
        // A worker that gives up (its database did not come back in time) ends the process with exit 1.
        worker.runner.promise.then(resolve, (error) => {
          logger.error({ err: error }, 'worker runner failed');
          process.exitCode = 1;
          resolve();
        });
      });
      await worker.stop();
    }, { poolSize: (config) => config.workerConcurrency + 6 });
  },
};

