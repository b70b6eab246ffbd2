/**
 * Errors of run compaction: one base class carrying `cause`, and one function
 * that maps PostgreSQL's SQLSTATE codes to them.
 */

/** Base of every error this module throws on purpose. */
export class RunCompactionError extends Error {
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
  const code = (error as { code?: unknown } | null)?.code;
  switch (code) {
    case '23000': // integrity_constraint_violation: our guard triggers
    case '23502': // not_null_violation
    case '23503': // foreign_key_violation
    case '23505': // unique_violation
    case '23514': // check_violation
    case '22P02': // invalid_text_representation (a malformed uuid)
    case '22021': // character_not_in_repertoire (a NUL in text)
    // The two below are checked before writing (stored.ts); mapped too, so one missed never leaks as a DatabaseError.
    case '22P05': // untranslatable_character (a NUL in jsonb)
    case '22003': // numeric_value_out_of_range (past an integer column)
      return new RunHistoryError(`${what}: ${(error as Error).message}`, { cause: error });
    default:
      return error;
  }
}

/** True for a unique violation (SQLSTATE 23505), optionally of one named constraint. */
export function isUniqueViolation(error: unknown, constraint?: string): boolean {
  const e = error as { code?: unknown; constraint?: unknown } | null;
  return e?.code === '23505' && (constraint === undefined || e.constraint === constraint);
}
