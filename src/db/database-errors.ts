/**
 * How a PostgreSQL error is read: the one place that knows SQLSTATE codes.
 * Everything else asks for a condition by name (`databaseCondition`) and builds
 * its own SourceboundError from it (run/run-errors.ts, turns/turn-errors.ts),
 * keeping the driver's error as `cause`. Errors are told apart by code and
 * constraint name, never by their message text.
 *
 * The conditions sourcebound's own SQL functions and triggers raise carry a
 * name in the error's `constraint` field (db/conditions.ts, `isCondition`):
 * the guards' `integrity_constraint_violation` reads here as `guard` with that
 * name as its constraint.
 */
import { isCondition } from './conditions.ts';

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

/**
 * The server error an error is or wraps through `cause` (drizzle's "Failed
 * query: ..." and other wrappers keep the driver's error there), with its
 * fields; undefined when there is none.
 */
export function databaseErrorWithin(error: unknown): { error: Error; fields: DatabaseErrorFields } | undefined {
  for (let e = error, depth = 0; e !== null && e !== undefined && depth < 8; e = (e as { cause?: unknown }).cause, depth++) {
    const fields = databaseErrorFields(e);
    if (fields) return { error: e as Error, fields };
  }
  return undefined;
}

/** The conditions sourcebound acts on, by name. */
export type DatabaseCondition =
  /** 23505: a unique index or constraint refused the row. */
  | { kind: 'unique_violation'; constraint: string | undefined }
  /** 23514: a check constraint refused the row. */
  | { kind: 'check_violation'; constraint: string | undefined }
  /** 23503: a foreign key refused the row (its parent is gone). */
  | { kind: 'foreign_key_violation'; constraint: string | undefined }
  /** 23502. */
  | { kind: 'not_null_violation'; constraint: string | undefined }
  /** 23000: raised by sourcebound's guard triggers (integrity_constraint_violation). */
  | { kind: 'guard'; constraint: string | undefined }
  /**
   * A value PostgreSQL cannot take: 22P02 (a malformed uuid), 22021 (a NUL in
   * text), 22P05 (a NUL in jsonb), 22003 (past an integer column).
   */
  | { kind: 'invalid_value'; code: string }
  /** 25P02: the transaction already failed; commands are ignored until its end. */
  | { kind: 'in_failed_transaction' }
  /** P0002 (no_data_found): raised by sourcebound's functions for a row that does not exist. */
  | { kind: 'not_found' }
  /** 42P01, 3F000: a table or schema is missing (almost always: the database was never migrated). */
  | { kind: 'not_migrated'; code: string }
  /** 42501: the role lacks a privilege (a runtime role doing the owner's work, or missing grants: docs/trust-boundaries.md). */
  | { kind: 'insufficient_privilege' }
  /** 54000: a limit of sourcebound's (the message size) or of PostgreSQL's was exceeded. */
  | { kind: 'limit_exceeded'; constraint: string | undefined }
  /** Class 08 and 57P01-57P03: the connection was lost or could not be made (connection-lost.ts). */
  | { kind: 'connection_lost'; code: string }
  /** Any other SQLSTATE. */
  | { kind: 'other'; code: string };

const INVALID_VALUE = new Set(['22P02', '22021', '22P05', '22003']);
const TERMINATED = new Set(['57P01', '57P02', '57P03']);

/** The condition of a server error, or undefined for anything that is not one. */
export function databaseCondition(error: unknown): DatabaseCondition | undefined {
  const fields = databaseErrorFields(error);
  if (!fields) return undefined;
  const { code, constraint } = fields;
  switch (code) {
    case '23505':
      return { kind: 'unique_violation', constraint };
    case '23514':
      return { kind: 'check_violation', constraint };
    case '23503':
      return { kind: 'foreign_key_violation', constraint };
    case '23502':
      return { kind: 'not_null_violation', constraint };
    case '23000':
      return { kind: 'guard', constraint };
    case '25P02':
      return { kind: 'in_failed_transaction' };
    case 'P0002':
      return { kind: 'not_found' };
    case '42P01':
    case '3F000':
      return { kind: 'not_migrated', code };
    case '42501':
      return { kind: 'insufficient_privilege' };
    case '54000':
      return { kind: 'limit_exceeded', constraint };
  }
  if (INVALID_VALUE.has(code)) return { kind: 'invalid_value', code };
  if (isConnectionSqlstate(code)) return { kind: 'connection_lost', code };
  return { kind: 'other', code };
}

/** A SQLSTATE of a lost connection: class 08 (connection exception), or 57P01-57P03 (terminated, crash shutdown, cannot connect now). */
export function isConnectionSqlstate(code: string): boolean {
  return code.startsWith('08') || TERMINATED.has(code);
}

/** True for a unique violation, optionally of one named constraint. */
export function isUniqueViolation(error: unknown, constraint?: string): boolean {
  const condition = databaseCondition(error);
  return condition?.kind === 'unique_violation' && (constraint === undefined || condition.constraint === constraint);
}

/**
 * Two corrections of one run computed the same revision: the guard
 * (run_turns_guard) refused the later one by name. Retry with the next.
 */
export function isCorrectionRace(error: unknown): boolean {
  return isCondition(error, 'run_correction_revision');
}
