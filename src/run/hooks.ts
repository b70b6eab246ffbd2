import type { CompactionObservation, DeepReadonly, RunCompactionHooks } from './types.ts';

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
): Promise<void> {
  const hook = hooks?.[name];
  if (typeof hook !== 'function') return;
  try {
    await hook(deepFreeze(structuredClone(observation)) as DeepReadonly<CompactionObservation>);
  } catch (error) {
    errors.push(`${name}: ${error instanceof Error ? error.message : String(error)}`);
  }
}

/** Freezes `value` and everything reachable from it. */
export function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const key of Reflect.ownKeys(value)) deepFreeze((value as Record<PropertyKey, unknown>)[key]);
  }
  return value;
}
