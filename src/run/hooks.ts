import type { CompactionObservation, DeepReadonly, RunCompactionHooks } from './reports.ts';

/**
 * Hooks observe; they never steer. Each receives its own deep-frozen copy of
 * the observation, so a mutation throws (modules are strict) and touches
 * nothing the caller uses; a throw or rejection is caught and reported. The
 * return value is ignored.
 */
export async function observe(
  hooks: RunCompactionHooks | undefined,
  name: 'onBeforeCompaction' | 'onAfterCompaction',
  observation: CompactionObservation,
  errors: string[],
  timeoutMs = Number.POSITIVE_INFINITY,
): Promise<void> {
  const hook = hooks?.[name];
  if (typeof hook !== 'function') return;
  let timer: NodeJS.Timeout | undefined;
  try {
    const call = Promise.resolve().then(() => hook(deepFreeze(structuredClone(observation)) as DeepReadonly<CompactionObservation>));
    const late = new Promise<'late'>((resolve) => {
      if (Number.isFinite(timeoutMs)) timer = setTimeout(() => resolve('late'), timeoutMs);
    });
    if ((await Promise.race([call, late])) === 'late') errors.push(`${name}: still running after ${timeoutMs} ms; not waited for`);
  } catch (error) {
    errors.push(`${name}: ${error instanceof Error ? error.message : String(error)}`);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Hooks in order, off the critical path: each observation is copied when it
 * happens and delivered after the ones before it, while the caller goes on.
 * A summary request is never held for a hook, so no hook can eat into a
 * receipt's lease (a slow hook once made another preparer presume the
 * request lost and send a second one). `drain` waits for them, each bounded.
 */
export function hookQueue(hooks: RunCompactionHooks | undefined, errors: string[], timeoutMs: number) {
  let chain: Promise<void> = Promise.resolve();
  return {
    push(name: 'onBeforeCompaction' | 'onAfterCompaction', observation: CompactionObservation): void {
      if (typeof hooks?.[name] !== 'function') return;
      const copy = structuredClone(observation);
      chain = chain.then(() => observe(hooks, name, copy, errors, timeoutMs));
    },
    drain: (): Promise<void> => chain,
  };
}

/** Freezes `value` and everything reachable from it. */
export function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const key of Reflect.ownKeys(value)) deepFreeze((value as Record<PropertyKey, unknown>)[key]);
  }
  return value;
}
