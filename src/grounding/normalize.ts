// Grounding normalization, steps 1-3 of the rules in src/grounding/index.ts:
// the same text transformation applied to summary and material.
import { NON_ASCII } from './chars.ts';

/** Steps 1-2 of the normalization: NFKC, thousands separators dropped, white space collapsed. */
export function normalizeText(text: string): string {
  if (!MAY_CHANGE.test(text)) return text;
  let t = prepare(text);
  if (t.includes('%')) t = t.replace(/(\d) +%/g, '$1%');
  return t.replace(WHITE_RUN, ' ');
}

// A run of white space that is not already one plain space: the same result as
// replacing every /\s+/ with ' ', without rewriting each single space between
// words (that was half the check's time on the real threads).
const WHITE_RUN = /\s{2,}|[^\S ]/g;
/**
 * What any step needs to change a text: a character outside printable ASCII
 * (NFKC, no-break spaces, white space but a space), an ASCII thousands
 * separator, `%`, two spaces or `cent`. A fact's text rarely has one.
 */
const MAY_CHANGE = /[^\x20-\x7e]|[,'_%]|  |[cC][eE][nN][tT]/;

/** NFKC with thousands separators dropped and `percent` made `%`: what extraction and comparison start from. */
export function prepare(text: string): string {
  // One scan for what any step below needs: most texts need none of them.
  if (!MAY_PREPARE.test(text)) return text;
  // Before NFKC, which turns no-break and thin spaces into plain ones.
  let t = ungroup(text);
  // NFKC leaves ASCII as it is: a pure-ASCII text (most are) skips it.
  if (NON_ASCII.test(t)) {
    const nfkc = foldDigits(t.normalize('NFKC'));
    // Again when NFKC changed something: full-width digits are digits only after it.
    if (nfkc !== t) t = ungroup(nfkc);
  }
  if (/per ?cent/i.test(t)) t = t.replace(PERCENT_WORD, '$1%');
  return t;
}

/**
 * After NFKC: invisible characters dropped (a zero-width space or joiner, a
 * soft hyphen, a bidi control: `9\u200B99` is `999`), combining marks right
 * after a digit dropped, every decimal digit of another script made ASCII
 * (Arabic-Indic `٩`, Devanagari `९`, Thai `๙`: NFKC keeps them) and the
 * Arabic decimal and thousands separators made `.` and `,`, the hyphen, the
 * figure dash and the minus sign made `-`. Otherwise a figure written so
 * would not be a figure (`2024‑03‑06` with non-breaking hyphens was 2024
 * and two small numbers), and an invented one would pass.
 */
function foldDigits(text: string): string {
  if (!MAY_FOLD.test(text) || !FOLDABLE.test(text)) return text;
  FOLDABLE_ALL.lastIndex = 0;
  return text.replace(FOLDABLE_ALL, (c: string, digit?: string) =>
    (digit !== undefined ? foldDigit(digit) : c === '\u066B' ? '.' : c === '\u066C' ? ',' : HYPHEN.test(c) ? '-' : DIGIT.test(c) ? foldDigit(c) : ''));
}
/** A digit as an ASCII one. */
const foldDigit = (digit: string): string => (digit.length === 1 && digit >= '0' && digit <= '9' ? digit : asciiDigit(digit));
/**
 * What FOLDABLE can match is in these ranges: a scan without Unicode
 * properties (several times cheaper) that skips the accents, dashes, quotes
 * and spaces of most texts with non-ASCII characters.
 */
const MAY_FOLD = /[\u00AD\u0300-\u1FFF\u200B-\u2012\u202A-\u202E\u2060-\uFFFF]/;
/**
 * One pass for the four steps, each match consumed forward (linear in any
 * run of marks): a digit with the marks and invisible characters after it
 * (group 1 the digit: what the steps one after the other leave of it); an
 * invisible character; a digit of another script; an Arabic separator.
 */
const FOLDABLE_ALL = /(\p{Nd})[\p{M}\p{Default_Ignorable_Code_Point}]+|\p{Default_Ignorable_Code_Point}|(?![0-9])\p{Nd}|[\u066B\u066C\u2010-\u2012\u2212]/gu;
const FOLDABLE = new RegExp(FOLDABLE_ALL.source, 'u');
const DIGIT = /^\p{Nd}$/u;
/** The hyphen, the figure dash and the minus sign (NFKC makes the non-breaking hyphen the hyphen). */
const HYPHEN = /^[\u2010-\u2012\u2212]$/;
const digitValues = new Map<string, string>();
/** A decimal digit's value as an ASCII digit: every script's digits are ten consecutive code points from its zero. */
function asciiDigit(digit: string): string {
  let value = digitValues.get(digit);
  if (value === undefined) {
    const cp = digit.codePointAt(0)!;
    let zero = cp;
    while (DIGIT.test(String.fromCodePoint(zero - 1))) zero--;
    value = String((cp - zero) % 10);
    digitValues.set(digit, value);
  }
  return value;
}

// A separator between a digit and a group of exactly three digits (not followed by another digit).
export const THOUSANDS = /(\d)[,'’_\u00A0\u202F\u2009](?=\d{3}(?!\d))/g;
/** What every THOUSANDS match is part of: a test for it scans twice as fast as the replace (most texts have none). */
const MAY_GROUP = /\d[,'’_\u00A0\u202F\u2009]\d\d\d/;
/** `text` with its thousands separators dropped. */
export function ungroup(text: string): string {
  return MAY_GROUP.test(text) ? text.replace(THOUSANDS, '$1') : text;
}
export const PERCENT_WORD = /(\d) ?per ?cent(?![A-Za-z])/gi;
/** What any step of prepare needs: MAY_GROUP, NON_ASCII or `/per ?cent/i`, in one scan. */
const MAY_PREPARE = new RegExp(`${MAY_GROUP.source}|${NON_ASCII.source}|[Pp][Ee][Rr] ?[Cc][Ee][Nn][Tt]`);
