import { REPLACEMENT_CHARACTER, toWellFormed } from '../gateway/text.ts';
import { RunNotFoundError } from './run-errors.ts';

/**
 * What the Run's columns accept, checked before a value reaches them: a
 * value PostgreSQL refuses would otherwise come back as a bare DatabaseError
 * (22P02, 22003, 22P05) instead of the error the API documents. And the
 * exact forms values take there, so what is read back is what was given.
 */

/** The largest value of an `integer` column (versions, byte and line positions, request limits, token counts of one request). */
export const INT4_MAX = 2 ** 31 - 1;

/** An integer from `min` to INT4_MAX: one an `integer` column holds. */
export function isInt4(value: unknown, min = 0): value is number {
  return typeof value === 'number' && Number.isInteger(value) && value >= min && value <= INT4_MAX;
}

// PostgreSQL's uuid input (uuid.c): 32 hex digits, a hyphen allowed after any group of four, optionally in braces.
const UUID = /^(?:\{(?:[0-9a-f]{4}-?){7}[0-9a-f]{4}\}|(?:[0-9a-f]{4}-?){7}[0-9a-f]{4})$/i;

/** True for a string a `uuid` column accepts. */
export function isUuid(value: unknown): value is string {
  return typeof value === 'string' && UUID.test(value);
}

/**
 * The Run id in its canonical form (lowercase, 8-4-4-4-12), so every query
 * and the Run's advisory lock (keyed by the id's text) name it the same way.
 * Every public entry point that takes a runId calls this first: a runId that
 * is not a uuid names no Run, and their JSDoc promises RunNotFoundError then.
 * @throws RunNotFoundError when `runId` is not a uuid.
 */
export function runIdOf(runId: unknown, scope: string): string {
  if (!isUuid(runId))
    throw new RunNotFoundError(`run ${JSON.stringify(String(runId).slice(0, 80))} not found in scope ${scope}: not a uuid`);
  const hex = runId.replace(/[{}-]/g, '').toLowerCase();
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/**
 * Text in the form a `text` column stores it: a lone surrogate (which UTF-8
 * cannot encode) and a NUL (which PostgreSQL text refuses, 22021) become
 * U+FFFD. A NUL refused at recording stopped the Run: a tool whose output
 * held one (a binary file read as text) left its call dispatched, never
 * settled, and a model turn or an error message with one could not be
 * recorded at all. Everything the request and a reread show is read from
 * this stored form, so sizes, hashes and rereads agree with each other.
 */
export function toStoredText(text: string): string {
  return toWellFormed(text).replace(/\0/g, REPLACEMENT_CHARACTER);
}

/**
 * The key of the object that stands for a JSON value jsonb cannot hold. Its
 * one field is the value's JSON text, in which a NUL and a lone surrogate are
 * the ASCII escapes \u0000 and \udXXX.
 */
export const ESCAPED_JSON_KEY = 'sourcebound:escaped-json';

/**
 * A JSON value (a tool call's input, a thinking block) in the form jsonb
 * stores. jsonb refuses U+0000 and lone surrogates anywhere in a string or a
 * key (22P05, 22P02), yet a model may send either in a valid tool call, and
 * the Run must go on. Such a value, and one that would read as an escaped one,
 * is stored as `{ [ESCAPED_JSON_KEY]: its JSON text }`; arrays are escaped
 * element by element (a thinking column must stay an array). Every other value
 * is stored as it is, so records made before this escaping, and the requests
 * built from them, are unchanged (an earlier record that was exactly such an
 * object would now read as its text: no tool input of a model has that key).
 * JSON.stringify's TypeError (a BigInt, a cycle) passes through: the caller names the value.
 */
export function toStoredJson(value: unknown): unknown {
  const text = JSON.stringify(value);
  return text === undefined ? value : escaped(JSON.parse(text), text);
}

/**
 * `value` (parsed from JSON; `text` its JSON when known) in its stored form.
 * An element's JSON text is made only when it is escaped: remaking it for
 * every element of every nested array took time quadratic in the depth.
 */
function escaped(value: unknown, text?: string): unknown {
  if (Array.isArray(value)) return someElementEscaped(value) ? value.map((v) => escaped(v)) : value;
  return hasUnstorable(value) || isEscaped(value) ? { [ESCAPED_JSON_KEY]: text ?? JSON.stringify(value) } : value;
}

/**
 * Whether `escaped` would change anything in an array, found without
 * recursion (arrays nested thousands deep, which jsonb takes, must not
 * overflow the stack when nothing in them needs escaping: almost always).
 */
function someElementEscaped(root: unknown[]): boolean {
  return someElement(root, (value) => hasUnstorable(value) || isEscaped(value));
}

/** Whether `test` holds for a value in `root` or in the arrays nested in it (not in objects), without recursion. */
function someElement(root: unknown[], test: (value: unknown) => boolean): boolean {
  const pending: unknown[] = [...root];
  while (pending.length > 0) {
    const value = pending.pop();
    if (Array.isArray(value)) pending.push(...value);
    else if (test(value)) return true;
  }
  return false;
}

/** The value toStoredJson stored: exact, including key order and every code unit of an escaped value. */
export function fromStoredJson(value: unknown): unknown {
  if (Array.isArray(value)) return someElement(value, isEscaped) ? value.map(fromStoredJson) : value;
  return isEscaped(value) ? JSON.parse(value[ESCAPED_JSON_KEY]) : value;
}

function isEscaped(value: unknown): value is { [ESCAPED_JSON_KEY]: string } {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return false;
  const keys = Object.keys(value);
  return keys.length === 1 && keys[0] === ESCAPED_JSON_KEY && typeof (value as Record<string, unknown>)[ESCAPED_JSON_KEY] === 'string';
}

const UNSTORABLE = /\0|\p{Cs}/u;

/**
 * True when a string or a key anywhere in the parsed JSON value holds a NUL
 * or a lone surrogate. Iterative: a value nested thousands deep, which
 * JSON.stringify and jsonb take, must not overflow the stack here.
 */
function hasUnstorable(root: unknown): boolean {
  const pending: unknown[] = [root];
  while (pending.length > 0) {
    const value = pending.pop();
    if (typeof value === 'string') {
      if (UNSTORABLE.test(value)) return true;
    } else if (Array.isArray(value)) {
      pending.push(...value);
    } else if (value !== null && typeof value === 'object') {
      for (const [k, v] of Object.entries(value)) {
        if (UNSTORABLE.test(k)) return true;
        pending.push(v);
      }
    }
  }
  return false;
}
