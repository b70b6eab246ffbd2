import { SourceboundError } from '../support/errors.ts';

/**
 * The worker gave up: it lost its database (or its runner) and could not start
 * again within SOURCEBOUND_RECOVERY_TIMEOUT_MS. The process must not look like
 * it stopped cleanly: a process manager has to start it again.
 */
export class WorkerRunnerStoppedError extends SourceboundError {
  override name = 'WorkerRunnerStoppedError';
  /** The CLI prints the message alone (no stack) and exits 1. */
  readonly exitQuietly = true;
}

/**
 * The worker cannot start: its database is not migrated, or its /healthz and
 * /metrics port cannot be opened. Nothing was started; the CLI prints the
 * message alone and exits 1.
 */
export class WorkerStartError extends SourceboundError {
  override name = 'WorkerStartError';
  readonly exitQuietly = true;
}
