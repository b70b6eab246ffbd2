/**
 * Assembly: records -> projection -> fitted request -> request with bodies.
 * Shared by prepareRunRequest, the net-benefit gate and cold recovery, so all
 * three produce byte-identical requests from the same records.
 */
import type { Queryable } from '../db/queryable.ts';
import { runResultBodies } from '../db/queries/run-results.ts';
import { runStateLoad, type RunState } from '../db/queries/run-state.ts';
import { RunPolicyError } from './run-errors.ts';
import { fillBodies, fit, type Fitted } from './fitting.ts';
import { type ProjectedCheckpoint } from './checkpoint-item.ts';
import { layOutRequest, type Projection, type RequestInput } from './request-slots.ts';
import { fromStoredJson } from './stored.ts';
import type { RunCompactionPolicy, RunRequest, ThinkingBlock } from './types.ts';

/** A projection and its fitted request. */
export interface Evaluated {
  projection: Projection;
  fitted: Fitted;
}

/**
 * The Run's records (null when it is not in `scope`), with every tool input and
 * thinking block as it was recorded: the one place they are read back from
 * their stored form (toStoredJson), so prepare, the gate and recovery all see
 * the same values and send the model exactly what it sent.
 */
export async function loadState(
  db: Queryable,
  runId: string,
  scope: string,
  policy: Readonly<RunCompactionPolicy>,
): Promise<RunState | null> {
  const state = await runStateLoad(db, runId, scope, policy.excerptBytes, policy.keepRecentGroups);
  if (!state) return null;
  for (const u of state.units) u.input = fromStoredJson(u.input);
  for (const t of state.turns) if (t.thinking) t.thinking = fromStoredJson(t.thinking) as ThinkingBlock[];
  return state;
}

/** Projection and fitting of `state`, with `extra` as checkpoints under evaluation (after the stored ones). */
export function evaluate(
  state: RunState,
  input: RequestInput,
  policy: Readonly<RunCompactionPolicy>,
  extra?: ProjectedCheckpoint | readonly ProjectedCheckpoint[],
): Evaluated {
  const projection = layOutRequest(state, input, policy, extra);
  return { projection, fitted: fit(projection, policy) };
}

/**
 * The request to hand out: `evaluated` itself, or, when it is over the
 * threshold and the last resort brings it to the threshold, that request
 * (fit `lastResort`: the newest groups' results by reference alone, oldest
 * first). A request the last resort cannot bring under stays as it was (its
 * `cannotFit` names what holds the bytes). Compaction is planned and judged
 * on `evaluate`'s form, never on this one. prepareRunRequest and cold
 * recovery both hand out this, so they agree.
 */
export function handedOut(evaluated: Evaluated, policy: Readonly<RunCompactionPolicy>): Evaluated {
  if (evaluated.fitted.bytes <= policy.thresholdBytes) return evaluated;
  const fitted = fit(evaluated.projection, policy, true);
  return fitted.bytes <= policy.thresholdBytes ? { projection: evaluated.projection, fitted } : evaluated;
}

/** The fitted request with the bodies it shows, fetched now (results are immutable: any snapshot will do). */
export async function materialize(db: Queryable, runId: string, fitted: Fitted): Promise<RunRequest> {
  return fillBodies(fitted, await runResultBodies(db, runId, fitted.bodies));
}

/**
 * The application's request input, checked.
 * @throws RunPolicyError for a missing model, a non-string system prompt or non-array tools.
 */
export function requestInput(options: RequestInput): RequestInput {
  if (typeof options.model !== 'string' || options.model === '') throw new RunPolicyError('model must be a non-empty string');
  if (typeof options.system !== 'string') throw new RunPolicyError('system must be a string');
  if (!Array.isArray(options.tools)) throw new RunPolicyError('tools must be an array of tool schemas');
  return { model: options.model, system: options.system, tools: options.tools };
}
