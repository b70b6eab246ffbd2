import { isUuid, toStoredText } from '../run/stored.ts';
import { TurnInputError } from './turn-errors.ts';
import type { TurnDatabase } from './types.ts';

/**
 * The checks every helper runs on its options before it opens a
 * transaction: each refusal is a TurnInputError naming the option, what it
 * takes and what it got. Checked here rather than left to the database,
 * whose refusals name a constraint (`runs_status_known`) or say "not found"
 * for a malformed id.
 */

/** The options object itself, with no option the helper does not know (a misspelt `userText` would otherwise be missing, or a `reason` silently dropped). */
export function requireOptions(operation: string, options: unknown, known: readonly string[]): Record<string, unknown> {
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    throw new TurnInputError(operation, 'options', `an object with ${known.join(', ')}`, options);
  }
  for (const key of Object.keys(options)) {
    if (!known.includes(key)) throw new TurnInputError(operation, 'option name', `one of ${known.join(', ')}`, key);
  }
  return options as Record<string, unknown>;
}

/**
 * Where to write: a pg Pool, or a client that reports its transaction status
 * (pg's getTransactionStatus), which decides between a transaction of its own
 * and a savepoint in the caller's.
 */
export function requireDatabase(operation: string, value: unknown): TurnDatabase {
  const db = value as { query?: unknown; connect?: unknown; getTransactionStatus?: unknown } | null;
  if (
    typeof db !== 'object' ||
    db === null ||
    typeof db.query !== 'function' ||
    (typeof db.connect !== 'function' && typeof db.getTransactionStatus !== 'function')
  ) {
    throw new TurnInputError(operation, 'pool', 'a pg Pool or a connected pg client', value);
  }
  return value as TurnDatabase;
}

/** The tenant namespace: a non-empty string (the `conversations_scope_not_empty` constraint). */
export function requireScope(operation: string, value: unknown): string {
  if (typeof value !== 'string' || value.length === 0) throw new TurnInputError(operation, 'scope', 'a non-empty string', value);
  return value;
}

/**
 * A conversation or run id: a UUID, in the canonical form (lowercase,
 * 8-4-4-4-12) every query and error then shows.
 */
export function requireUuid(operation: string, field: string, value: unknown): string {
  if (!isUuid(value)) throw new TurnInputError(operation, field, 'a UUID', value);
  const hex = value.replace(/[{}-]/g, '').toLowerCase();
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/**
 * Message text with something in it, in the form it is stored (a NUL, which
 * PostgreSQL text refuses, and a lone surrogate become U+FFFD). A blank text
 * is refused: a pair needs both messages non-blank, so the turn would be
 * written and silently never count. Blank is what String.prototype.trim
 * removes, the class the pair index uses (sourcebound.refresh_pair()).
 */
export function requireText(operation: string, field: string, value: unknown): string {
  if (typeof value !== 'string' || value.trim() === '') {
    throw new TurnInputError(operation, field, 'a string with non-whitespace text (a blank message never forms a pair)', value);
  }
  return toStoredText(value);
}

/** A chunk of streamed text: any string, the empty one included, stored as requireText stores text. */
export function requireChunk(operation: string, field: string, value: unknown): string {
  if (typeof value !== 'string') throw new TurnInputError(operation, field, 'a string', value);
  return toStoredText(value);
}

/** One of `allowed`, or `fallback` when the option is absent. */
export function requireOneOf<T extends string>(operation: string, field: string, value: unknown, allowed: readonly T[], fallback?: T): T {
  if (value === undefined && fallback !== undefined) return fallback;
  if (typeof value !== 'string' || !(allowed as readonly string[]).includes(value))
    throw new TurnInputError(operation, field, allowed, value);
  return value as T;
}
