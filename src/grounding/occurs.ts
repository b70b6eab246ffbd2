// Grounding by occurrence: a fact found as written in the material, between
// token boundaries (the second half of "Grounded" in src/grounding/index.ts).
import { type Fact } from '../support/summary-contract.ts';
import { NON_ASCII, UNSPACED, WORD_CHAR, WORD_START, escapeRegex, isAsciiAlnum, isAsciiDigit } from './chars.ts';
import { type MaterialIndex, type NormalizedMaterial } from './material-index.ts';
import { PERCENT_WORD, THOUSANDS, normalizeText } from './normalize.ts';

/** The fact's normalized text in the normalized material (code: without white space; paths and code: with case). */
export function occursAsWritten(fact: Fact, index: NormalizedMaterial): boolean {
  switch (fact.kind) {
    case 'code': {
      const needle = normalizeText(fact.key).replace(/\s+/g, '');
      return needle.length === 0 || index.compact().includes(needle);
    }
    case 'path': {
      const path = normalizeText(fact.text);
      // `./src/a.ts` is `src/a.ts`; a Windows path as JSON writes it has its backslashes doubled.
      return (
        occurs(index.exact, path, fact.truncated) ||
        (path.startsWith('./') && occurs(index.exact, path.slice(2), fact.truncated)) ||
        (path.includes('\\') && occurs(index.exact, path.replace(/\\/g, '\\\\'), fact.truncated))
      );
    }
    default:
      return (
        occurs(index.folded, normalizeText(fact.text).toLowerCase(), fact.truncated) ||
        (fact.kind === 'version' && occurs(index.folded, fact.key, fact.truncated))
      );
  }
}

/**
 * The fast path of `occursAsWritten`, on the raw material: the fact's
 * normalized text, as written (case kept), where normalizing the material
 * provably leaves it and its boundaries as they are. True only when
 * `occursAsWritten` is true too; false means "ask the normalized material",
 * which is then built (NFKC, separators, white space, case folding of the
 * whole material cost more than the rest of the check together).
 */
export function occursUnchanged(fact: Fact, raw: string, ids: MaterialIndex['ids']): boolean {
  if (fact.kind === 'code') {
    const needle = normalizeText(fact.key).replace(/\s+/g, '');
    return needle.length === 0 || unchangedIn(raw, ids, needle, false, true);
  }
  return unchangedIn(raw, ids, normalizeText(fact.text), true, fact.truncated);
}
export const NO_IDS: MaterialIndex['ids'] = [];

/**
 * `needle` (pure ASCII, white space only as single inner spaces) at a place
 * of `raw` where normalizeText changes nothing in it or next to it. Why each
 * test suffices:
 * - NFKC leaves an ASCII character as it is unless a combining mark follows
 *   it, so the window around the place is required to be ASCII (its margin
 *   covers every rule's context below);
 * - a thousands separator is dropped only between digits: none may be
 *   dropped from the needle, right before it or in the two characters after;
 * - `per cent` rewritten as `%` (at most ten characters and one of
 *   look-ahead) must not touch the needle or its neighbours;
 * - a single space between two other characters stays as it is (the
 *   needle's own, which has no space before a `%`); white space next to the
 *   needle stays white space (one space) or is dropped before a `%`: either
 *   way not a letter, a digit or `.`/`,` (the needle does not start with `%`);
 * - ASCII case folding is one character for one, so the case-folded
 *   comparison of `occurs` finds the same place.
 * With `bounded`, the token boundaries of `occurs` are checked on the raw
 * characters, which the tests above keep as they are.
 */
function unchangedIn(raw: string, ids: MaterialIndex['ids'], needle: string, bounded: boolean, prefix: boolean): boolean {
  if (needle.length === 0 || NON_ASCII.test(needle) || LAYOUT.test(needle) || needle[0] === '%' || needle.includes(' %')) return false;
  // Any place that passes will do: the items' ids first (a reply's tag is the start of its id; the
  // scan of the whole material would read every reply before it), then the whole material; at most
  // OCCURRENCES_TRIED of them (false only sends the fact to the normalized material).
  let tried = 0;
  for (const { id, at: start } of ids) {
    for (let at = id.indexOf(needle); at !== -1 && tried++ < OCCURRENCES_TRIED; at = id.indexOf(needle, at + 1)) {
      if (unchangedAt(raw, start + at, needle.length, bounded, prefix)) return true;
    }
  }
  for (let at = raw.indexOf(needle); at !== -1 && tried++ < OCCURRENCES_TRIED; at = raw.indexOf(needle, at + 1)) {
    if (unchangedAt(raw, at, needle.length, bounded, prefix)) return true;
  }
  return false;
}

/** Whether the needle of `n` characters found at `at` of `raw` passes the tests of unchangedIn. */
function unchangedAt(raw: string, at: number, n: number, bounded: boolean, prefix: boolean): boolean {
  if (bounded) {
    const before = raw.charCodeAt(at - 1);
    if (isAsciiAlnum(before) || isGroupMark(before)) return false;
    // A figure's decimal part is no figure (`5%` is not in `0.5%`).
    if (before === 0x2e && isAsciiDigit(raw.charCodeAt(at)) && isAsciiDigit(raw.charCodeAt(at - 2))) return false;
    const after = raw.charCodeAt(at + n);
    if (!prefix && (isAsciiAlnum(after) || ((after === 0x2e || isGroupMark(after)) && isAsciiDigit(raw.charCodeAt(at + n + 1)))))
      return false;
  }
  // A hard neighbour ends the context on its side: no rule reaches across it.
  const hardBefore = isHard(raw.charCodeAt(at - 1));
  const hardAfter = isHard(raw.charCodeAt(at + n));
  const from = hardBefore ? at - 1 : Math.max(0, at - UNCHANGED_MARGIN);
  const window = raw.slice(from, hardAfter ? at + n + 2 : at + n + UNCHANGED_MARGIN);
  if (NON_ASCII.test(window)) return false;
  // The range of the window that must come out unchanged: the character before the needle to the
  // second after it (the first after it, when that one is hard: it alone decides the boundary).
  const lo = at - 1 - from;
  const hi = at + n + (hardAfter ? 1 : 2) - from;
  if (/[,'_]/.test(window) && touches(THOUSANDS, window, lo, hi, 1, 1)) return false;
  if (/cent/i.test(window) && touches(PERCENT_WORD, window, lo, hi, 0, 0)) return false;
  return true;
}

/**
 * Covers a `per cent` rewrite (ten characters and one of look-ahead) that
 * reaches the needle's neighbours, and a separator's three digits and the one after.
 */
const UNCHANGED_MARGIN = 13;
/** White space other than single inner spaces (a normalized needle has none of it). */
const LAYOUT = /[^\S ]|  |^ | $/;
/**
 * An ASCII character no rule of normalizeText uses or reads past: not a
 * letter, digit, space, `.`, `%` or thousands separator (`per cent`, `50 %`
 * and `1,234` are made of those only). White space other than a space is
 * hard: it becomes a space, and nothing reads across it.
 */
const isHard = (c: number): boolean => c < 0x80 && !isAsciiAlnum(c) && c !== 0x20 && c !== 0x2e && c !== 0x25 && !isGroupMark(c);
/** The ASCII thousands separators of THOUSANDS: `,` `'` `_`. */
const isGroupMark = (c: number): boolean => c === 0x2c || c === 0x27 || c === 0x5f;

/** Whether a match of `regex` in `text`, shrunk by `skip` at its start and cut to `keep` characters (0: all), overlaps [lo, hi). */
function touches(regex: RegExp, text: string, lo: number, hi: number, skip: number, keep: number): boolean {
  regex.lastIndex = 0;
  for (let m = regex.exec(text); m !== null; m = regex.exec(text)) {
    const start = m.index + skip;
    const end = keep > 0 ? start + keep : m.index + m[0].length;
    if (start < hi && end > lo) return true;
  }
  return false;
}

/** `needle` in `hay` with no letter or digit right before it, nor right after it unless `prefix`. */
export function occurs(hay: string, needle: string, prefix: boolean): boolean {
  if (needle.length === 0) return true;
  let tried = 0;
  for (let at = hay.indexOf(needle); at !== -1; at = hay.indexOf(needle, at + 1)) {
    if (++tried > OCCURRENCES_TRIED) return occursFrom(hay, needle, prefix, at);
    const before = at === 0 ? '' : hay[at - 1]!;
    const after = hay.slice(at + needle.length, at + needle.length + 2);
    if (WORD_CHAR.test(before)) continue;
    if (afterFigure(hay, at)) continue;
    if (!prefix && WORD_START.test(after)) continue;
    return true;
  }
  return false;
}
/** A digit at `at` of `hay` right after a digit and a `.` or `,`: the decimal part of a figure (`5` in `0.5`), no token. */
function afterFigure(hay: string, at: number): boolean {
  const before = hay.charCodeAt(at - 1);
  return (before === 0x2e || before === 0x2c) && isAsciiDigit(hay.charCodeAt(at)) && isAsciiDigit(hay.charCodeAt(at - 2));
}

/**
 * Places of a needle `occurs` and `unchangedIn` test one by one. Past them
 * (a figure that occurs everywhere but never as a token: `100` in
 * `a100100100…`), `unchangedIn` leaves the answer to the normalized material,
 * and `occurs` searches with a regex that makes the same tests: the cost of
 * a check stays linear in the material for each fact, not in the number of
 * places it occurs at (106 such figures took 8 s against 600 KB).
 */
const OCCURRENCES_TRIED = 64;

/**
 * `occurs` from `from` on, in one regex search: WORD_CHAR and afterFigure
 * before, WORD_START after. `occurs` reads the one UTF-16 unit before a place, where a regex
 * reads a code point: the class before excludes astral letters (the unit
 * before one is a low surrogate, which is no letter).
 */
function occursFrom(hay: string, needle: string, prefix: boolean, from: number): boolean {
  const after = prefix ? '' : `(?![[\\p{L}\\p{N}]--[${UNSPACED}]]|[.,]\\d)`;
  // afterFigure: not the decimal part of a figure.
  const figure = isAsciiDigit(needle.charCodeAt(0)) ? '(?<![0-9][.,])' : '';
  const search = new RegExp(`(?<![[\\p{L}\\p{N}]--[${UNSPACED}]--[\\u{10000}-\\u{10FFFF}]])${figure}${escapeRegex(needle)}${after}`, 'gv');
  search.lastIndex = from;
  return search.test(hay);
}
