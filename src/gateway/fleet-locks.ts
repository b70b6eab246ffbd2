import pg from 'pg';
import { sleep } from '../support/backoff.ts';
import type { GatewayLogger } from './gateway-logger.ts';
import type { Release } from './semaphore.ts';
import { admissionChannelListen, admissionSlotRelease, admissionSlotTry } from '../db/queries/admission-slots.ts';

/**
 * Fleet-wide slots: slot k of N is the session advisory lock
 * `(namespace, k)`. All of a process's slots live on ONE dedicated
 * connection: a session lock must be unlocked on the connection that took it
 * (through a pool the unlock can land elsewhere and the lock leaks), and when
 * a process dies its connection dies and PostgreSQL frees its slots.
 *
 * Session advisory locks are re-entrant per session, so this process keeps
 * its own set of held slots and never tries one it holds; tries are
 * serialised so two local callers cannot both take the same slot.
 *
 * A release NOTIFYs the namespace's channel so waiters in every process retry
 * at once; polling every `pollMs` covers slots freed by a dead connection,
 * which sends no notification.
 *
 * The connection string must be a direct session (DATABASE_DIRECT_URL), not a
 * transaction pooler: through one, the lock and its unlock run on whatever
 * server connection the pooler picks, a dead process's slots stay held by a
 * pooled server connection forever, and NOTIFY never reaches the waiters.
 *
 * If the connection is lost, the server has already released our slots: calls
 * running under them go on, so the fleet may briefly exceed its limit until
 * they finish. The next acquire reconnects.
 */
export interface FleetLocks {
  /** A slot, or null when none came free before `deadlineAt` (epoch ms) or `signal` aborted. Never throws. */
  acquire(deadlineAt: number, signal?: AbortSignal): Promise<Release | null>;
  close(): Promise<void>;
}

export interface FleetLocksOptions {
  connectionString: string;
  limit: number;
  namespace: number;
  pollMs: number;
  /** `application_name` of the dedicated connection, as seen in pg_stat_activity. */
  applicationName: string;
  logger: GatewayLogger;
}

export function createFleetLocks(options: FleetLocksOptions): FleetLocks {
  const { connectionString, limit, namespace, pollMs, applicationName, logger } = options;
  const channel = `sourcebound_admission_${namespace >>> 0}`;
  let client: pg.Client | null = null;
  let connecting: Promise<pg.Client> | null = null;
  let generation = 0;
  let everConnected = false;
  /** Set once an outage is logged, so waiters retrying every poll do not repeat it. */
  let outageLogged = false;
  let closed = false;
  const held = new Set<number>();
  let queue: Promise<unknown> = Promise.resolve();
  let wake = signalled();

  function wakeAll(): void {
    wake.fire();
    wake = signalled();
  }

  function drop(lost: pg.Client): void {
    if (client !== lost) return;
    client = null;
    held.clear();
    generation++;
    wakeAll();
  }

  async function connect(): Promise<pg.Client> {
    const c = new pg.Client({ connectionString, application_name: applicationName });
    c.on('error', (err) => {
      logger.warn({ err, namespace, heldSlots: [...held] }, 'admission connection lost; PostgreSQL released its slots');
      drop(c);
    });
    c.on('end', () => drop(c));
    c.on('notification', () => wakeAll());
    try {
      await c.connect();
      await admissionChannelListen(c, channel);
    } catch (err) {
      c.end().catch(() => {});
      throw err;
    }
    if (closed) {
      await c.end().catch(() => {});
      throw new Error('admission is closed');
    }
    if (everConnected || outageLogged) logger.info({ namespace }, 'admission connection re-established');
    everConnected = true;
    outageLogged = false;
    client = c;
    return c;
  }

  async function ensureClient(): Promise<pg.Client> {
    if (closed) throw new Error('admission is closed');
    if (client) return client;
    connecting ??= connect().finally(() => {
      connecting = null;
    });
    return connecting;
  }

  /** One pass over the slots this process does not hold; the first free one is taken. */
  async function tryOnce(): Promise<{ slot: number; generation: number } | null> {
    const c = await ensureClient();
    const gen = generation;
    for (let slot = 0; slot < limit; slot++) {
      if (held.has(slot)) continue;
      const ok = await admissionSlotTry(c, namespace, slot);
      if (gen !== generation) return null; // the connection died under us: that lock is gone with it
      if (ok) {
        held.add(slot);
        return { slot, generation: gen };
      }
    }
    return null;
  }

  function serialised<T>(task: () => Promise<T>): Promise<T> {
    const run = queue.then(task, task);
    queue = run.catch(() => {});
    return run;
  }

  function releaser(slot: number, gen: number): Release {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const c = client;
      if (gen !== generation || c === null) return; // lost with its connection; nothing to unlock
      held.delete(slot);
      // Serialised with the tries (pg wants one query at a time per client): a later local try runs after
      // the unlock. The NOTIFY wakes waiters in every process once the slot is really free.
      void serialised(() => admissionSlotRelease(c, namespace, slot, channel)).catch((err: unknown) =>
        logger.warn({ err, namespace, slot }, 'admission unlock failed; the slot frees when the connection closes'),
      );
    };
  }

  async function acquire(deadlineAt: number, signal?: AbortSignal): Promise<Release | null> {
    for (;;) {
      if (closed || signal?.aborted) return null;
      const woken = wake.promise;
      try {
        const got = await serialised(tryOnce);
        if (got) {
          if (closed || signal?.aborted) {
            releaser(got.slot, got.generation)();
            return null;
          }
          return releaser(got.slot, got.generation);
        }
      } catch (err) {
        if (closed) return null;
        if (!outageLogged) logger.error({ err, namespace }, 'admission cannot reach PostgreSQL; retrying until the wait times out');
        outageLogged = true;
      }
      const remaining = deadlineAt - Date.now();
      if (remaining <= 0) return null;
      await firstOf(woken, Math.min(pollMs, remaining), signal);
    }
  }

  return {
    acquire,
    async close() {
      closed = true;
      wakeAll();
      const c = client ?? (connecting ? await connecting.catch(() => null) : null);
      client = null;
      held.clear();
      // Ending the session releases every slot it holds.
      if (c) await c.end().catch(() => {});
    },
  };
}

function signalled(): { promise: Promise<void>; fire(): void } {
  let fire!: () => void;
  const promise = new Promise<void>((resolve) => {
    fire = resolve;
  });
  return { promise, fire };
}

/** Resolves on `woken`, after `ms`, or on abort, whichever is first (backoff.ts `sleep`, cut short by `woken`); leaves no timer or listener behind. */
async function firstOf(woken: Promise<void>, ms: number, signal?: AbortSignal): Promise<void> {
  if (signal?.aborted) return;
  const cut = new AbortController();
  const stop = () => cut.abort();
  signal?.addEventListener('abort', stop, { once: true });
  woken.then(stop, stop);
  try {
    await sleep(ms, cut.signal);
  } finally {
    signal?.removeEventListener('abort', stop);
  }
}
