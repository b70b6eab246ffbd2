// Grounding patterns: what each kind of fact looks like, in the order kinds win
// (earlier first); digit-runs.ts tells which of them may match where.
import { type FactKind } from '../support/summary-contract.ts';
import { NON_ASCII, isAsciiDigit, isAsciiLetter, isAsciiLetterIn, isSpaceAt, isWordAt } from './chars.ts';
import {
  canonicalNumber,
  cjkDateKey,
  dropTrailing,
  identifierKey,
  isCheckedNumber,
  isoKey,
  moneyKey,
  monthNumber,
  numberKey,
  slashedKey,
  timeKey,
  trimTrailing,
} from './keys.ts';
import { PER_PAUSE, type Sliced, pausing } from './slices.ts';
import {
  ORDINAL_FIRST,
  type Runs,
  S_DAY_MONTH,
  S_DOT,
  S_ISO,
  S_MONEY_CODE,
  S_MONEY_WORD,
  S_MONTH,
  S_NUMBER,
  S_SLASHED,
  S_TIME,
  S_VERSION,
  S_YEAR_FIRST,
} from './digit-runs.ts';
import {
  AMOUNT,
  AMOUNT_END,
  ANY_UNIT,
  CURRENCY_SYMBOL,
  CURRENCY_WORD,
  DAY,
  FIGURE_TOKEN,
  MONTH,
  SCALE,
  SCALE_ANY_CASE,
  SPACED_UNIT,
  YEAR,
  isFigureTokenAscii,
} from './tables.ts';

/** One match of a kind: where it is, what it is, and its key (null: not a fact after all, but masked). */
interface Match {
  index: number;
  /** The span masked for later kinds. */
  length: number;
  /** The fact's text (may be shorter than the span: trailing punctuation trimmed). */
  text: string;
  key: string | null;
  /** False for a figure that is not checked (a small bare integer): masked, not a fact. */
  checked?: boolean;
}

export interface Pattern {
  kind: FactKind;
  /**
   * The matches in `text`, whose runs of digits are `runs`, pausing every
   * PER_PAUSE places tried (a regex whose lastIndex carries from one match
   * to the next keeps it through a pause: `pausing`).
   */
  find(text: string, runs: Runs): Sliced<Match[]>;
  /** Every match contains one of these: a text without any is not searched (`includes` is much cheaper than the pattern). */
  needs?: readonly string[];
}

/**
 * Patterns that need case-insensitive matching use ASCII classes only, and
 * those that need Unicode letters anchor on one character (`@`, `/`, a
 * digit) and look around it: V8 runs `iu` regexes and unanchored `\p{L}`
 * scans many times slower, and the check must stay a small part of a commit.
 */
function byRegex(
  regex: RegExp,
  key: (m: RegExpExecArray) => string | null,
  text?: (m: RegExpExecArray) => string,
): (input: string) => Sliced<Match[]> {
  return function* find(input: string) {
    const out: Match[] = [];
    regex.lastIndex = 0;
    let n = 0;
    for (let m = regex.exec(input); m !== null; m = regex.exec(input)) {
      if (++n % PER_PAUSE === 0) yield* pausing(regex);
      if (m[0].length === 0) {
        regex.lastIndex++;
        continue;
      }
      out.push({ index: m.index, length: m[0].length, text: text ? text(m) : m[0], key: key(m) });
    }
    return out;
  };
}

/**
 * A pattern that every match of which has an ASCII digit, and whose start can
 * be told from that digit: `start(text, d)` gives, for the digit at `d`, the
 * one place a match holding that digit first can start, or -1 when no match
 * can (a cheap necessary test, e.g. the pattern's own look-behind). `regex`
 * (sticky) is then tried only there, in order, each at or after the end of
 * the last match: the same matches as the global regex scanning every place
 * (the leftmost match at or after the last one's end starts at one of these
 * places), at a fraction of the cost on long texts with few figures.
 */
function byStart(regex: RegExp, start: number, key: (m: RegExpExecArray) => string | null): (input: string, runs: Runs) => Sliced<Match[]> {
  if (!regex.sticky || regex.global) throw new Error(`byStart: ${regex} must be sticky, not global`);
  return function* find(input: string, runs: Runs) {
    const out: Match[] = [];
    const { starts, kinds } = runs;
    let next = 0;
    for (let i = 0; i < starts.length; i++) {
      if (i % PER_PAUSE === PER_PAUSE - 1) yield;
      if ((kinds[i]! & start) === 0) continue;
      const d = starts[i]!;
      const at =
        start === S_MONTH
          ? monthStart(input, d)
          : start === S_MONEY_CODE
            ? isSpaceAt(input, d - 1)
              ? d - 4
              : d - 3
            : start === S_VERSION && (input.charCodeAt(d - 1) | 0x20) === 0x76
              ? d - 1
              : start === S_DOT
                ? d - 1
                : d;
      if (at < next) continue;
      regex.lastIndex = at;
      const m = regex.exec(input);
      if (m === null) continue;
      next = at + m[0].length;
      out.push({ index: at, length: m[0].length, text: m[0], key: key(m) });
    }
    return out;
  };
}

/**
 * A month name, an optional `.`, white space, then the digit `d`: the start
 * of the month name (the ASCII letters before the `.` and the white space;
 * the patterns require a non-letter before the name and every name is ASCII
 * letters only, so the name is all of them), else -1.
 */
function monthStart(text: string, d: number): number {
  let j = d - 1;
  while (j >= 0 && isSpaceAt(text, j)) j--;
  if (j === d - 1) return -1;
  if (text.charCodeAt(j) === 0x2e) j--;
  let k = j;
  while (k >= 0 && isAsciiLetter(text.charCodeAt(k))) k--;
  return k === j ? -1 : k + 1;
}

/** The non-space token around `at`, bounded by white space and quoting characters. */
function tokenAround(text: string, at: number, stop: RegExp): [number, number] {
  let from = at;
  while (from > 0 && !stop.test(text[from - 1]!)) from--;
  let to = at + 1;
  while (to < text.length && !stop.test(text[to]!)) to++;
  return [from, to];
}

function* around(
  input: string,
  anchor: RegExp,
  stop: RegExp,
  judge: (token: string) => { text: string; key: string } | null,
): Sliced<Match[]> {
  const out: Match[] = [];
  anchor.lastIndex = 0;
  let consumed = -1;
  let n = 0;
  for (let m = anchor.exec(input); m !== null; m = anchor.exec(input)) {
    if (++n % PER_PAUSE === 0) yield* pausing(anchor);
    if (m.index < consumed) continue;
    const [from, to] = tokenAround(input, m.index, stop);
    consumed = to;
    const judged = judge(input.slice(from, to));
    if (judged !== null) out.push({ index: from, length: to - from, text: judged.text, key: judged.key });
  }
  return out;
}

const EMAIL = /^[\p{L}\p{N}._%+-]+@[\p{L}\p{N}-]+(?:\.[\p{L}\p{N}-]+)*\.\p{L}{2,}$/u;
const PATH =
  /^(?:(?:~|\.{1,2})?\/[\p{L}\p{N}._@%+-]+(?:\/[\p{L}\p{N}._@%+-]*)*|[A-Za-z]:\\[^\s"'<>|]+|[\p{L}\p{N}._-]+(?:[\/\\][\p{L}\p{N}._@-]+)+\.[A-Za-z][A-Za-z0-9]{0,7})$/u;
const IDENTIFIER = /^[\p{L}\p{N}]+(?:[-_.#+][\p{L}\p{N}]+)*$/u;

function pathFact(token: string): { text: string; key: string } | null {
  const t = trimTrailing(token.replace(/^[(\[{<*_]+/, ''));
  if (!PATH.test(t)) return null;
  // A path has a letter and is not a fraction, a date or a unit ratio (km/h, MB/s).
  if (!/\p{L}/u.test(t) || /^[\d./]+$/.test(t)) return null;
  if (!/^[~./]|^[A-Za-z]:\\/.test(t) && !/\.[A-Za-z][A-Za-z0-9]{0,7}$/.test(t)) return null;
  return { text: t, key: t };
}

/** Identifiers: the token of letters, digits and inner connectors around each digit, when it has a letter too. */
function* identifiers(input: string, { starts }: Runs): Sliced<Match[]> {
  const out: Match[] = [];
  let consumed = -1;
  for (let i = 0; i < starts.length; i++) {
    if (i % PER_PAUSE === PER_PAUSE - 1) yield;
    const index = starts[i]!;
    if (index < consumed || !isAsciiDigit(input.charCodeAt(index))) continue;
    let from = index;
    for (;;) {
      if (isWordAt(input, from - 1)) {
        from--;
        continue;
      }
      if (isConnector(input.charCodeAt(from - 1)) && isWordAt(input, from - 2)) {
        from -= 2;
        continue;
      }
      break;
    }
    let to = index + 1;
    for (;;) {
      if (isWordAt(input, to)) {
        to++;
        continue;
      }
      if (isConnector(input.charCodeAt(to)) && isWordAt(input, to + 1)) {
        to += 2;
        continue;
      }
      break;
    }
    consumed = to;
    const t = input.slice(from, to);
    // On ASCII, the same tests without Unicode classes (V8 runs those much slower).
    const ascii = !NON_ASCII.test(t);
    // (An ASCII token built as above always has IDENTIFIER's shape: word characters, each
    // connector between two.)
    if (ascii ? !/[A-Za-z]/.test(t) : !/\p{L}/u.test(t) || !IDENTIFIER.test(t)) continue;
    if (/^\d+(?:st|nd|rd|th)$/i.test(t)) continue; // ordinals
    if (ascii ? isFigureTokenAscii(t) : FIGURE_TOKEN.test(t)) continue; // a figure with its unit: 12kg, 5-day, 3.5GB
    out.push({ index: from, length: to - from, text: t, key: identifierKey(t) });
  }
  return out;
}
/** `-` `_` `.` `#` `+` inside an identifier. */
const isConnector = (c: number): boolean => c === 0x2d || c === 0x5f || c === 0x2e || c === 0x23 || c === 0x2b;

const ORDINAL = /(?<![A-Za-z0-9.,])(\d+)(?:st|nd|rd|th)(?![A-Za-z0-9])/iy;
/** The ordinal at `d` as a number match, or null. */
function ordinalAt(input: string, d: number): Match | null {
  ORDINAL.lastIndex = d;
  const m = ORDINAL.exec(input);
  return m === null
    ? null
    : { index: d, length: m[0].length, text: m[0], key: canonicalNumber(m[1]!), checked: isCheckedNumber(m[1]!, null) };
}
/** The end of the run of ASCII digits that starts at `d`. */
function runEnd(text: string, d: number): number {
  let e = d;
  while (isAsciiDigit(text.charCodeAt(e))) e++;
  return e;
}
const YEAR_FIRST_DATE = /(?<![A-Za-z0-9.\/])(\d{4})(?:\/(\d{1,2})\/(\d{1,2})|\.\s(\d{1,2})\.\s(\d{1,2})\.?)(?![A-Za-z0-9]|[./]\d)/y;
const CJK_DATE = /(?<![A-Za-z0-9])(?:(\d{4})\s?[年년]\s?)?(\d{1,2})\s?[月월](?:\s?(\d{1,2})\s?[日号일])?/g;
/** A scale word followed by a unit (`4.5 billion years`, `225 million km`): both read, the figure multiplied out. */
const SCALE_THEN = String.raw`(thousand|million|billion|trillion|mn|bn) (${SPACED_UNIT})`;
/** A decimal without its leading zero: a `.` no letter, digit, `.` or `,` comes before, digits, maybe a unit. */
const DOT_NUMBER = new RegExp(
  String.raw`(?<![A-Za-z0-9.,])\.(\d+)(?:[ \t\u00A0-]?(${SPACED_UNIT})|(${ANY_UNIT}))?(?![A-Za-z0-9°]|[.,]\d)`,
  'iy',
);
const NUMBER = new RegExp(
  String.raw`(?<![A-Za-z0-9.,])(\d+(?:[.,']\d+)*)(?:[ \t\u00A0-]?${SCALE_THEN}|[ \t\u00A0-]?(${SPACED_UNIT})|(${ANY_UNIT}))?(?![A-Za-z0-9°])`,
  'iy',
);

export const PATTERNS: readonly Pattern[] = [
  // Quoted code: fenced blocks (fences at line starts), then inline spans on one line.
  { kind: 'code', find: byRegex(/^[ \t]*```[^\n`]*\n([^]*?)\n[ \t]*```/gm, (m) => m[1]!.trim()), needs: ['```'] },
  { kind: 'code', find: byRegex(/(?<!`)`([^`\n]{1,400})`(?!`)/g, (m) => m[1]!.trim()), needs: ['`'] },
  {
    kind: 'url',
    find: byRegex(
      /(?<![A-Za-z0-9])(?:(?:https?|ftp):\/\/|www\.)[^\s<>"'`]+/gi,
      (m) =>
        dropTrailing(
          trimTrailing(m[0])
            .toLowerCase()
            .replace(/^(?:https?|ftp):\/\//, '')
            .replace(/^www\./, ''),
          '/',
        ),
      (m) => trimTrailing(m[0]),
    ),
  },
  {
    kind: 'email',
    find: (input) =>
      around(input, /@/g, /[\s<>()[\]"',;:`]/, (token) => {
        const t = trimTrailing(token);
        return EMAIL.test(t) ? { text: t, key: t.toLowerCase() } : null;
      }),
  },
  { kind: 'path', find: (input) => around(input, /[\/\\]/g, /[\s"'`<>|]/, pathFact) },
  // From here on every kind but money after a symbol has a digit: each is tried only where a
  // digit says a match can start (byStart), not at every place of the text.
  // Dates written with 年 月 日 (Chinese, Japanese) or 년 월 일 (Korean): `2024年3月5日`, `3月5日`, `2024년 3월`.
  { kind: 'date', find: byRegex(CJK_DATE, (m) => cjkDateKey(m[1] ?? null, m[2]!, m[3] ?? null)), needs: ['月', '월'] },
  {
    kind: 'date',
    find: byStart(
      new RegExp(String.raw`(?<![A-Za-z0-9])${YEAR}-(\d{1,2})-(\d{1,2})(?![A-SU-Za-su-z0-9]|[Tt](?!\d)|-\d)`, 'y'),
      S_ISO,
      (m) => isoKey(m[1]!, m[2]!, m[3]!),
    ),
    needs: ['-'],
  },
  // Year first with slashes (`2024/03/06`: Japan, China) or dots and spaces (`2024. 3. 6.`: Korea): unambiguous.
  { kind: 'date', find: byStart(YEAR_FIRST_DATE, S_YEAR_FIRST, (m) => isoKey(m[1]!, m[2] ?? m[4]!, m[3] ?? m[5]!)) },
  {
    kind: 'date',
    find: byStart(
      new RegExp(String.raw`(?<![A-Za-z])(${MONTH})\s+${DAY}(?![A-Za-z0-9])(?:,?\s+${YEAR}(?![A-Za-z0-9]))?`, 'iy'),
      S_MONTH,
      (m) => isoKey(m[3] ?? null, monthNumber(m[1]!), m[2]!),
    ),
  },
  {
    kind: 'date',
    find: byStart(
      new RegExp(String.raw`(?<![A-Za-z0-9])${DAY}(?:\s+of)?\s+(${MONTH})(?:,?\s+${YEAR})?(?![A-Za-z0-9])`, 'iy'),
      S_DAY_MONTH,
      (m) => isoKey(m[3] ?? null, monthNumber(m[2]!), m[1]!),
    ),
  },
  {
    kind: 'date',
    find: byStart(
      new RegExp(String.raw`(?<![A-Za-z])(${MONTH})\s+${YEAR}(?![A-Za-z0-9])`, 'iy'),
      S_MONTH,
      (m) => `${m[2]}-${monthNumber(m[1]!)}`,
    ),
  },
  {
    kind: 'date',
    find: byStart(/(?<![A-Za-z0-9.\/])\d{1,2}[./]\d{1,2}[./](?:\d{4}|\d{2})(?![A-Za-z0-9]|[./]\d)/y, S_SLASHED, (m) => slashedKey(m[0])),
  },
  {
    kind: 'time',
    find: byStart(
      /(?<![A-SU-Za-su-z0-9:]|[A-Za-z0-9][Tt])(\d{1,2}):(\d{2})(?::(\d{2}))?(?:\s?([ap])\.?m\.?)?(?![A-Ya-y0-9]|[Zz][A-Za-z0-9]|:\d)|(?<![A-Za-z0-9])(\d{1,2})\s?([ap])\.?m\.?(?![A-Za-z0-9])/iy,
      S_TIME,
      (m) => timeKey(m[1] ?? m[5]!, m[2] ?? '00', m[3] ?? null, m[4] ?? m[6] ?? null),
    ),
  },
  {
    kind: 'money',
    find: byRegex(new RegExp(String.raw`(US\$|[$€£¥₹])\s?${AMOUNT}${SCALE}${AMOUNT_END}`, 'gi'), (m) =>
      moneyKey(CURRENCY_SYMBOL[m[1]!.toLowerCase()] ?? m[1]!, m[2]!, m[3]),
    ),
    needs: ['$', '€', '£', '¥', '₹'],
  },
  // The symbol after the amount (`50 €`, `1.234,56 €`; not after a figure and a space: `1 000 €` may be one amount, and
  // a plain space is no separator): tried where a number can start (S_NUMBER: the look-behind, but for that).
  {
    kind: 'money',
    find: byStart(new RegExp(String.raw`(?<![A-Za-z0-9.,]|\d\s)${AMOUNT}\s?([$€£¥₹])(?![A-Za-z0-9])`, 'y'), S_NUMBER, (m) =>
      moneyKey(CURRENCY_SYMBOL[m[2]!]!, m[1]!, undefined),
    ),
    needs: ['$', '€', '£', '¥', '₹'],
  },
  {
    kind: 'money',
    find: byStart(
      new RegExp(String.raw`(?<![A-Za-z0-9.,])${AMOUNT}${SCALE}\s?(${Object.keys(CURRENCY_WORD).join('|')})(?![A-Za-z0-9])`, 'iy'),
      S_MONEY_WORD,
      (m) => moneyKey(CURRENCY_WORD[m[3]!.toLowerCase()]!, m[1]!, m[2]),
    ),
  },
  {
    kind: 'money',
    find: byStart(
      new RegExp(String.raw`\b(USD|EUR|GBP|JPY|INR|CHF|CAD|AUD|CNY)\s?${AMOUNT}${SCALE_ANY_CASE}${AMOUNT_END}`, 'y'),
      S_MONEY_CODE,
      (m) => moneyKey(CURRENCY_WORD[m[1]!.toLowerCase()]!, m[2]!, m[3]),
    ),
  },
  {
    kind: 'version',
    find: byStart(
      /(?<![A-Za-z0-9.])(?:[vV]\d+(?:\.\d+)+|\d+\.\d+\.\d+(?:\.\d+)*)(?:-[0-9A-Za-z]+(?:\.[0-9A-Za-z]+)*)?(?![A-Za-z0-9]|\.\d)/y,
      S_VERSION,
      (m) => m[0].toLowerCase().replace(/^v/, ''),
    ),
  },
  { kind: 'identifier', find: identifiers },
  {
    kind: 'number',
    find: function* numbers(input, { starts, kinds }) {
      const out: Match[] = [];
      let next = 0;
      for (let i = 0; i < starts.length; i++) {
        if (i % PER_PAUSE === PER_PAUSE - 1) yield;
        const d = starts[i]!;
        if (d < next || (kinds[i]! & S_NUMBER) === 0) continue;
        NUMBER.lastIndex = d;
        const m = NUMBER.exec(input);
        if (m === null) {
          // Ordinals (`125th`): their number, checked as a bare one. NUMBER never matches in one (a
          // letter follows its digits) and identifiers leave them.
          const ordinal = isAsciiLetterIn(input.charCodeAt(runEnd(input, d)), ORDINAL_FIRST) ? ordinalAt(input, d) : null;
          if (ordinal !== null) out.push(ordinal);
          continue;
        }
        next = d + m[0].length;
        const unit = m[2] ?? m[4] ?? m[5] ?? null;
        out.push({
          index: d,
          length: m[0].length,
          text: m[0],
          key: numberKey(m[1]!, unit, m[3] ?? null),
          checked: isCheckedNumber(m[1]!, unit),
        });
      }
      return out;
    },
  }, // A decimal written without its leading zero (`.5%`, `.45 in`): the figure with it, after every other kind.
  { kind: 'number', find: byStart(DOT_NUMBER, S_DOT, (m) => numberKey(`0.${m[1]}`, m[2] ?? m[3] ?? null)) },
];
