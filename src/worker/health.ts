import type { RestartStreak } from './restart-streak.ts';
import type { SupervisorState } from './state.ts';

/** What /healthz and `WorkerHandle.health()` report (http.ts serves it). */
export interface WorkerHealth {
  /** A runner is taking jobs. */
  running: boolean;
  /** Recovering from a lost database or runner. */
  recovering: boolean;
  /** When PostgreSQL last answered the probe (epoch ms), or null. */
  databaseOkAt: number | null;
  /** Runners started after the first. */
  restarts: number;
  /** When this worker's heartbeat was last recorded (epoch ms), or null: silent for long, the fleet takes its work over. */
  beatOkAt: number | null;
  /** Runners stopped in a row, each soon after its start (restart-streak.ts): no job gets done; null when not so. */
  restartStreak: RestartStreak | null;
}

/** Before the worker has started: not running, nothing answered yet. */
export const NOT_STARTED: WorkerHealth = Object.freeze({
  running: false,
  recovering: false,
  databaseOkAt: null,
  restarts: 0,
  beatOkAt: null,
  restartStreak: null,
});

/** The health the supervisor's state shows. A give-up, and a stop that came while recovering, still say recovering. */
export function healthOf(
  state: SupervisorState,
  databaseOkAt: number | null,
  restarts: number,
  beatOkAt: number | null,
  restartStreak: RestartStreak | null = null,
): WorkerHealth {
  const recovering = state.kind === 'recovering' || state.kind === 'gave_up' || (state.kind === 'stopping' && state.wasRecovering);
  return { running: state.kind === 'running', recovering, databaseOkAt, restarts, beatOkAt, restartStreak };
}
