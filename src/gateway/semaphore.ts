/** Gives a permit back; calling it again does nothing. */
export type Release = () => void;

export interface Semaphore {
  /** A permit, or null when none came free within `timeoutMs` or `signal` aborted. Never throws. */
  acquire(timeoutMs: number, signal?: AbortSignal): Promise<Release | null>;
  /** Permits currently held. */
  readonly inUse: number;
  /** Fails every waiter (null) and every later acquire. */
  close(): void;
}

interface Waiter {
  grant(release: Release): void;
  fail(): void;
}

/**
 * A counting semaphore for the per-process limit. Waiters are served in
 * arrival order and a freed permit goes straight to the next waiter, so a
 * late caller cannot overtake one that has been waiting.
 */
export function createSemaphore(limit: number): Semaphore {
  if (!Number.isInteger(limit) || limit < 1) throw new RangeError(`semaphore limit must be a positive integer, got ${limit}`);
  let free = limit;
  let closed = false;
  const waiters: Waiter[] = [];

  function permit(): Release {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = waiters.shift();
      if (next) next.grant(permit());
      else free++;
    };
  }

  function acquire(timeoutMs: number, signal?: AbortSignal): Promise<Release | null> {
    if (closed || signal?.aborted) return Promise.resolve(null);
    if (free > 0) {
      free--;
      return Promise.resolve(permit());
    }
    return new Promise((resolve) => {
      const onAbort = () => waiter.fail();
      const timer = setTimeout(onAbort, Math.max(0, timeoutMs));
      const settle = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        const at = waiters.indexOf(waiter);
        if (at >= 0) waiters.splice(at, 1);
      };
      const waiter: Waiter = {
        grant: (release) => {
          settle();
          resolve(release);
        },
        fail: () => {
          settle();
          resolve(null);
        },
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      waiters.push(waiter);
    });
  }

  return {
    acquire,
    get inUse() {
      return limit - free;
    },
    close() {
      closed = true;
      for (const waiter of [...waiters]) waiter.fail();
    },
  };
}
