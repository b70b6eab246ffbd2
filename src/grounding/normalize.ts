// Grounding normalization, steps 1-3 of the rules in src/grounding/index.ts:
// the same text transformation applied to summary and material.
import { NON_ASCII } from './chars.ts';
import { PER_PAUSE, type Sliced, pausing, whole } from './slices.ts';

/** Steps 1-2 of the normalization: NFKC, thousands separators dropped, white space collapsed. */
export function normalizeText(text: string): string {
  if (!MAY_CHANGE.test(text)) return text;
  return collapsed(prepare(text));
}

/**
 * `normalizeText` of the text that `prepared` is `prepare` of: the spaces
 * before `%` dropped, white space collapsed. Where MAY_CHANGE finds nothing,
 * `prepare` (whose test is part of MAY_CHANGE's) and this change nothing
 * either, so the result is `normalizeText`'s for every text.
 */
export function collapsed(prepared: string): string {
  const t = prepared.includes('%') ? prepared.replace(/(\d) +%/g, '$1%') : prepared;
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
  return MAY_PREPARE.test(text) ? whole(preparing(text)) : text;
}

/** `prepare`, pausing between its passes (each one over the whole text: the material's are the longest). */
export function* preparing(text: string): Sliced<string> {
  if (!MAY_PREPARE.test(text)) return text;
  // Before NFKC, which turns no-break and thin spaces into plain ones.
  let t = ungroup(text);
  // NFKC leaves ASCII as it is: a pure-ASCII text (most are) skips it.
  if (NON_ASCII.test(t)) {
    yield;
    const normalized = t.normalize('NFKC');
    yield;
    const nfkc = yield* foldingDigits(normalized);
    // Again when NFKC changed something: full-width digits are digits only after it.
    if (nfkc !== t) {
      yield;
      t = ungroup(nfkc);
    }
  }
  if (/per ?cent/i.test(t)) {
    yield;
    t = t.replace(PERCENT_WORD, '$1%');
  }
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
  return text.replace(FOLDABLE_ALL, folded);
}
/** What foldDigits makes of a match of FOLDABLE_ALL (`digit`: its group 1). */
function folded(c: string, digit?: string): string {
  return digit !== undefined
    ? foldDigit(digit)
    : c === '\u066B'
      ? '.'
      : c === '\u066C'
        ? ','
        : HYPHEN.test(c)
          ? '-'
          : DIGIT.test(c)
            ? foldDigit(c)
            : '';
}

/**
 * `foldDigits` of a long text, pausing after each piece of FOLD_PIECE
 * characters or so and every PER_PAUSE matches (a text of zero-width
 * spaces or Arabic digits is a match a character: 0.4 s at 600,000). A piece
 * ends before a character no match runs into: not a mark or an invisible
 * character (what a match goes on with after a digit) nor the second half of
 * a surrogate pair. Every other match is one character and FOLDABLE_ALL
 * looks behind nothing, so the pieces' matches are the whole text's; each
 * is replaced as `String.replace` does (no match is empty).
 */
function* foldingDigits(text: string): Sliced<string> {
  if (text.length <= FOLD_PIECE) return foldDigits(text);
  if (!MAY_FOLD.test(text)) return text;
  let out = '';
  let matches = 0;
  for (let from = 0; from < text.length;) {
    let to = Math.min(text.length, from + FOLD_PIECE);
    while (to < text.length && goesOn(text, to)) to++;
    const piece = text.slice(from, to);
    if (MAY_FOLD.test(piece)) {
      let last = 0;
      FOLDABLE_ALL.lastIndex = 0;
      for (let m = FOLDABLE_ALL.exec(piece); m !== null; m = FOLDABLE_ALL.exec(piece)) {
        out += piece.slice(last, m.index) + folded(m[0], m[1]);
        last = m.index + m[0].length;
        if (++matches % PER_PAUSE === 0) yield* pausing(FOLDABLE_ALL);
      }
      out += piece.slice(last);
    } else {
      out += piece;
    }
    from = to;
    yield;
  }
  return out;
}
const FOLD_PIECE = 16_384;
/** What a match of FOLDABLE_ALL may go on with after its digit. */
const GOES_ON = /[\p{M}\p{Default_Ignorable_Code_Point}]/uy;
/** Whether a match of FOLDABLE_ALL may run on into `at` of `text` (a piece may not end before it). */
function goesOn(text: string, at: number): boolean {
  const c = text.charCodeAt(at);
  if (c >= 0xdc00 && c <= 0xdfff) return true;
  if (c < 0x80) return false;
  GOES_ON.lastIndex = at;
  return GOES_ON.test(text);
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
const FOLDABLE_ALL =
  /(\p{Nd})[\p{M}\p{Default_Ignorable_Code_Point}]+|\p{Default_Ignorable_Code_Point}|(?![0-9])\p{Nd}|[\u066B\u066C\u2010-\u2012\u2212]/gu;
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
