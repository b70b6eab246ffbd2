/**
 * The base of sourcebound's errors, and how a PostgreSQL error is read. A
 * leaf: it imports nothing, so every module can build its errors on it.
 * Errors are told apart by class (`instanceof`) and by their fields, never by
 * their message text; a database error keeps the driver's error as `cause`.
 */

/** Base of every error sourcebound throws on purpose. `cause`: the error it stands for (a database error...). */
export class SourceboundError extends Error {
  override name = 'SourceboundError';

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/** What identifies a PostgreSQL error: its SQLSTATE and, for a constraint violation, the constraint's name. */
export interface DatabaseErrorFields {
  code: string;
  constraint: string | undefined;
}

/**
 * The SQLSTATE (and constraint) of an error the `pg` driver raised for the
 * server, or undefined for anything else (a network error, a bug).
 */
export function databaseErrorFields(error: unknown): DatabaseErrorFields | undefined {
  const e = error as { code?: unknown; constraint?: unknown } | null;
  if (typeof e?.code !== 'string' || !/^[0-9A-Z]{5}$/.test(e.code)) return undefined;
  return { code: e.code, constraint: typeof e.constraint === 'string' ? e.constraint : undefined };
}
