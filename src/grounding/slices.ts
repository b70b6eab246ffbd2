// Grounding in slices: the check's long passes over the material are written
// as generators that pause (yield) between steps, so that one implementation
// runs whole (groundOutcome) or lets the event loop in between (groundOutcomeAsync).

/** Work that pauses where it may be cut and returns its result at the end. */
export type Sliced<T> = Generator<void, T, void>;

/**
 * The longest the check runs before it lets the event loop in. A step takes
 * up to about 15 ms at the largest material (600,000 characters of real
 * replies; about 40 ms on hostile text), so the event loop waits at most
 * this and one step. (Default: 10)
 */
export const SLICE_MS = 10;

/**
 * Iterations of a loop over a whole text (places tried, matches kept)
 * between two pauses: a few hundred microseconds of work or less.
 */
export const PER_PAUSE = 1024;

/**
 * A pause in a loop over the matches of the global `regex`, which gets its
 * lastIndex back after it: another check may use the same regex in the pause.
 */
export function* pausing(regex: RegExp): Sliced<void> {
  const at = regex.lastIndex;
  yield;
  regex.lastIndex = at;
}

/** Runs `work` to its end without pausing. */
export function whole<T>(work: Sliced<T>): T {
  for (;;) {
    const step = work.next();
    if (step.done) return step.value;
  }
}

/**
 * Runs `work`, letting the event loop in (setImmediate: timers, I/O and other
 * jobs run first) whenever `sliceMs` have passed since it last did. The
 * result is `whole(work)`'s: only the pauses differ.
 */
export async function inSlices<T>(work: Sliced<T>, sliceMs: number = SLICE_MS): Promise<T> {
  let started = performance.now();
  for (;;) {
    const step = work.next();
    if (step.done) return step.value;
    if (performance.now() - started >= sliceMs) {
      await new Promise<void>((resolve) => setImmediate(resolve));
      started = performance.now();
    }
  }
}
