/**
 * Runners that stop soon after they start, one after the other: the worker
 * is restarting in a loop, and no job gets done. The usual cause is a job
 * that cannot be marked complete (graphile-worker stops its runner when
 * `complete_job` fails: a privilege taken away, a statement a pooler lost),
 * so the next runner takes the same job again and stops the same way.
 *
 * Without this, the supervisor restarted such a runner within 100 ms, five
 * times a second for ever, and /healthz said 200 between two restarts. Now a
 * runner that stopped within STABLE_RUNNER_MS of its start, on a failure
 * PostgreSQL answered (not a lost connection), extends the streak; each
 * restart of a streak waits twice as long as the one before (up to
 * RESTART_MAX_MS), and from UNHEALTHY_STREAK on the worker is unhealthy until
 * a runner has run STABLE_RUNNER_MS without stopping.
 */

/** A runner that ran this long without stopping ends a streak. */
export const STABLE_RUNNER_MS = 60_000;
/** Runners stopped in a row, each soon after its start, from which the worker is unhealthy. */
export const UNHEALTHY_STREAK = 3;
/** The wait before the first restart of a streak, doubled for each further one, up to RESTART_MAX_MS. */
export const RESTART_FIRST_MS = 200;
export const RESTART_MAX_MS = 30_000;

/** What health reports of a streak: how many runners stopped in a row, and why the last one did. */
export interface RestartStreak {
  runnersStopped: number;
  lastReason: string;
  lastError: string | null;
}

export class RestartStreaks {
  private startedAt: number;
  private count = 0;
  private last: { reason: string; error: string | null } | null = null;

  constructor(
    private readonly now: () => number = Date.now,
    private readonly stableMs: number = STABLE_RUNNER_MS,
  ) {
    this.startedAt = now();
  }

  /**
   * The running runner stopped (reason: the supervisor's). Returns how long to
   * wait before starting the next one. Only a failure PostgreSQL answered
   * counts: a lost connection or a restarting server is the reconnect
   * backoff's to ride out, and the next runner does not meet it again.
   */
  stopped(reason: string, error: unknown): number {
    if (!answeredFailure(error)) return 0;
    this.count = this.now() - this.startedAt < this.stableMs ? this.count + 1 : 1;
    this.last = { reason, error: error instanceof Error ? error.message : error == null ? null : String(error) };
    return this.count <= 1 ? 0 : Math.min(RESTART_MAX_MS, RESTART_FIRST_MS * 2 ** (this.count - 2));
  }

  /** A new runner started. */
  started(): void {
    this.startedAt = this.now();
  }

  /** The streak health reports: null while the worker is not restarting in a loop (or the running runner has run long enough). */
  current(): RestartStreak | null {
    if (this.count < UNHEALTHY_STREAK || this.last === null) return null;
    if (this.now() - this.startedAt >= this.stableMs) return null;
    return { runnersStopped: this.count, lastReason: this.last.reason, lastError: this.last.error };
  }
}

/** An error PostgreSQL answered with a SQLSTATE outside connection loss (08) and shutdown (57): the same statement fails again. */
export function answeredFailure(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) && !code.startsWith('08') && !code.startsWith('57');
}
