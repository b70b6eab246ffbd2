import pg from 'pg';
import { selectOne, serverStartTimeRead } from '../db/queries/server.ts';

/**
 * The worker's health probe: is PostgreSQL there, and is it the same server?
 * The supervisor (supervisor.ts) turns what the probe reports into the events
 * of its state machine (state.ts): a definite loss is a suspicion, a new
 * server start time a restart.
 */

/** How often the health probe asks PostgreSQL `select 1`. */
export const PROBE_INTERVAL_MS = 1000;
/** A probe query slower than this counts as a failure; two in a row start a recovery. */
export const PROBE_TIMEOUT_MS = 5000;

export interface Probe {
  start(): void;
  /** One `select 1` now. @throws when PostgreSQL does not answer. */
  check(): Promise<void>;
  okAt(): number | null;
  /** Stops probing; resolves once its connection has closed. */
  close(): Promise<void>;
}

/**
 * One round trip every PROBE_INTERVAL_MS on a connection of its own (a busy
 * pool must not look like a dead database), reading the server's start time
 * (`pg_postmaster_start_time()`: a restart that came back between two probes
 * still shows). A lost connection is reported definite at once (a restart
 * cuts every session; the worker then asks a new session); a slow answer
 * only on the second in a row.
 */
export function createProbe(
  connectionString: string,
  on: { ok(serverStartedAt: string): void; lost(error: unknown, definite: boolean): void },
): Probe {
  let client: pg.Client | null = null;
  let okAt: number | null = null;
  let timer: NodeJS.Timeout | null = null;
  let closed = false;
  let slow = 0;
  let inFlight: Promise<void> | null = null;

  const drop = (c: pg.Client): Promise<void> => {
    if (client === c) client = null;
    return c.end().catch(() => {});
  };
  async function connected(): Promise<pg.Client> {
    if (client) return client;
    const c = new pg.Client({
      connectionString,
      application_name: 'sourcebound-health',
      connectionTimeoutMillis: PROBE_TIMEOUT_MS,
      query_timeout: PROBE_TIMEOUT_MS,
    });
    c.on('error', (error) => {
      drop(c);
      if (!closed) on.lost(error, true);
    });
    await c.connect().catch((error: unknown) => {
      c.end().catch(() => {});
      throw error;
    });
    if (closed) {
      c.end().catch(() => {});
      throw new Error('probe closed');
    }
    client = c;
    return c;
  }
  async function check(): Promise<void> {
    inFlight ??= (async () => {
      const c = await connected();
      let startedAt: string;
      try {
        startedAt = await serverStartTimeRead(c);
      } catch (error) {
        drop(c);
        throw error;
      }
      okAt = Date.now();
      slow = 0;
      on.ok(startedAt);
    })().finally(() => {
      inFlight = null;
    });
    return inFlight;
  }
  const tick = async () => {
    timer = null;
    try {
      await check();
    } catch (error) {
      const timedOut = /timeout/i.test((error as Error)?.message ?? '');
      slow = timedOut ? slow + 1 : 0;
      if (!closed) on.lost(error, !timedOut || slow >= 2);
    }
    if (!closed) timer = setTimeout(tick, PROBE_INTERVAL_MS);
  };
  return {
    start() {
      if (!closed && timer === null) timer = setTimeout(tick, PROBE_INTERVAL_MS);
    },
    check,
    okAt: () => okAt,
    async close() {
      closed = true;
      if (timer) clearTimeout(timer);
      if (client) await drop(client);
    },
  };
}

/** One fresh session answers `select 1`. @throws otherwise. */
export async function oneShot(connectionString: string): Promise<void> {
  const c = new pg.Client({ connectionString, connectionTimeoutMillis: PROBE_TIMEOUT_MS, query_timeout: PROBE_TIMEOUT_MS });
  c.on('error', () => {});
  try {
    await c.connect();
    await selectOne(c);
  } finally {
    await c.end().catch(() => {});
  }
}

/**
 * null when PostgreSQL answers `select 1` on a new session of the pooled URL
 * (or `first`: the probe's own check) and, behind a pooler, of the direct
 * URL; else the error. One lost connection is not a lost database.
 */
export async function databaseAnswer(
  database: { connectionString: string; directConnectionString: string; pooled: boolean },
  first: () => Promise<void> = () => oneShot(database.connectionString),
): Promise<unknown> {
  try {
    await first();
    if (database.pooled) await oneShot(database.directConnectionString);
    return null;
  } catch (error) {
    return error;
  }
}
