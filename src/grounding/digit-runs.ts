// The runs of digits of a text, and for each the patterns that may start a
// match there: computed once per text (and again after masking), so that each
// digit-anchored pattern is tried only where it can match.
import { isAsciiAlnum, isAsciiDigit, isAsciiLetterIn, isAsciiUpper, isSpaceAt, letterSet } from './chars.ts';
import { PER_PAUSE, type Sliced, pausing } from './slices.ts';

/**
 * The runs of ASCII digits of a text: where each starts (`starts`, in order),
 * and for each the patterns (S_ bits) a match of which can hold it as its
 * first run of digits (`kinds`). Each bit is a test the pattern itself makes
 * (its look-behind; the few characters it allows after one or two digits: a
 * day, an hour, a slashed date's part; a month name or a currency code
 * before), computed once per run for all patterns, not once per pattern.
 */
export interface Runs {
  starts: number[];
  kinds: number[];
}
export const S_ISO = 1 << 0;
export const S_MONTH = 1 << 1;
export const S_DAY_MONTH = 1 << 2;
export const S_SLASHED = 1 << 3;
export const S_TIME = 1 << 4;
export const S_MONEY_WORD = 1 << 5;
export const S_MONEY_CODE = 1 << 6;
export const S_VERSION = 1 << 7;
export const S_NUMBER = 1 << 8;
export const S_YEAR_FIRST = 1 << 9;
export const S_DOT = 1 << 10;

/** The runs of digits of `text` (a regex scan: a loop over the characters costs three times as much). */
export function* runsOf(text: string): Sliced<Runs> {
  const starts: number[] = [];
  DIGIT_RUN.lastIndex = 0;
  for (let m = DIGIT_RUN.exec(text); m !== null; m = DIGIT_RUN.exec(text)) {
    starts.push(m.index);
    if (starts.length % PER_PAUSE === 0) yield* pausing(DIGIT_RUN);
  }
  return { starts, kinds: yield* kindsOf(text, starts) };
}
const DIGIT_RUN = /\d+/g;
export const NO_RUNS: Runs = { starts: [], kinds: [] };

/** The S_ bits of each start of `starts` in `text` as it is now (0: not the start of a run of digits, or masked). */
export function* kindsOf(text: string, starts: readonly number[]): Sliced<number[]> {
  // A plain array: a typed one this small is allocated outside the heap, which costs more than all the tests.
  const kinds: number[] = [];
  for (let i = 0; i < starts.length; i++) {
    if (i % PER_PAUSE === PER_PAUSE - 1) yield;
    const d = starts[i]!;
    const before = text.charCodeAt(d - 1);
    kinds.push(0);
    if (!isAsciiDigit(text.charCodeAt(d)) || isAsciiDigit(before)) continue;
    let e = d + 1;
    while (isAsciiDigit(text.charCodeAt(e))) e++;
    const after = text.charCodeAt(e);
    const short = e - d <= 2;
    const spaceAfter = isSpaceAt(text, e);
    const spaceBefore = isSpaceAt(text, d - 1);
    let k = 0;
    if (!isAsciiAlnum(before)) {
      // (?<![A-Za-z0-9]) YYYY-
      if (text.charCodeAt(d + 4) === 0x2d) k |= S_ISO;
      // (?<![A-Za-z0-9]) \d{1,2} (st|nd|rd|th)? \s+ ... month
      if (short && (spaceAfter || isAsciiLetterIn(after, ORDINAL_FIRST))) k |= S_DAY_MONTH;
      // (?<![A-Za-z0-9./]) \d{1,2} [./]
      if (short && (after === 0x2e || after === 0x2f) && before !== 0x2e && before !== 0x2f) k |= S_SLASHED;
      // (?<![A-Za-z0-9:]) \d{1,2} :  or  (?<![A-Za-z0-9]) \d{1,2} \s? [ap]
      if (short && (after === 0x3a || spaceAfter || isAsciiLetterIn(after, HALF_DAY))) k |= S_TIME;
      // (?<![A-Za-z0-9.,]) amount, then its decimal part, or white space, or a scale or currency word
      if (before !== 0x2e && before !== 0x2c) {
        k |= S_NUMBER;
        if (
          after === 0x2e ||
          after === 0x2c ||
          spaceAfter ||
          isAsciiLetterIn(after, MONEY_WORD_FIRST) ||
          after === 0x5186 ||
          after === 0x5143 ||
          after === 0xc6d0
        )
          k |= S_MONEY_WORD;
      }
      // (?<![A-Za-z0-9.]) \d+ \.
      if (after === 0x2e && before !== 0x2e) k |= S_VERSION;
      // (?<![A-Za-z0-9./]) \d{4} (/ | \.\s)
      if (e - d === 4 && before !== 0x2e && before !== 0x2f && (after === 0x2f || (after === 0x2e && isSpaceAt(text, e + 1))))
        k |= S_YEAR_FIRST;
      // (?<![A-Za-z0-9.,]) \. \d+: a decimal without its leading zero (DOT_NUMBER), starting at its point.
      if (before === 0x2e) {
        const b = text.charCodeAt(d - 2);
        if (!isAsciiAlnum(b) && b !== 0x2e && b !== 0x2c) k |= S_DOT;
      }
    } else {
      // (?<![A-Za-z0-9.]) [vV] \d+ \.  (the look-behind is the regex's to check)
      if ((before | 0x20) === 0x76 && after === 0x2e) k |= S_VERSION;
      // The time of an ISO 8601 date-time: (?<![A-Za-z0-9]) [Tt] \d{1,2} :
      if ((before | 0x20) === 0x74 && short && after === 0x3a && !isAsciiAlnum(text.charCodeAt(d - 2))) k |= S_TIME;
    }
    // A month name, white space, the digits: MONTH \s+ DAY, MONTH \s+ YEAR.
    if (spaceBefore) k |= S_MONTH;
    // \b (USD|EUR|...) \s? amount: three capitals right before the digits, or before one white-space character before them.
    const code = spaceBefore ? d - 4 : d - 3;
    if (
      code >= 0 &&
      isAsciiUpper(text.charCodeAt(code)) &&
      isAsciiUpper(text.charCodeAt(code + 1)) &&
      isAsciiUpper(text.charCodeAt(code + 2))
    )
      k |= S_MONEY_CODE;
    kinds[i] = k;
  }
  return kinds;
}
/** First letters of `st` `nd` `rd` `th`; of `am` `pm`; of a scale or currency word after an amount (SCALE, CURRENCY_WORD). */
export const ORDINAL_FIRST = letterSet('snrt');
const HALF_DAY = letterSet('ap');
const MONEY_WORD_FIRST = letterSet('kmbtudegpjyirca');
