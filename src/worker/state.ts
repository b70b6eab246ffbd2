import type { Generation } from './generation.ts';
import type { WorkerRunnerStoppedError } from './worker-errors.ts';

/**
 * The supervisor's state (docs/worker.md): one value, changed only by
 * `transition`, where there were flags (current, recovering, stopping, died).
 *
 *               started             lost                   timeout
 *   starting ──────────> running ─────────> recovering ─────────> gave_up
 *                         │   ^                 │  │                 │
 *                         │   └── restarted ────┘  │                 │
 *                         │                        │                 │
 *                        stop                     stop              stop
 *                         │                        v                 │
 *                         └──────────────────> stopping <────────────┘
 *
 * "timeout": no new runner within SOURCEBOUND_RECOVERY_TIMEOUT_MS;
 * runner.promise rejects. A give-up that lands while stopping is kept on the
 * stopping state, and stop() throws it.
 * "lost": the probe saw a new server start time, or a fresh session could not
 * answer after a lost probe or LISTEN connection; the runner stopped or
 * failed by itself; graphile-worker's fatal error.
 *
 * - running: one generation (runner, pool, claim owner) takes jobs.
 * - recovering: the old generation is being retired; the supervisor retries
 *   a new one with backoff. Its hand-back of the old generation's jobs and
 *   claims goes on after `restarted`, while the new one runs.
 * - gave_up: terminal until stop(); health says recovering, not running.
 * - stopping: terminal; `done` is what stop() returns, every time it is called.
 */
export type SupervisorState =
  | { kind: 'starting' }
  | { kind: 'running'; generation: Generation }
  | { kind: 'recovering'; from: Generation; reason: string }
  | { kind: 'gave_up'; error: WorkerRunnerStoppedError }
  | {
      kind: 'stopping';
      done: Promise<void>;
      /** The give-up, when there was one before or during the stop: stop() rejects with it. */
      gaveUp: WorkerRunnerStoppedError | null;
      /** It was recovering (or had given up) when stop() came: health keeps saying so. */
      wasRecovering: boolean;
    };

export type SupervisorEvent =
  | { type: 'started'; generation: Generation }
  | { type: 'lost'; reason: string }
  | { type: 'restarted'; generation: Generation }
  | { type: 'gave_up'; error: WorkerRunnerStoppedError }
  | { type: 'stop'; done: Promise<void> };

/** The next state, or an Error for a transition the diagram does not have (a bug in the supervisor). */
export function transition(state: SupervisorState, event: SupervisorEvent): SupervisorState {
  switch (event.type) {
    case 'started':
      if (state.kind === 'starting') return { kind: 'running', generation: event.generation };
      break;
    case 'lost':
      if (state.kind === 'running') return { kind: 'recovering', from: state.generation, reason: event.reason };
      break;
    case 'restarted':
      if (state.kind === 'recovering') return { kind: 'running', generation: event.generation };
      break;
    case 'gave_up':
      if (state.kind === 'recovering') return { kind: 'gave_up', error: event.error };
      if (state.kind === 'stopping' && state.gaveUp === null) return { ...state, gaveUp: event.error };
      break;
    case 'stop':
      if (state.kind === 'running' || state.kind === 'recovering' || state.kind === 'gave_up') {
        return {
          kind: 'stopping',
          done: event.done,
          gaveUp: state.kind === 'gave_up' ? state.error : null,
          wasRecovering: state.kind !== 'running',
        };
      }
      break;
  }
  throw new Error(`worker supervisor: no transition from ${state.kind} on ${event.type}`);
}

/** The generation taking jobs, or null (starting, recovering, gave up, stopping). */
export function runningGeneration(state: SupervisorState): Generation | null {
  return state.kind === 'running' ? state.generation : null;
}

/** The give-up, if the worker gave up (before or during a stop). */
export function gaveUpError(state: SupervisorState): WorkerRunnerStoppedError | null {
  if (state.kind === 'gave_up') return state.error;
  if (state.kind === 'stopping') return state.gaveUp;
  return null;
}
