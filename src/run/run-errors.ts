import { databaseCondition } from '../db/database-errors.ts';
import { SourceboundError } from '../support/errors.ts';

/**
 * Errors of run compaction: one base class under SourceboundError, and one
 * function that turns a database condition (db/database-errors.ts) into them.
 */

/** Base of every error run compaction throws on purpose. */
export class RunCompactionError extends SourceboundError {
  override name = 'RunCompactionError';
}

/** The Run does not exist, or not in the given scope (the two are not told apart). */
export class RunNotFoundError extends RunCompactionError {
  override name = 'RunNotFoundError';
}

/** A recording that breaks the history's rules (unknown proposal, second settlement, edited entry...). */
export class RunHistoryError extends RunCompactionError {
  override name = 'RunHistoryError';
}

/** User text (the initial request, a correction) that is empty or only whitespace: refused, never stored. */
export class BlankTextError extends RunHistoryError {
  override name = 'BlankTextError';
}

/** No such result id and version in this Run. */
export class ResultNotFoundError extends RunCompactionError {
  override name = 'ResultNotFoundError';
}

/** A policy or option value that cannot work (e.g. a target above the threshold). */
export class RunPolicyError extends RunCompactionError {
  override name = 'RunPolicyError';
}

/**
 * The error to throw for a database error raised while recording: constraint
 * and guard violations become RunHistoryError (with the database error as
 * cause); anything else is returned unchanged.
 */
export function historyErrorFrom(error: unknown, what: string): unknown {
  switch (databaseCondition(error)?.kind) {
    case 'guard': // our guard triggers
    case 'not_null_violation':
    case 'foreign_key_violation':
    case 'unique_violation':
    case 'check_violation':
    // A malformed uuid, a NUL in text; a NUL in jsonb and a value past an integer column are checked
    // before writing (stored.ts), mapped too, so one missed never leaks as a DatabaseError.
    case 'invalid_value':
      return new RunHistoryError(`${what}: ${(error as Error).message}`, { cause: error });
    default:
      return error;
  }
}

/** A guard trigger's refusal or a unique violation: another writer got there first (the caller retries or re-reads). */
export function isWriteRace(error: unknown): boolean {
  const kind = databaseCondition(error)?.kind;
  return kind === 'guard' || kind === 'unique_violation';
}

export { isUniqueViolation } from '../db/database-errors.ts';
