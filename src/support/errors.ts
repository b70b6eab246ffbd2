/**
 * The base of sourcebound's errors. A leaf: it imports nothing, so every
 * module can build its errors on it. Errors are told apart by class
 * (`instanceof`) and by their fields, never by their message text; a database
 * error keeps the driver's error as `cause`. How a PostgreSQL error is read
 * (its SQLSTATE) is src/db/database-errors.ts, the one place that knows codes.
 */

/** Base of every error sourcebound throws on purpose. `cause`: the error it stands for (a database error...). */
export class SourceboundError extends Error {
  override name = 'SourceboundError';

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}
