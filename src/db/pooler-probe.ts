import pg from 'pg';
import { SourceboundError } from '../support/errors.ts';

/**
 * Whether a URL leads to a pooler that shares server sessions between its
 * clients (PgBouncer in transaction or statement mode, Supabase's pooler on
 * 6543...). Session work (graphile-worker's LISTEN, session advisory locks,
 * migrations) silently breaks there, so the worker and `migrate` refuse such a
 * URL at start.
 *
 * The probe: client A runs one statement outside a transaction and notes its
 * server process; then client B, while A is still connected, opens a
 * transaction and notes its own. A direct connection (or a session-mode
 * pooler) gives every client its own server process for its whole life, so
 * the two can never be the same. A transaction pooler hands A's server
 * connection back once A's statement ends, and reuses its idle connections
 * first, so B gets it. Equal processes are proof; different ones are taken as
 * "not shared" (a pooler busy with other clients could hand B another
 * connection, so the probe runs a few times).
 */
export async function sharesServerSessions(connectionString: string, rounds = 3): Promise<boolean> {
  const a = new pg.Client({ connectionString, application_name: 'sourcebound-pooler-probe' });
  const b = new pg.Client({ connectionString, application_name: 'sourcebound-pooler-probe' });
  a.on('error', () => {});
  b.on('error', () => {});
  await a.connect();
  try {
    await b.connect();
    try {
      for (let round = 0; round < rounds; round++) {
        const {
          rows: [first],
        } = await a.query<{ pid: number }>('select pg_backend_pid() as pid');
        await b.query('begin');
        try {
          const {
            rows: [second],
          } = await b.query<{ pid: number }>('select pg_backend_pid() as pid');
          if (first!.pid === second!.pid) return true;
        } finally {
          await b.query('rollback');
        }
      }
      return false;
    } finally {
      await b.end().catch(() => {});
    }
  } finally {
    await a.end().catch(() => {});
  }
}

/** The URL for session work leads to a transaction pooler. */
export class SessionPoolerError extends SourceboundError {
  override name = 'SessionPoolerError';

  constructor() {
    super(
      'the URL for session work (DATABASE_DIRECT_URL, or DATABASE_URL when it is unset) leads to a transaction pooler: ' +
        'two connections were given one server session, and LISTEN, session locks and migrations break there. ' +
        'Set DATABASE_DIRECT_URL to a direct (or session-mode) URL of the same database',
    );
  }
}

/** Throws SessionPoolerError when the URL for session work is behind a transaction pooler. */
export async function assertSessionUrl(connectionString: string): Promise<void> {
  if (await sharesServerSessions(connectionString)) throw new SessionPoolerError();
}
