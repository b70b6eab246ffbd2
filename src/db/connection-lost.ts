import { isConnectionSqlstate } from './database-errors.ts';

/**
 * Whether a failed query failed because its connection was lost or could not
 * be made, not because of what it asked: such a query may be tried again on a
 * new connection (if what it does is idempotent). One place decides it:
 *
 * - SQLSTATE class 08 (connection exception) and 57P01-57P03 (terminated by
 *   an administrator, e.g. pg_terminate_backend; crash shutdown; cannot
 *   connect now: starting up or shutting down).
 * - Socket errors: refused, reset, broken pipe, timed out, unreachable.
 * - node-postgres's own messages for a connection that ended under a query
 *   or could not be made in time.
 */
const SOCKET_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'ECONNABORTED']);
const MESSAGES =
  /Connection terminated|connection error and is not queryable|timeout exceeded when trying to connect|Client was closed and is not queryable/i;

export function connectionLost(error: unknown): boolean {
  const seen = new Set<unknown>();
  for (let e: unknown = error; typeof e === 'object' && e !== null && !seen.has(e); e = (e as { cause?: unknown }).cause) {
    seen.add(e);
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && (isConnectionSqlstate(code) || SOCKET_CODES.has(code))) return true;
    const message = (e as { message?: unknown }).message;
    if (typeof message === 'string' && MESSAGES.test(message)) return true;
  }
  return false;
}
