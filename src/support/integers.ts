/**
 * The one parser of whole numbers written by a person: environment variables
 * (src/support/config.ts) and command-line options (src/cli/). `Number()` is not one:
 * `Number('')` and `Number(' ')` are 0, `Number('0x1000')` is 4096,
 * `Number('1e6')` is 1000000, `Number('0b11')` is 3; none of those is what was
 * meant, and a blank that becomes 0 can switch a limit off.
 *
 * Accepted: plain decimal digits 0-9 and nothing else (no sign, no spaces
 * around or inside, no separators, no fraction, exponent, hex, octal or binary
 * prefix); leading zeros are decimal (`010` is 10). The value must be a safe
 * integer.
 */

/** What is accepted, for messages. */
export const DECIMAL_INTEGER_RULE = 'plain decimal digits 0-9 only: no sign, spaces, hex, binary or exponent';

/**
 * The value of `text` when it is plain decimal digits and a safe integer;
 * otherwise why not: `not_digits` or `too_large` (the caller's message names the variable or option).
 */
export function parseDecimalInteger(text: string): { ok: true; value: number } | { ok: false; problem: 'not_digits' | 'too_large' } {
  if (!/^[0-9]+$/.test(text)) return { ok: false, problem: 'not_digits' };
  const value = Number(text);
  if (!Number.isSafeInteger(value)) return { ok: false, problem: 'too_large' };
  return { ok: true, value };
}

/** One line saying what is wrong with `text`, after the name of what it is for. */
export function decimalIntegerProblem(problem: 'not_digits' | 'too_large', text: string, what = 'a whole number'): string {
  return problem === 'too_large'
    ? `is too large (at most ${Number.MAX_SAFE_INTEGER}), got ${text}`
    : `must be ${what}, got '${text}' (${DECIMAL_INTEGER_RULE})`;
}
