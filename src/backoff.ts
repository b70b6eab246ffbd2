/** Waits of the worker's retry loops (reconnects, hand-backs, commit retries). */

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
