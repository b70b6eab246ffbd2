import { LOCK_NS } from '../db/locks.ts';
import { createFleetLocks, type FleetLocks } from './fleet-locks.ts';
import { silentGatewayLogger, type GatewayLogger } from './gateway-logger.ts';
import { createSemaphore } from './semaphore.ts';

/**
 * Advisory-lock namespace (first key of `pg_try_advisory_lock(int4, int4)`)
 * of the fleet-wide summarizer slots, from the one registry of namespaces.
 */
export const ADMISSION_LOCK_NAMESPACE: number = LOCK_NS.admission;

/** Fallback poll for fleet slots freed by a dead process (a live one NOTIFYs on release). */
export const DEFAULT_ADMISSION_POLL_MS = 250;

export interface AdmissionOptions {
  /** PostgreSQL connection string; required when `fleetLimit` is set. */
  connectionString?: string | undefined;
  /** Concurrent model calls in this process. */
  localLimit: number;
  /** Concurrent model calls across every process sharing the database and namespace; 0 or null = no fleet limit. */
  fleetLimit: number | null;
  /** How long `acquire` waits for both slots before it gives up with null. */
  waitTimeoutMs: number;
  /** Retry interval for fleet slots when no release notification comes. (Default: 250) */
  pollMs?: number | undefined;
  /** Advisory-lock namespace; tests pass their own. (Default: ADMISSION_LOCK_NAMESPACE) */
  namespace?: number | undefined;
  /** `application_name` of the dedicated connection. (Default: 'sourcebound-admission') */
  applicationName?: string | undefined;
  logger?: GatewayLogger | undefined;
  /** Observes every acquire: seconds waited and how it ended (metrics); must not throw. */
  onWait?: ((seconds: number, result: 'admitted' | 'timeout' | 'aborted') => void) | undefined;
}

/** Permission to make one model call; give it back with `release()` (idempotent). */
export interface Slot {
  release(): void;
}

export interface Admission {
  /**
   * A slot under both limits, or null when the wait timed out, the signal
   * aborted, or admission is closed. Never throws.
   */
  acquire(signal?: AbortSignal): Promise<Slot | null>;
  /** Fails waiting and later acquires; ends the dedicated connection, which frees this process's fleet slots. */
  close(): Promise<void>;
}

/**
 * Admission: a per-process limit (a semaphore) and, optionally, a fleet-wide
 * limit shared through PostgreSQL session advisory locks (see fleet.ts). The
 * local permit is taken first, so a process never holds a fleet slot for a
 * call it could not start.
 * @throws RangeError when a limit is not a non-negative integer or a fleet limit has no connection string.
 */
export function createAdmission(options: AdmissionOptions): Admission {
  const logger = options.logger ?? silentGatewayLogger;
  const fleetLimit = options.fleetLimit ?? 0;
  if (!Number.isInteger(fleetLimit) || fleetLimit < 0) throw new RangeError(`fleetLimit must be a non-negative integer, got ${fleetLimit}`);
  const local = createSemaphore(options.localLimit);
  let fleet: FleetLocks | null = null;
  if (fleetLimit > 0) {
    if (!options.connectionString) throw new RangeError('a fleet limit needs a PostgreSQL connection string');
    fleet = createFleetLocks({
      connectionString: options.connectionString,
      limit: fleetLimit,
      namespace: options.namespace ?? ADMISSION_LOCK_NAMESPACE,
      pollMs: options.pollMs ?? DEFAULT_ADMISSION_POLL_MS,
      applicationName: options.applicationName ?? 'sourcebound-admission',
      logger,
    });
  }

  async function acquire(signal?: AbortSignal): Promise<Slot | null> {
    if (!options.onWait) return acquireSlot(signal);
    const started = performance.now();
    const slot = await acquireSlot(signal);
    options.onWait((performance.now() - started) / 1000, slot ? 'admitted' : signal?.aborted ? 'aborted' : 'timeout');
    return slot;
  }

  async function acquireSlot(signal?: AbortSignal): Promise<Slot | null> {
    const deadlineAt = Date.now() + options.waitTimeoutMs;
    const releaseLocal = await local.acquire(options.waitTimeoutMs, signal);
    if (releaseLocal === null) return null;
    if (fleet === null) return { release: releaseLocal };
    const releaseFleet = await fleet.acquire(deadlineAt, signal);
    if (releaseFleet === null) {
      releaseLocal();
      return null;
    }
    return {
      release() {
        releaseFleet();
        releaseLocal();
      },
    };
  }

  return {
    acquire,
    async close() {
      local.close();
      await fleet?.close();
    },
  };
}
