import { createHash } from 'node:crypto';
import type pg from 'pg';
import type { Gauge } from 'prom-client';
import type { Logger } from '../support/logger.ts';
import { sessionApplicationNamesList } from '../db/queries/sessions.ts';

/**
 * Workers that share a database should summarize under one model identity.
 * Two identities compete for the same ranges: each claims the range under
 * its own identity (a different record), both call their model, both
 * complete, so every range costs two summaries, and which one projection
 * shows depends on timing. Nothing stops it (an operator may migrate a fleet
 * from one model to another on purpose), so it is said: at start, when it
 * changes, and on the gauge `sourcebound_fleet_model_identities`.
 *
 * A worker's direct sessions carry `sourcebound-worker m=<hash> <model>` as
 * their `application_name` (its graphile-worker pool; only the LISTEN
 * session behind a transaction pooler, whose server connections keep
 * whatever name their last client set). The hash is of the whole identity,
 * so two long identities that share their first characters still differ;
 * the name is cut to fit PostgreSQL's 63 bytes.
 */
export const WORKER_APPLICATION_PREFIX = 'sourcebound-worker m=';

/** How often a running worker looks again. */
export const MODEL_CHECK_INTERVAL_MS = 30_000;

/** PostgreSQL keeps at most NAMEDATALEN - 1 = 63 bytes of an application_name. */
const APPLICATION_NAME_BYTES = 63;

function identityHash(model: string): string {
  return createHash('sha256').update(model).digest('hex').slice(0, 8);
}

/** The application_name of a worker's sessions for its summarizer identity (ASCII; PostgreSQL would turn the rest into `?`). */
export function workerApplicationName(model: string): string {
  const head = `${WORKER_APPLICATION_PREFIX}${identityHash(model)} `;
  const printable = model.replace(/[^\x20-\x7e]/g, '?');
  return `${head}${printable}`.slice(0, APPLICATION_NAME_BYTES);
}

export interface FleetModels {
  /** This worker's identity and the others seen now (hash -> the name as its sessions carry it, maybe cut). */
  check(): Promise<{ own: string; others: string[] }>;
  start(): void;
  stop(): void;
}

export function createFleetModels(options: {
  pool: pg.Pool;
  model: string;
  logger: Logger;
  gauge: Gauge;
  intervalMs?: number;
}): FleetModels {
  const { pool, model, logger, gauge } = options;
  const own = identityHash(model);
  let timer: NodeJS.Timeout | null = null;
  let lastSeen: string | null = null;

  async function check(): Promise<{ own: string; others: string[] }> {
    const names = await sessionApplicationNamesList(pool, WORKER_APPLICATION_PREFIX);
    const others = new Map<string, string>();
    for (const name of names) {
      const rest = name.slice(WORKER_APPLICATION_PREFIX.length);
      const hash = rest.slice(0, 8);
      if (hash !== own) others.set(hash, rest.slice(9));
    }
    const seen = [...others.values()].sort();
    gauge.set(seen.length + 1);
    const key = seen.join('\n');
    if (key !== lastSeen) {
      if (seen.length > 0) {
        logger.warn(
          { model, otherModels: seen },
          `workers with ${seen.length + 1} different model identities share this database: they compete for the same ranges ` +
            '(each summarizes them under its own identity, so every range is summarized more than once). Run one model per database',
        );
      } else if (lastSeen !== null) {
        logger.info({ model }, "every worker on this database now summarizes with this worker's model identity");
      }
      lastSeen = key;
    }
    return { own: model, others: seen };
  }

  return {
    check,
    start() {
      if (timer !== null) return;
      const tick = () => {
        check().catch((err: unknown) => logger.debug({ err }, "could not read the fleet's model identities"));
      };
      timer = setInterval(tick, options.intervalMs ?? MODEL_CHECK_INTERVAL_MS);
      timer.unref();
    },
    stop() {
      if (timer !== null) clearInterval(timer);
      timer = null;
    },
  };
}
