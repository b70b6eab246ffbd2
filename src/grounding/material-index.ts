// The grounding material index: the material's fact keys and normalized text,
// built once per check, with the keys a range in the material grounds (rule 11).
import { type Fact, type MaterialItem } from '../support/summary-contract.ts';
import { preparedFacts } from './extract.ts';
import {
  NAME_THEN_FIGURE,
  attachedScale,
  canonicalNumber,
  dateReadings,
  identifierKey,
  isoKey,
  monthNumber,
  poundsWeight,
} from './keys.ts';
import { collapsed, preparing, ungroup } from './normalize.ts';
import { PER_PAUSE, type Sliced, pausing } from './slices.ts';
import { DAYS_MONTH, MONTH_DAYS } from './tables.ts';

export interface MaterialIndex {
  /** The material as given (items joined by newlines), not normalized: most facts are found here as written. */
  raw: string;
  /** The items' ids, each with the index of its first character in `raw` (a summary's reply tags are found in them first). */
  ids: readonly { id: string; at: number }[];
  /**
   * `raw` with its thousands separators dropped (the first step of normalizeText, which a second
   * time changes nothing), for a figure the summary wrote without them; null when there are none.
   */
  ungrouped(): string | null;
  /** The normalized forms and the material's own keys, built on first need (in slices: the longest passes of the check). */
  normalized(): Sliced<NormalizedMaterial>;
}

export interface NormalizedMaterial {
  /** Normalized, case-folded material (items separated by newlines). */
  folded: string;
  /** Normalized material with its case kept (code, paths). */
  exact: string;
  /** `exact` with all white space removed (quoted code is compared without layout). */
  compact(): string;
  /** `folded` without `-` and `_` (an identifier is compared without them, wherever it stands: in code too). */
  unhyphenated(): string;
  /** The keys of the material's own facts, extracted on first need (most facts are found as written). */
  keys(): Sliced<Set<string>>;
}

export function materialIndex(material: readonly MaterialItem[]): MaterialIndex {
  const raw = material.map((m) => `${m.id}\n${m.text}`).join('\n');
  const ids: { id: string; at: number }[] = [];
  let at = 0;
  for (const m of material) {
    ids.push({ id: m.id, at });
    at += m.id.length + m.text.length + 2;
  }
  let normalized: NormalizedMaterial | undefined;
  let ungrouped: string | null | undefined;
  return {
    raw,
    ids,
    ungrouped() {
      if (ungrouped === undefined) {
        const dropped = ungroup(raw);
        ungrouped = dropped === raw ? null : dropped;
      }
      return ungrouped;
    },
    *normalized() {
      return (normalized ??= yield* normalizeMaterial(raw));
    },
  };
}

function* normalizeMaterial(joined: string): Sliced<NormalizedMaterial> {
  // Prepared once: the normalized text and the material's facts both start from it.
  const prepared = yield* preparing(joined);
  yield;
  const exact = collapsed(prepared);
  yield;
  let keys: Set<string> | undefined;
  let compact: string | undefined;
  let unhyphenated: string | undefined;
  const folded = exact.toLowerCase();
  return {
    exact,
    folded,
    compact: () => (compact ??= exact.replace(/\s+/g, '')),
    unhyphenated: () => (unhyphenated ??= folded.replace(/[-_]/g, '')),
    *keys() {
      if (keys === undefined) {
        // Built whole before it is kept: a check that stops between its pauses leaves no partial set behind.
        const built = new Set<string>();
        let n = 0;
        for (const { fact } of yield* preparedFacts(prepared)) {
          for (const key of materialKeys(fact)) built.add(key);
          if (++n % PER_PAUSE === 0) yield;
        }
        // A name and its number written apart (`ISO 8601`, `RFC 7231`) ground the identifier written
        // as one (`ISO-8601`, `RFC7231`).
        SPACED_IDENTIFIER.lastIndex = 0;
        for (let m = SPACED_IDENTIFIER.exec(exact); m !== null; m = SPACED_IDENTIFIER.exec(exact)) {
          built.add(`identifier:${identifierKey(`${m[1]}${m[2]}`)}`);
          // `Python 3.11` grounds `Python3` too, as `Python 3` did.
          if (m[2]!.includes('.')) built.add(`identifier:${identifierKey(`${m[1]}${m[2]!.slice(0, m[2]!.indexOf('.'))}`)}`);
          if (++n % PER_PAUSE === 0) yield* pausing(SPACED_IDENTIFIER);
        }
        // Groups of three digits after plain spaces (`50 000`, French and SI style): also the figure
        // they may be (`50,000` in a summary); the summary's own spaces stay no separator.
        SPACED_GROUPS.lastIndex = 0;
        for (let m = SPACED_GROUPS.exec(exact); m !== null; m = SPACED_GROUPS.exec(exact)) {
          built.add(`n:${canonicalNumber(m[0].replace(/ /g, ''))}`);
          if (++n % PER_PAUSE === 0) yield* pausing(SPACED_GROUPS);
        }
        for (const key of yield* rangeKeys(exact)) built.add(key);
        keys = built;
      }
      return keys;
    },
  };
}

/**
 * A range that writes its unit or currency once (`10-20%`, `3 to 4 days`,
 * `10–20 million dollars`, `$10-20`, `between 10 and 20 kg`): the keys of
 * each end written with it (`10%`, `3 days`, `10 million dollars`, `$20`),
 * as `range:` keys (rule 11). The first end takes what follows the second
 * (`2pm` of `2-4pm`, `$1.5M` of `$1.5-2M`); the second end takes the
 * currency symbol before the first.
 */
function* rangeKeys(exact: string): Sliced<string[]> {
  // Each end written with the unit or currency is a text of its own; all are read in one extraction
  // (one per range cost 14 us each, 3 times the whole material's on a text of ranges only), joined
  // so that no pattern reads from one into the next: `<` (BARRIER) on a line of its own. A text with
  // a backtick is left out (a fenced block could span texts).
  const texts = new Set<string>();
  const add = (text: string) => {
    if (!text.includes('`')) texts.add(text);
  };
  let n = 0;
  RANGE_UNIT.lastIndex = 0;
  for (let m = RANGE_UNIT.exec(exact); m !== null; m = RANGE_UNIT.exec(exact)) {
    const end = m.index + m[0].length;
    add(m[1]! + exact.slice(end, tailEnd(exact, end)));
    if (++n % PER_PAUSE === 0) yield* pausing(RANGE_UNIT);
  }
  RANGE_MONEY.lastIndex = 0;
  for (let m = RANGE_MONEY.exec(exact); m !== null; m = RANGE_MONEY.exec(exact)) {
    const from = m.index + m[0].length - m[3]!.length;
    const tail = exact.slice(from + m[3]!.length, tailEnd(exact, from + m[3]!.length));
    // The second end with the symbol (`$20` of `$10-20`), the first with the scale (`$1.5M` of `$1.5-2M`).
    add(m[1]! + m[3]! + tail);
    add(m[1]! + m[2]! + tail);
    if (++n % PER_PAUSE === 0) yield* pausing(RANGE_MONEY);
  }
  const keys = yield* dateRangeKeys(exact);
  if (texts.size === 0) return keys;
  const joined = [...texts].join(RANGE_JOIN);
  // `exact` is normalized, so prepare leaves it as it is and the facts' places are the joined text's;
  // where it would not, no key (never a wrong one).
  if ((yield* preparing(joined)) !== joined) return keys;
  const starts = new Set<number>();
  let start = 0;
  for (const text of texts) {
    starts.add(start);
    start += text.length + RANGE_JOIN.length;
  }
  for (const { at, fact } of yield* preparedFacts(joined)) {
    // The fact that starts a text: the end with its unit (a figure with a unit, money, or a time: `2pm` of `2-4pm`).
    if (starts.has(at) && (fact.kind === 'money' || fact.kind === 'time' || (fact.kind === 'number' && /\D$/.test(fact.key))))
      keys.push(`range:${fact.kind}:${fact.key}`);
  }
  return keys;
}

/**
 * A range of days that writes its month and year once (`March 5-7, 2024`,
 * `5–7 March 2024`, `March 5 to 7`): each day as a date of its own
 * (`2024-03-05`, `2024-03-07`; without a year, `--03-05`), as `range:`
 * keys. The second day of such a range is otherwise a small bare number.
 */
function* dateRangeKeys(exact: string): Sliced<string[]> {
  const keys: string[] = [];
  let n = 0;
  for (const [regex, month, first, second, year] of [
    [MONTH_DAYS, 1, 2, 3, 4],
    [DAYS_MONTH, 3, 1, 2, 4],
  ] as const) {
    yield;
    regex.lastIndex = 0;
    for (let m = regex.exec(exact); m !== null; m = regex.exec(exact)) {
      if (++n % PER_PAUSE === 0) yield* pausing(regex);
      for (const day of [m[first]!, m[second]!]) {
        const iso = isoKey(m[year] ?? null, monthNumber(m[month]!), day);
        if (iso === null) continue;
        keys.push(`range:date:${iso}`);
        if (!iso.startsWith('--')) keys.push(`range:date:--${iso.slice(5)}`);
      }
    }
  }
  return keys;
}
/** Between two texts of rangeKeys: BARRIER on a line of its own. */
const RANGE_JOIN = '\n<\n';
/**
 * Whether the text before `at` ends with a bare figure and a range's join
 * (`2-`, `2 to `): a figure at `at` is a range's second end. Not after a
 * figure that is part of a date, a time or an amount (`2024-03-05 to `,
 * `$10-`).
 */
export function afterRangeStart(text: string, at: number): boolean {
  return RANGE_START.test(text.slice(Math.max(0, at - 40), at));
}
const RANGE_START = /(?<![A-Za-z0-9.,$€£¥₹\/:\-–—])\d+(?:\.\d+)?(?: ?[-–—] ?| to | and )$/;
/**
 * A bare first end, `-` `–` `—` or `to` (`and` after `between`), a second end directly followed by
 * what can be a unit or currency.
 */
const RANGE_UNIT =
  /(?<![A-Za-z0-9.,$€£¥₹])(\d+(?:\.\d+)?)(?: ?[-–—] ?| to | and (?<=[Bb]etween \d+(?:\.\d+)? and ))(\d+(?:[.,]\d+)*)(?= ?[%‰°A-Za-zµμ€£¥₹$円元원万亿億兆])/g;
/** A currency symbol and an amount, `-` `–` `—` or `to` (`and` after `between`), a second amount without one. */
const RANGE_MONEY = /([$€£¥₹])(\d+(?:[.,]\d+)*)(?: ?[-–—] ?| to | and (?<=[Bb]etween [$€£¥₹]\d+(?:[.,]\d+)* and ))(\d+(?:[.,]\d+)*)/g;
/**
 * Where the text of a range's end ends: after what its unit, scale or
 * currency can be made of (letters, spaces, `%`, `°`, `/`, `-`, currency
 * symbols; at most 30 characters: `million kilometres per hour`) from `i`,
 * and one character more, which a pattern's look-ahead reads.
 */
function tailEnd(exact: string, i: number): number {
  RANGE_TAIL.lastIndex = i;
  return i + RANGE_TAIL.exec(exact)![0].length + 1;
}
const RANGE_TAIL = /[\p{L}\p{M} \t%‰°\/$€£¥₹-]{0,30}/uy;

/** One to three digits, then groups of three after single spaces, no other digit or decimal part around (`50 000`, `1 234 567`). */
const SPACED_GROUPS = /(?<![\d.,])\d{1,3}(?: \d{3})+(?!\d|[.,]\d)/g;
/** ASCII letters, one space, digits: a name and its number (`ISO 8601`). */
const SPACED_IDENTIFIER = /(?<![A-Za-z0-9])([A-Za-z]+) (\d+(?:\.\d+)*)(?![A-Za-z0-9]|\.\d)/g;

/** Keys a material fact grounds: its own, for figures their bare number, for full dates their day and month. */
function materialKeys(fact: Fact): string[] {
  const keys = [`${fact.kind}:${fact.key}`];
  if (fact.kind === 'number') {
    keys.push(`n:${fact.key.replace(/[^\d.]+$/, '')}`);
    // `10k`, `5M`, `7B`: also the figure scaled (10000, 5000000, 7000000000).
    const scale = attachedScale(fact.text);
    if (scale !== null) keys.push(`n:${scale}`);
  }
  // `Python3.11`, `ISO8601`: also their figure (a summary may write `Python 3.11`, `ISO 8601`).
  const tail = fact.kind === 'identifier' ? NAME_THEN_FIGURE.exec(fact.text) : null;
  if (tail !== null) keys.push(`n:${canonicalNumber(tail[1]!)}`);
  if (fact.kind === 'money') keys.push(`n:${fact.key.replace(/^[^:]*:/, '').replace(/[^\d.]+$/, '')}`);
  // An ambiguous slashed or dotted date (`03/05/2024`): both of its readings.
  if (fact.kind === 'date')
    for (const iso of dateReadings(fact.key)) keys.push(`date:${iso}`, `date:${iso.slice(0, 7)}`, `date:--${iso.slice(5)}`);
  // `v18.2`: also the figure `18.2`, as `18.2` written without its `v` is (`v1.10` the figure 1.1, as `1.10` is).
  if (fact.kind === 'version' && /^\d+\.\d+$/.test(fact.key)) keys.push(`n:${canonicalNumber(fact.key)}`);
  // `150 pounds` is money or a weight: also `150 lb`.
  const pounds = poundsWeight(fact);
  if (pounds !== null) keys.push(`number:${pounds}`);
  // `18.17.0`: also the figure `18.17`.
  const zeroPatch = fact.kind === 'version' ? /^(\d+\.\d+)\.0$/.exec(fact.key) : null;
  if (zeroPatch !== null) keys.push(`n:${canonicalNumber(zeroPatch[1]!)}`);
  const full = fact.kind === 'date' ? /^(\d{4})-(\d{2})-(\d{2})$/.exec(fact.key) : null;
  if (full) keys.push(`n:${full[1]}`, `date:${full[1]}-${full[2]}`, `date:--${full[2]}-${full[3]}`);
  const monthYear = fact.kind === 'date' ? /^(\d{4})-\d{2}$/.exec(fact.key) : null;
  if (monthYear) keys.push(`n:${monthYear[1]}`);
  return keys;
}
