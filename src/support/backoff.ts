/** Waits of the worker's retry loops (reconnects, hand-backs, commit retries) and of provider deferrals. */

/** Resolves after `ms`, or at once when `signal` aborts; leaves no timer or listener behind. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
  });
}

/** Between half of `ms` and `ms`: processes that lost the same server do not come back in step. */
export const jitter = (ms: number) => Math.ceil(ms * (0.5 + Math.random() / 2));

/**
 * The wait before try `n` (1 for the first retry) of a doubling backoff:
 * `firstMs`, then twice as long each time, never more than `maxMs`.
 */
export function doubling(n: number, firstMs: number, maxMs: number): number {
  return Math.min(firstMs * 2 ** Math.max(0, n - 1), maxMs);
}
