// Grounding keys: a fact's canonical form (rules 2-6 of src/grounding/index.ts),
// and the other readings a fact or a material token may have.
import { type Fact } from '../support/summary-contract.ts';
import { MONTHS, SCALE_ZEROS, UNIT_OF } from './tables.ts';

/** An identifier's key: without case, `-` or `_` (`GPT-4` = `gpt4`, `x86_64` = `x86-64`, `SHA-256` = `sha256`). */
export function identifierKey(token: string): string {
  return token.toLowerCase().replace(/[-_]/g, '');
}

/** An amount of pounds written with the word (`150 pounds`): the key of that many pounds of weight (`150lb`); else null. */
export function poundsWeight(fact: Fact): string | null {
  return fact.kind === 'money' && fact.key.startsWith('GBP:') && /pounds?$/i.test(fact.text) ? `${fact.key.slice(4)}lb` : null;
}

/** The two ISO dates an ambiguous slashed date's key (`03/05/2024`: day or month first) can be; none for any other key. */
export function dateReadings(key: string): string[] {
  const m = AMBIGUOUS_DATE.exec(key);
  if (m === null) return [];
  return [isoKey(m[3]!, m[1]!, m[2]!), isoKey(m[3]!, m[2]!, m[1]!)].filter((iso): iso is string => iso !== null);
}
const AMBIGUOUS_DATE = /^(\d{1,2})\/(\d{1,2})\/(\d{4})$/;

/** A figure with `k`, `M` or `B` attached (`10k`, `2.5M`, `7B`): the figure times 10^3, 10^6 or 10^9; else null. */
export function attachedScale(text: string): string | null {
  const m = ATTACHED_SCALE.exec(text);
  return m === null ? null : scaled(canonicalNumber(m[1]!), { k: 3, m: 6, b: 9 }[m[2]!.toLowerCase() as 'k' | 'm' | 'b']);
}
const ATTACHED_SCALE = /^(\d+(?:[.,']\d+)*)([kKmMbB])$/;
/** Letters, maybe a `-` or `_`, then a figure: a name and its number written as one (`Python3.11`, `ISO8601`, `INV-2231`). */
export const NAME_THEN_FIGURE = /^[A-Za-z]+[-_]?(\d+(?:\.\d+)*)$/;

/** Trailing punctuation that ends a sentence or a parenthesis, not a URL or a path. */
const TRAILING = '.,;:!?\'"’”)]}>*_';

export function trimTrailing(token: string): string {
  let t = dropTrailing(token, TRAILING);
  // Keep a closing parenthesis the token opened (wiki URLs).
  if (token.length > t.length && t.includes('(') && !t.includes(')') && token.slice(t.length).startsWith(')')) t += ')';
  return t;
}

/**
 * `text` without its longest suffix of the characters in `chars` (each one
 * UTF-16 unit). Not `replace(/[...]+$/, '')`: a regex tries that from every
 * start, which takes quadratic time on a long run that does not reach the
 * end (a URL followed by 40,000 dots and a letter took 1.5 s).
 */
export function dropTrailing(text: string, chars: string): string {
  let end = text.length;
  while (end > 0 && chars.includes(text[end - 1]!)) end--;
  return end === text.length ? text : text.slice(0, end);
}

export function isCheckedNumber(digits: string, unit: string | null): boolean {
  if (unit !== null) return true;
  if (/[.,']/.test(digits)) return true;
  return digits.replace(/^0+(?=\d)/, '').length >= 3;
}

export function numberKey(digits: string, unit: string | null, after: string | null = null): string {
  const value = canonicalNumber(digits);
  if (unit === null) return value;
  const canon = unitName(unit);
  // A scale word is no unit: `1.5 thousand` is the number 1500, `1.5 thousand km` 1500km.
  const zeros = SCALE_ZEROS[canon];
  return zeros === undefined ? `${value}${canon}` : `${scaled(value, zeros)}${after === null ? '' : unitName(after)}`;
}

/** A unit's canonical name (UNIT_ALIASES). */
function unitName(unit: string): string {
  const u = unit.toLowerCase().replace(/\s+/g, ' ');
  return UNIT_OF.get(u) ?? u;
}

/** `1'234,5` -> `1234.5`: group separators dropped, a decimal comma made a point, trailing zeros dropped. */
export function canonicalNumber(digits: string): string {
  // Digits only (most figures): only leading zeros to drop.
  if (!/[.,']/.test(digits)) return digits.charCodeAt(0) === 0x30 ? digits.replace(/^0+(?=\d)/, '') : digits;
  let d = digits.replace(/'/g, '');
  // A comma not followed by exactly three digits is a decimal comma.
  d = d.replace(/,(?=\d{3}(?!\d))/g, '').replace(/,/g, '.');
  // Several points: group separators, every one when the figure had no comma and each group after
  // the first has three digits (`2.500.000` = 2500000), else all but the last (`1.234.567,89`).
  const points = d.split('.');
  if (points.length > 2) {
    d =
      !digits.includes(',') && points.slice(1).every((g) => g.length === 3)
        ? points.join('')
        : points.slice(0, -1).join('') + '.' + points.at(-1);
  }
  if (d.includes('.')) d = dropTrailing(d, '0').replace(/\.$/, '');
  return d.replace(/^0+(?=\d)/, '');
}

export function moneyKey(currency: string, amount: string, scale: string | undefined): string {
  const s = scale?.trim().toLowerCase();
  const zeros =
    s === undefined
      ? 0
      : s === 'k' || s === 'thousand'
        ? 3
        : s === 'm' || s === 'mn' || s === 'mm' || s === 'mln' || s === 'million'
          ? 6
          : s === 'b' || s === 'bn' || s === 'billion'
            ? 9
            : 12;
  // `$1.25M` = `$1.25 million` = `$1,250,000`.
  return `${currency}:${scaled(canonicalNumber(amount.replace(/[.,]$/, '')), zeros)}`;
}

/** A canonical number times 10^zeros, canonical again (decimal digits moved, not multiplied: exact). */
function scaled(value: string, zeros: number): string {
  if (zeros === 0) return value;
  const [whole = '', fraction = ''] = value.split('.');
  const digits = `${whole}${fraction.padEnd(zeros, '0')}`;
  const point = whole.length + zeros;
  const rest = dropTrailing(digits.slice(point), '0');
  return `${digits.slice(0, point).replace(/^0+(?=\d)/, '')}${rest === '' ? '' : `.${rest}`}`;
}

export function monthNumber(name: string): string {
  const i = MONTHS.indexOf(name.toLowerCase().slice(0, 3));
  return String(i + 1).padStart(2, '0');
}

/**
 * A slashed or dotted date (`12/25/2023`, `25.12.2023`): ISO when its order is
 * plain (a four-digit year, one of the first two parts above 12: the day);
 * else as written with slashes, since `03/05/2024` is 3 May or March 5.
 */
export function slashedKey(text: string): string {
  const [a = '', b = '', year = ''] = text.split(/[./]/);
  const first = Number(a);
  const second = Number(b);
  if (year.length === 4 && first >= 1 && second >= 1) {
    if (first > 12 && first <= 31 && second <= 12) return isoKey(year, b, a)!;
    if (second > 12 && second <= 31 && first <= 12) return isoKey(year, a, b)!;
  }
  return text.replace(/\./g, '/');
}

/** `YYYY-MM-DD`, or `--MM-DD` without a year; null when the day or month cannot be a date. */
export function isoKey(year: string | null, month: string, day: string): string | null {
  const m = Number(month);
  const d = Number(day);
  if (m < 1 || m > 12 || d < 1 || d > 31) return null;
  const md = `${String(m).padStart(2, '0')}-${String(d).padStart(2, '0')}`;
  return year === null ? `--${md}` : `${year}-${md}`;
}

/** A 年月日 date's key: with its day as isoKey; a year and month alone `YYYY-MM`; a month alone is no date. */
export function cjkDateKey(year: string | null, month: string, day: string | null): string | null {
  if (day !== null) return isoKey(year, month, day);
  const m = Number(month);
  return year === null || m < 1 || m > 12 ? null : `${year}-${String(m).padStart(2, '0')}`;
}

export function timeKey(hours: string, minutes: string, seconds: string | null, half: string | null): string | null {
  let h = Number(hours);
  const min = Number(minutes);
  if (min > 59 || h > 24) return null;
  if (half !== null) {
    if (h < 1 || h > 12) return null;
    h = (h % 12) + (half.toLowerCase() === 'p' ? 12 : 0);
  }
  // Zero seconds are no part of the key: `10:00:00` = `10:00`.
  return `${String(h).padStart(2, '0')}:${String(min).padStart(2, '0')}${seconds === null || seconds === '00' ? '' : `:${seconds}`}`;
}
