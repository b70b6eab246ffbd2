import type { MaterialItem, Outcome } from './gateway/types.ts';

/**
 * Grounding (DESIGN.md "Summarizer input and contract"): every checkable fact
 * of a summary must occur in the material the summarizer was given. One
 * module for both systems: conversation ranges (src/compaction) and Run
 * checkpoints (src/run) call `groundOutcome` on the summarizer's answer
 * before they commit it.
 *
 * Terminology
 * - Material: the summarizer's input, the items it was sent (ids and texts).
 * - Fact: a checkable token of a summary, with its kind: `url`, `email`,
 *   `path` (file path), `code` (text between backticks), `date`, `time`,
 *   `money`, `version`, `identifier` (a token that mixes letters and digits),
 *   `number` (a figure with a unit or percent sign, or a bare number that has
 *   a decimal part, a thousands separator or at least three digits; an
 *   ordinal of three digits or more, `125th`, as its number).
 * - Key: a fact's canonical form after normalization (below). Two spellings
 *   of the same fact have the same key.
 * - Grounded: the fact's key is among the keys of the material's facts, or
 *   its normalized text occurs in the normalized material between token
 *   boundaries (neither side a letter or digit).
 * - Token: letters and digits; letters of scripts written without spaces
 *   between words (Han, kana, Hangul, Thai, Lao, Khmer, Myanmar) bound a
 *   token as white space does (`共有999个` holds the number 999).
 * - Policy: what an ungrounded fact does. `reject` (default): the answer is
 *   invalid, the attempt is spent. `flag`: the summary is accepted, the
 *   ungrounded facts are recorded and the projection labels the summary.
 *
 * Normalization, applied the same way to summary and material:
 * 1. Unicode NFKC (full-width digits, ligatures, no-break spaces become
 *    their plain forms); then invisible characters (default-ignorable: zero-
 *    width spaces and joiners, soft hyphens, bidi controls) and combining
 *    marks after a digit dropped, and every script's decimal digits made
 *    ASCII (`٩٩٩` = `999`; the Arabic `٫` `٬` are `.` `,`), the hyphens
 *    U+2010 and U+2011, the figure dash and the minus sign `-` (not the en
 *    and em dashes: `Q1–Q3` stays two facts); every run of white space one
 *    space.
 * 2. Thousands separators inside a number are dropped: `,` `'` `’` `_`,
 *    no-break and thin spaces before a group of exactly three digits
 *    (`1,234,567` = `1234567`; `3,5` is a decimal comma = `3.5`). A plain
 *    space is never a thousands separator (`2023 100` stays two numbers).
 *    Several points in an amount or figure are separators when each group
 *    after the first has three digits and no comma follows (`2.500.000 €` =
 *    `€2,500,000`); with a decimal comma, all points before it
 *    (`1.234.567,89` = `1234567.89`).
 * 3. Percent: `50 %`, `50%`, `50 percent` and `50 per cent` are one key.
 *    A unit may stand with or without a space (`12kg` = `12 kg`), any case;
 *    `degrees Celsius` and `degrees C` are `°C`, `degrees Fahrenheit` `°F`, `percentage
 *    points` `pp`.
 *    Trailing zeros of a decimal part are dropped (`1.50` = `1.5`); signs are
 *    not compared. Scale words are multiplied out: `1.5 thousand` = `1500`,
 *    `225 million km` = `225,000,000 km` (a unit after the scale word kept),
 *    `$1.25M` = `$1.25mn` = `$1.25MM` = `$1.25 million` = `$1,250,000`, `$9.9T`
 *    a trillion (after an amount of money a scale letter counts only attached:
 *    `$20 t-shirts` is $20). After a bare figure an attached `k`, `M` or `B`
 *    is read both ways, as its unit (the kelvin, metres, bytes) and as its
 *    scale: `10k users` = `10,000 users`, `7B` = `7 billion`. Units written
 *    out are their symbols (`12 kilograms` = `12 kg`, `250 milliseconds` =
 *    `250 ms`, `60 miles per hour` = `60 mph`, `100 Mbit/s` = `100 Mbps`;
 *    for units of one letter, which count only attached, the word is not
 *    read: `3 metres` is 3).
 *    An amount followed by what is no scale is no amount (`$1.99xy`). The
 *    Chinese and Japanese scales 万, 亿 (億) and 兆 attached to a figure are
 *    multiplied out too (`3.5亿` = `350000000`; a compound such as `1万2000`
 *    is not read as one number: its parts are).
 * 4. Dates: ISO `2024-03-05`, `March 5, 2024`, `5 March 2024`, `Mar 5th
 *    2024`, `2024年3月5日`, `2024년 3월 5일` are one key; a date without a
 *    year (`March 5`, `3月5日`) is grounded by any
 *    material date on that day of that month, a month and year (`March 2024`)
 *    by any date in that month. Year-first dates (`2024/03/05`, Korean
 *    `2024. 3. 5.`) are dates; slashed or dotted dates with the year last
 *    (`03/05/2024`) are ambiguous (day or month first) and compared as
 *    written, unless one of the first two parts is above 12: that one is the
 *    day (`12/25/2023` = `25.12.2023` = `2023-12-25`). An ISO 8601 date-time
 *    (`2023-12-25T10:00:00Z`) is its date and its time. Times: `2:30 pm` =
 *    `14:30`; zero seconds are dropped (`10:00:00` = `10:00`).
 * 5. Money: `$`, `US$`, `USD`, `dollars` are one currency; so are `€`/`EUR`/
 *    `euros`, `£`/`GBP`/`pounds`, `¥`/`JPY`/`yen`, `₹`/`INR`/`rupees`; a symbol
 *    before or after the amount (`€50` = `50 €`; not after a figure and a
 *    plain space: `1 000 €` is no amount) or a code or word after it are one
 *    key; `US dollars` are dollars; `円`, `元` and `원` after a figure are yen,
 *    yuan and won (`1,200円` = `¥1,200`). `150 pounds` is money or a weight:
 *    it grounds `150 lb`, and `150 lb` or `150 lbs` grounds it.
 * 6. Versions: a leading `v` is dropped (`v1.2.3` = `1.2.3`).
 * 7. Letter case is ignored everywhere except in quoted code and file paths
 *    (identifiers, hex digests, e-mail addresses, URLs, units and month names
 *    are compared without case). Identifiers are also compared without their
 *    `-` and `_` (`GPT-4` = `GPT4`, `x86_64` = `x86-64`; a `.` stays, it may
 *    be a decimal point), wherever the material has them (in quoted code
 *    too: `dp[i-1]` grounds `dp[i1]`), and a name and its number written
 *    apart in the material (`ISO 8601`, `RFC 7231`, `Python 3.11`) ground
 *    them written as one (`ISO-8601`, `RFC7231`, `Python3.11`; `Python3`
 *    too); written as one in the material (`ISO8601`, `Python3.11`), they
 *    ground the figure alone (`8601`, `3.11`).
 * 8. A fact cut short by the summarizer (directly followed by `…`) is
 *    grounded when the material has a token that starts with it.
 *    So is a hex digest shortened without one, as commit hashes are: seven
 *    hex digits or more (a letter and a digit among them) that start a
 *    material token of twelve or more (`a1b2c3d` for `a1b2c3d4e5f6a7b8`).
 * 9. A figure with a unit, or an amount of money, whose figure the material
 *    has bare and whose unit or currency it names elsewhere, as structured
 *    data does (`"size_bytes": 1048576` grounds `1,048,576 bytes`,
 *    `{"amount": 1250.5, "currency": "USD"}` grounds `$1,250.50`); `$` alone
 *    names no currency. A Windows path is also found with its backslashes
 *    doubled, as JSON writes them.
 * 10. A path's leading `./` may be dropped (`./src/a.ts` = `src/a.ts`); a
 *    version with a zero patch number grounds the figure of its first two
 *    parts (`18.17.0` grounds `18.17`), and one of two parts its figure
 *    (`v18.2` grounds `18.2`).
 * 11. A range in the material that writes its unit, currency, scale, month
 *    or half of the day once grounds each end written with it: `10-20%` (or
 *    `10–20%`, `10 to 20%`, `between 10 and 20%`) grounds `10%` and `20%`,
 *    `1-2 million dollars` grounds `$1 million`, `$10-20` grounds `$20`,
 *    `$1.5-2M` grounds `$1.5M`, `2-4pm` grounds `2pm`, `March 5-7, 2024`
 *    and `5-7 March 2024` ground `2024-03-07`. A figure between the ends is
 *    not grounded (`15%`, `March 6`), nor a summary's own second end after a
 *    bare first one by another range's end (`4 minutes` of `2-4 minutes` by
 *    `4-5 minutes`): it must be an end the material writes with its unit.
 *
 * A decimal written without its leading zero (`.5%`, `.45`) is that figure
 * (`0.5%`, `0.45`) where no letter, digit, `.` or `,` comes before its point.
 *
 * Not checked: small bare integers (below 100, no decimal part, no unit:
 * counts, list markers), numbers written as words or in Roman numerals,
 * fractions (`3/4`), names and plain words.
 */

export type FactKind = 'url' | 'email' | 'path' | 'code' | 'date' | 'time' | 'money' | 'version' | 'identifier' | 'number';

export interface Fact {
  kind: FactKind;
  /** The fact as written in the text. */
  text: string;
  /** The canonical form (see the normalization above). */
  key: string;
  /** Directly followed by `…`: the summarizer cut it; a prefix of a material token grounds it. */
  truncated: boolean;
}

/** What the check found, stored with the attempt: facts as `kind:text`. */
export interface Grounding {
  /** Every fact checked, in order of first occurrence, without repeats. */
  checked: string[];
  /** The checked facts the material does not contain. */
  ungrounded: string[];
}

export type GroundingPolicy = 'reject' | 'flag';
export const GROUNDING_POLICIES: readonly GroundingPolicy[] = Object.freeze(['reject', 'flag']);
/** The policy when nothing is configured. */
export const DEFAULT_GROUNDING_POLICY: GroundingPolicy = 'reject';

/** At most this many ungrounded facts are named in an invalid outcome's reason (all are stored). */
const REASON_FACTS = 5;

/**
 * The answer after the grounding check: a non-`ok` outcome unchanged; an `ok`
 * one with its `grounding` attached, and, under `reject`, turned `invalid`
 * (reason `ungrounded:...`) when a fact is not in the material.
 */
export function groundOutcome(outcome: Outcome, material: readonly MaterialItem[], policy: GroundingPolicy = DEFAULT_GROUNDING_POLICY): Outcome {
  if (outcome.kind !== 'ok') return outcome;
  const grounding = groundSummary(outcome.text, material);
  if (grounding.ungrounded.length === 0 || policy === 'flag') return { ...outcome, grounding };
  const named = grounding.ungrounded.slice(0, REASON_FACTS).join(', ');
  const more = grounding.ungrounded.length > REASON_FACTS ? ` and ${grounding.ungrounded.length - REASON_FACTS} more` : '';
  return {
    kind: 'invalid',
    reason: `ungrounded: ${grounding.ungrounded.length} fact(s) not in the material: ${named}${more}`,
    model: outcome.model,
    usage: outcome.usage,
    requestId: outcome.requestId,
    grounding,
  };
}

/** Checks every fact of `summary` against `material`. */
export function groundSummary(summary: string, material: readonly MaterialItem[]): Grounding {
  const { prepared, facts } = locatedFacts(summary);
  const checked: string[] = [];
  const ungrounded: string[] = [];
  if (facts.length === 0) return { checked, ungrounded };
  const index = materialIndex(material);
  const seen = new Set<string>();
  for (const { at, fact } of facts) {
    const label = `${fact.kind}:${fact.text}`;
    if (seen.has(label)) continue;
    seen.add(label);
    checked.push(label);
    if (!isGrounded(fact, index, prepared, at)) ungrounded.push(label);
  }
  return { checked, ungrounded };
}

interface MaterialIndex {
  /** The material as given (items joined by newlines), not normalized: most facts are found here as written. */
  raw: string;
  /** The items' ids, each with the index of its first character in `raw` (a summary's reply tags are found in them first). */
  ids: readonly { id: string; at: number }[];
  /**
   * `raw` with its thousands separators dropped (the first step of normalizeText, which a second
   * time changes nothing), for a figure the summary wrote without them; null when there are none.
   */
  ungrouped(): string | null;
  /** The normalized forms and the material's own keys, built on first need. */
  normalized(): NormalizedMaterial;
}

interface NormalizedMaterial {
  /** Normalized, case-folded material (items separated by newlines). */
  folded: string;
  /** Normalized material with its case kept (code, paths). */
  exact: string;
  /** `exact` with all white space removed (quoted code is compared without layout). */
  compact(): string;
  /** `folded` without `-` and `_` (an identifier is compared without them, wherever it stands: in code too). */
  unhyphenated(): string;
  /** The keys of the material's own facts, extracted on first need (most facts are found as written). */
  keys(): Set<string>;
}

function materialIndex(material: readonly MaterialItem[]): MaterialIndex {
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
    normalized: () => (normalized ??= normalizeMaterial(raw)),
  };
}

function normalizeMaterial(joined: string): NormalizedMaterial {
  const exact = normalizeText(joined);
  let keys: Set<string> | undefined;
  let compact: string | undefined;
  let unhyphenated: string | undefined;
  const folded = exact.toLowerCase();
  return {
    exact,
    folded,
    compact: () => (compact ??= exact.replace(/\s+/g, '')),
    unhyphenated: () => (unhyphenated ??= folded.replace(/[-_]/g, '')),
    keys() {
      if (keys === undefined) {
        keys = new Set<string>();
        for (const fact of extractFacts(joined)) for (const key of materialKeys(fact)) keys.add(key);
        // A name and its number written apart (`ISO 8601`, `RFC 7231`) ground the identifier written
        // as one (`ISO-8601`, `RFC7231`).
        SPACED_IDENTIFIER.lastIndex = 0;
        for (let m = SPACED_IDENTIFIER.exec(exact); m !== null; m = SPACED_IDENTIFIER.exec(exact)) {
          keys.add(`identifier:${identifierKey(`${m[1]}${m[2]}`)}`);
          // `Python 3.11` grounds `Python3` too, as `Python 3` did.
          if (m[2]!.includes('.')) keys.add(`identifier:${identifierKey(`${m[1]}${m[2]!.slice(0, m[2]!.indexOf('.'))}`)}`);
        }
        // Groups of three digits after plain spaces (`50 000`, French and SI style): also the figure
        // they may be (`50,000` in a summary); the summary's own spaces stay no separator.
        SPACED_GROUPS.lastIndex = 0;
        for (let m = SPACED_GROUPS.exec(exact); m !== null; m = SPACED_GROUPS.exec(exact)) keys.add(`n:${canonicalNumber(m[0].replace(/ /g, ''))}`);
        for (const key of rangeKeys(exact)) keys.add(key);
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
function rangeKeys(exact: string): string[] {
  // Each end written with the unit or currency is a text of its own; all are read in one extraction
  // (one per range cost 14 us each, 3 times the whole material's on a text of ranges only), joined
  // so that no pattern reads from one into the next: `<` (BARRIER) on a line of its own. A text with
  // a backtick is left out (a fenced block could span texts).
  const texts = new Set<string>();
  const add = (text: string) => {
    if (!text.includes('`')) texts.add(text);
  };
  RANGE_UNIT.lastIndex = 0;
  for (let m = RANGE_UNIT.exec(exact); m !== null; m = RANGE_UNIT.exec(exact)) {
    const end = m.index + m[0].length;
    add(m[1]! + exact.slice(end, tailEnd(exact, end)));
  }
  RANGE_MONEY.lastIndex = 0;
  for (let m = RANGE_MONEY.exec(exact); m !== null; m = RANGE_MONEY.exec(exact)) {
    const from = m.index + m[0].length - m[3]!.length;
    const tail = exact.slice(from + m[3]!.length, tailEnd(exact, from + m[3]!.length));
    // The second end with the symbol (`$20` of `$10-20`), the first with the scale (`$1.5M` of `$1.5-2M`).
    add(m[1]! + m[3]! + tail);
    add(m[1]! + m[2]! + tail);
  }
  const keys = dateRangeKeys(exact);
  if (texts.size === 0) return keys;
  const joined = [...texts].join(RANGE_JOIN);
  // `exact` is normalized, so prepare leaves it as it is and the facts' places are the joined text's;
  // where it would not, no key (never a wrong one).
  if (prepare(joined) !== joined) return keys;
  const starts = new Set<number>();
  let start = 0;
  for (const text of texts) {
    starts.add(start);
    start += text.length + RANGE_JOIN.length;
  }
  for (const { at, fact } of locatedFacts(joined).facts) {
    // The fact that starts a text: the end with its unit (a figure with a unit, money, or a time: `2pm` of `2-4pm`).
    if (starts.has(at) && (fact.kind === 'money' || fact.kind === 'time' || (fact.kind === 'number' && /\D$/.test(fact.key)))) keys.push(`range:${fact.kind}:${fact.key}`);
  }
  return keys;
}

/**
 * A range of days that writes its month and year once (`March 5-7, 2024`,
 * `5–7 March 2024`, `March 5 to 7`): each day as a date of its own
 * (`2024-03-05`, `2024-03-07`; without a year, `--03-05`), as `range:`
 * keys. The second day of such a range is otherwise a small bare number.
 */
function dateRangeKeys(exact: string): string[] {
  const keys: string[] = [];
  for (const [regex, month, first, second, year] of [[MONTH_DAYS, 1, 2, 3, 4], [DAYS_MONTH, 3, 1, 2, 4]] as const) {
    regex.lastIndex = 0;
    for (let m = regex.exec(exact); m !== null; m = regex.exec(exact)) {
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
function afterRangeStart(text: string, at: number): boolean {
  return RANGE_START.test(text.slice(Math.max(0, at - 40), at));
}
const RANGE_START = /(?<![A-Za-z0-9.,$€£¥₹\/:\-–—])\d+(?:\.\d+)?(?: ?[-–—] ?| to | and )$/;
/**
 * A bare first end, `-` `–` `—` or `to` (`and` after `between`), a second end directly followed by
 * what can be a unit or currency.
 */
const RANGE_UNIT = /(?<![A-Za-z0-9.,$€£¥₹])(\d+(?:\.\d+)?)(?: ?[-–—] ?| to | and (?<=[Bb]etween \d+(?:\.\d+)? and ))(\d+(?:[.,]\d+)*)(?= ?[%‰°A-Za-zµμ€£¥₹$円元원万亿億兆])/g;
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

/** An identifier's key: without case, `-` or `_` (`GPT-4` = `gpt4`, `x86_64` = `x86-64`, `SHA-256` = `sha256`). */
function identifierKey(token: string): string {
  return token.toLowerCase().replace(/[-_]/g, '');
}

/** Whether `fact`, found at `at` of the (prepared) summary `summary`, is in the material. */
function isGrounded(fact: Fact, index: MaterialIndex, summary: string, at: number): boolean {
  if (occursUnchanged(fact, index.raw, index.ids)) return true;
  const ungrouped = /\d/.test(fact.text) ? index.ungrouped() : null;
  if (ungrouped !== null && occursUnchanged(fact, ungrouped, NO_IDS)) return true;
  const normalized = index.normalized();
  if (occursAsWritten(fact, normalized)) return true;
  // `GPT4` for `GPT-4` anywhere in the material (in code too, where it is no identifier fact).
  if (fact.kind === 'identifier' && occurs(normalized.unhyphenated(), fact.key, fact.truncated)) return true;
  // A hex digest shortened, as a commit hash is (`a1b2c3d` of `a1b2c3d4e5f6a7b8…`): the start of a material digest.
  if (fact.kind === 'identifier' && SHORT_HEX.test(fact.text) && startsDigest(normalized.folded, fact.key)) return true;
  if (fact.truncated || fact.kind === 'code' || fact.kind === 'path') return false;
  const keys = normalized.keys();
  if (keys.has(`${fact.kind}:${fact.key}`)) return true;
  // An end of a material range written with the unit or currency the range writes once (`10%` of
  // `10-20%`); not the second end of the summary's own range after a bare first one (`4 minutes` of
  // `2-4 minutes`, which `4-5 minutes` does not ground): that end is checked as the material writes its ends.
  if (keys.has(`range:${fact.kind}:${fact.key}`) && !(isAsciiDigit(fact.text.charCodeAt(0)) && afterRangeStart(summary, at))) return true;
  // An ambiguous slashed or dotted date (`03/05/2024`, `5.3.2024`): by a material date under either reading.
  if (fact.kind === 'date') return dateReadings(fact.key).some((iso) => keys.has(`date:${iso}`));
  // A figure and its unit or currency written apart, as structured data has them (`"size_bytes": 1048576`,
  // `{"amount": 1250.5, "currency": "USD"}`): the bare figure, and the unit or currency named in the material.
  if ((fact.kind === 'number' || fact.kind === 'money') && namedApart(fact, keys, normalized.folded)) return true;
  // `150 pounds` (money by its word) is also a weight: `150 lb` grounds it.
  const pounds = poundsWeight(fact);
  if (pounds !== null && keys.has(`number:${pounds}`)) return true;
  if (fact.kind !== 'number') return false;
  // A bare number is grounded by the same number anywhere: in a figure, a date, an amount.
  if (!/\D$/.test(fact.key)) return keys.has(`n:${fact.key}`);
  // `10k`, `5M`, `7B` attached: the kelvin, metres, bytes, or the figure scaled (`10,000`, `7 billion`).
  const scale = attachedScale(fact.text);
  return scale !== null && keys.has(`n:${scale}`);
}

/**
 * Seven to 63 hex digits, a letter and a digit among them: the start of a digest (commit hashes are
 * shown by their first seven; none is longer than 64, and a whole one is found as written).
 */
const SHORT_HEX = /^(?=[0-9a-f]*[a-f])(?=[a-f]*[0-9])[0-9a-f]{7,63}$/i;
/** A material token of at least this many hex digits is a digest a shorter start of which may stand for it. */
const DIGEST_MIN = 12;
/**
 * `hex` (lower case) starts a token of `folded` that is a longer hex digest
 * of DIGEST_MIN digits or more. The rest of the digest is taken whole (a
 * look-ahead does not backtrack), so the search is linear in `folded`.
 */
function startsDigest(folded: string, hex: string): boolean {
  const more = Math.max(1, DIGEST_MIN - hex.length);
  return new RegExp(`(?<![\\p{L}\\p{N}])${hex}(?=([0-9a-f]{${more},}))\\1(?![\\p{L}\\p{N}])`, 'u').test(folded);
}

/**
 * A figure with a unit or an amount of money whose figure the material has
 * bare (a `number` fact without a unit: not one with another unit or
 * currency) and whose unit or currency it names elsewhere, by a spelling of
 * two characters or more (a unit) or by its code, word or a symbol other
 * than `$` (a currency: `$` is also a shell prompt or a template's mark).
 */
function namedApart(fact: Fact, keys: Set<string>, folded: string): boolean {
  if (fact.kind === 'money') {
    const at = fact.key.indexOf(':');
    if (!keys.has(`number:${fact.key.slice(at + 1)}`)) return false;
    return (currencySpellings().get(fact.key.slice(0, at)) ?? []).some((s) => (s.length === 1 ? folded.includes(s) : occurs(folded, s, false)));
  }
  const m = /^(\d+(?:\.\d+)?)(\D.*)$/.exec(fact.key);
  if (m === null || SCALE_ZEROS[m[2]!] !== undefined || !keys.has(`number:${m[1]}`)) return false;
  return (UNIT_ALIASES[m[2]!] ?? []).some((s) => s.length >= 2 && occurs(folded, s, false));
}

/** An amount of pounds written with the word (`150 pounds`): the key of that many pounds of weight (`150lb`); else null. */
function poundsWeight(fact: Fact): string | null {
  return fact.kind === 'money' && fact.key.startsWith('GBP:') && /pounds?$/i.test(fact.text) ? `${fact.key.slice(4)}lb` : null;
}

/** The two ISO dates an ambiguous slashed date's key (`03/05/2024`: day or month first) can be; none for any other key. */
function dateReadings(key: string): string[] {
  const m = AMBIGUOUS_DATE.exec(key);
  if (m === null) return [];
  return [isoKey(m[3]!, m[1]!, m[2]!), isoKey(m[3]!, m[2]!, m[1]!)].filter((iso): iso is string => iso !== null);
}
const AMBIGUOUS_DATE = /^(\d{1,2})\/(\d{1,2})\/(\d{4})$/;

/** A figure with `k`, `M` or `B` attached (`10k`, `2.5M`, `7B`): the figure times 10^3, 10^6 or 10^9; else null. */
function attachedScale(text: string): string | null {
  const m = ATTACHED_SCALE.exec(text);
  return m === null ? null : scaled(canonicalNumber(m[1]!), { k: 3, m: 6, b: 9 }[m[2]!.toLowerCase() as 'k' | 'm' | 'b']);
}
const ATTACHED_SCALE = /^(\d+(?:[.,']\d+)*)([kKmMbB])$/;
/** Letters, maybe a `-` or `_`, then a figure: a name and its number written as one (`Python3.11`, `ISO8601`, `INV-2231`). */
const NAME_THEN_FIGURE = /^[A-Za-z]+[-_]?(\d+(?:\.\d+)*)$/;

/** The fact's normalized text in the normalized material (code: without white space; paths and code: with case). */
function occursAsWritten(fact: Fact, index: NormalizedMaterial): boolean {
  switch (fact.kind) {
    case 'code': {
      const needle = normalizeText(fact.key).replace(/\s+/g, '');
      return needle.length === 0 || index.compact().includes(needle);
    }
    case 'path': {
      const path = normalizeText(fact.text);
      // `./src/a.ts` is `src/a.ts`; a Windows path as JSON writes it has its backslashes doubled.
      return occurs(index.exact, path, fact.truncated) || (path.startsWith('./') && occurs(index.exact, path.slice(2), fact.truncated))
        || (path.includes('\\') && occurs(index.exact, path.replace(/\\/g, '\\\\'), fact.truncated));
    }
    default:
      return occurs(index.folded, normalizeText(fact.text).toLowerCase(), fact.truncated)
        || (fact.kind === 'version' && occurs(index.folded, fact.key, fact.truncated));
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
function occursUnchanged(fact: Fact, raw: string, ids: MaterialIndex['ids']): boolean {
  if (fact.kind === 'code') {
    const needle = normalizeText(fact.key).replace(/\s+/g, '');
    return needle.length === 0 || unchangedIn(raw, ids, needle, false, true);
  }
  return unchangedIn(raw, ids, normalizeText(fact.text), true, fact.truncated);
}
const NO_IDS: MaterialIndex['ids'] = [];

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
    if (!prefix && (isAsciiAlnum(after) || ((after === 0x2e || isGroupMark(after)) && isAsciiDigit(raw.charCodeAt(at + n + 1))))) return false;
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
const NON_ASCII = /[^\x00-\x7f]/;
/** White space other than single inner spaces (a normalized needle has none of it). */
const LAYOUT = /[^\S ]|  |^ | $/;
const isAsciiAlnum = (c: number): boolean => (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a);
const isAsciiDigit = (c: number): boolean => c >= 0x30 && c <= 0x39;
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
  if (fact.kind === 'date') for (const iso of dateReadings(fact.key)) keys.push(`date:${iso}`, `date:${iso.slice(0, 7)}`, `date:--${iso.slice(5)}`);
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

/** `needle` in `hay` with no letter or digit right before it, nor right after it unless `prefix`. */
function occurs(hay: string, needle: string, prefix: boolean): boolean {
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

/**
 * Letters of scripts written without spaces between words (Han, kana, Hangul
 * with its glued particles, Thai, Lao, Khmer, Myanmar). A figure or code
 * glued to them is a token of its own (`共有999个`, `1200円`, `工单INV-2203已关闭`):
 * they bound tokens as white space does, in the summary and in the material.
 */
const UNSPACED = String.raw`\p{scx=Han}\p{scx=Hiragana}\p{scx=Katakana}\p{scx=Hangul}\p{scx=Thai}\p{scx=Lao}\p{scx=Khmer}\p{scx=Myanmar}`;
/** A letter or digit that is part of a word: not of UNSPACED. */
const WORD = new RegExp(`(?![${UNSPACED}])[\\p{L}\\p{N}]`, 'u');
const WORD_CHAR = new RegExp(`^${WORD.source}$`, 'u');
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
// A following letter or digit, or a decimal point followed by a digit ("1.5" does not ground "1").
const WORD_START = new RegExp(`^(?:${WORD.source}|[.,]\\d)`, 'u');

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
function prepare(text: string): string {
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
const THOUSANDS = /(\d)[,'’_\u00A0\u202F\u2009](?=\d{3}(?!\d))/g;
/** What every THOUSANDS match is part of: a test for it scans twice as fast as the replace (most texts have none). */
const MAY_GROUP = /\d[,'’_\u00A0\u202F\u2009]\d\d\d/;
/** `text` with its thousands separators dropped. */
function ungroup(text: string): string {
  return MAY_GROUP.test(text) ? text.replace(THOUSANDS, '$1') : text;
}
const PERCENT_WORD = /(\d) ?per ?cent(?![A-Za-z])/gi;
/** What any step of prepare needs: MAY_GROUP, NON_ASCII or `/per ?cent/i`, in one scan. */
const MAY_PREPARE = new RegExp(`${MAY_GROUP.source}|${NON_ASCII.source}|[Pp][Ee][Rr] ?[Cc][Ee][Nn][Tt]`);

// ---------------------------------------------------------------------------
// Extraction

const MONTHS = ['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct', 'nov', 'dec'];
const MONTH = String.raw`(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?`;
const DAY = String.raw`(\d{1,2})(?:st|nd|rd|th)?`;
const YEAR = String.raw`(\d{4})`;
/** A range's join between two days: `-` `–` `—` or `to`. */
const DAY_JOIN = String.raw`(?:\s?[-–—]\s?|\s+to\s+)`;
/** `March 5-7, 2024`: the month, the days, the year (rangeKeys). */
const MONTH_DAYS = new RegExp(String.raw`(?<![A-Za-z])(${MONTH})\s+${DAY}${DAY_JOIN}${DAY}(?![A-Za-z0-9])(?:,?\s+${YEAR}(?![A-Za-z0-9]))?`, 'gi');
/** `5-7 March 2024`: the days, the month, the year (rangeKeys). */
const DAYS_MONTH = new RegExp(String.raw`(?<![A-Za-z0-9])${DAY}${DAY_JOIN}${DAY}(?:\s+of)?\s+(${MONTH})(?:,?\s+${YEAR})?(?![A-Za-z0-9])`, 'gi');

/**
 * Units a figure may carry, each with its canonical name (plural and singular
 * spellings are one unit). Compared without case. A unit of one letter (and
 * `in`, `am`) counts only when attached to its number (`5m`, `3x`): with a
 * space it is more often a word (`5 a day`, `100 in total`).
 */
const UNIT_ALIASES: Readonly<Record<string, readonly string[]>> = {
  '%': ['%', 'percent'], '‰': ['‰'], pp: ['pp', 'percentage points', 'percentage point'], bps: ['bps', 'basis points', 'basis point'],
  ns: ['ns', 'nanoseconds', 'nanosecond'], µs: ['µs', 'μs', 'us', 'microseconds', 'microsecond'], ms: ['ms', 'milliseconds', 'millisecond'], s: ['s', 'sec', 'secs', 'seconds', 'second'],
  min: ['min', 'mins', 'minutes', 'minute'], h: ['h', 'hr', 'hrs', 'hours', 'hour'],
  day: ['days', 'day'], week: ['weeks', 'week'], month: ['months', 'month'], year: ['years', 'year', 'yrs', 'yr'],
  byte: ['bytes', 'byte'], bit: ['bits', 'bit'], kb: ['kb', 'kilobytes', 'kilobyte'], mb: ['mb', 'megabytes', 'megabyte'], gb: ['gb', 'gigabytes', 'gigabyte'], tb: ['tb', 'terabytes', 'terabyte'], pb: ['pb', 'petabytes', 'petabyte'],
  kib: ['kib'], mib: ['mib'], gib: ['gib'], tib: ['tib'], kbps: ['kbps', 'kbit/s'], mbps: ['mbps', 'mbit/s'], gbps: ['gbps', 'gbit/s'], b: ['b'],
  hz: ['hz', 'hertz'], khz: ['khz', 'kilohertz'], mhz: ['mhz', 'megahertz'], ghz: ['ghz', 'gigahertz'], rpm: ['rpm'], fps: ['fps'], dpi: ['dpi'], px: ['px'], pt: ['pt'], em: ['em'], rem: ['rem'],
  nm: ['nm', 'nanometers', 'nanometres', 'nanometer', 'nanometre'], mm: ['mm', 'millimeters', 'millimetres', 'millimeter', 'millimetre'],
  cm: ['cm', 'centimeters', 'centimetres', 'centimeter', 'centimetre'], m: ['m'], km: ['km', 'kilometers', 'kilometres', 'kilometer', 'kilometre'],
  'km/h': ['km/h', 'kph', 'kilometers per hour', 'kilometres per hour'], 'm/s': ['m/s'], mph: ['mph', 'miles per hour'],
  in: ['in', 'inch', 'inches'], ft: ['ft', 'feet', 'foot'], yd: ['yd', 'yards', 'yard'], mi: ['mi', 'miles', 'mile'],
  mg: ['mg', 'milligrams', 'milligram'], g: ['g'], kg: ['kg', 'kilograms', 'kilogram', 'kilos'], lb: ['lb', 'lbs'], oz: ['oz', 'ounces', 'ounce'], t: ['t', 'tons', 'tonnes', 'ton', 'tonne'],
  ml: ['ml', 'milliliters', 'millilitres', 'milliliter', 'millilitre'], l: ['l', 'liters', 'litres', 'liter', 'litre'], gal: ['gal', 'gallons', 'gallon'], cup: ['cups', 'cup'], tbsp: ['tbsp'], tsp: ['tsp'],
  '°c': ['°c', 'degrees celsius', 'degree celsius', 'degrees c', 'degree c'], '°f': ['°f', 'degrees fahrenheit', 'degree fahrenheit', 'degrees f', 'degree f'], '°': ['°', 'degrees', 'degree'], c: ['c'], f: ['f'], k: ['k', 'kelvin'],
  w: ['w'], kw: ['kw', 'kilowatts', 'kilowatt'], mw: ['mw', 'megawatts', 'megawatt'], kwh: ['kwh', 'kilowatt-hours', 'kilowatt hours', 'kilowatt-hour', 'kilowatt hour'], mwh: ['mwh'], v: ['v'], mv: ['mv'], kv: ['kv'], a: ['a'], ma: ['ma'], mah: ['mah'], ah: ['ah'],
  j: ['j'], kj: ['kj', 'kilojoules', 'kilojoule'], cal: ['cal', 'calories', 'calorie'], kcal: ['kcal'], ppm: ['ppm'], mol: ['mol'],
  x: ['x', '×'], thousand: ['thousand'], million: ['million', 'mn', 'mln'], billion: ['billion', 'bn'], trillion: ['trillion'],
  // Chinese and Japanese scales, attached to their figure (`3.5亿` is 350,000,000).
  '万': ['万', '萬'], '亿': ['亿', '億'], '兆': ['兆'],
};
const UNIT_OF = new Map<string, string>(Object.entries(UNIT_ALIASES).flatMap(([canon, names]) => names.map((n) => [n, canon] as [string, string])));
const byLength = (a: string, b: string) => b.length - a.length;
const ANY_UNIT = `(?:${[...UNIT_OF.keys()].sort(byLength).map(escapeRegex).join('|')})`;
const SPACED_UNIT = `(?:${[...UNIT_OF.keys()].filter((u) => (u.length >= 2 && u !== 'in' && u !== 'am') || /^[%‰°×]/.test(u)).sort(byLength).map(escapeRegex).join('|')})`;

const CURRENCY_SYMBOL: Readonly<Record<string, string>> = { '$': 'USD', 'us$': 'USD', '€': 'EUR', '£': 'GBP', '¥': 'JPY', '₹': 'INR' };
const CURRENCY_WORD: Readonly<Record<string, string>> = {
  usd: 'USD', dollar: 'USD', dollars: 'USD', 'us dollar': 'USD', 'us dollars': 'USD', eur: 'EUR', euro: 'EUR', euros: 'EUR', gbp: 'GBP', pound: 'GBP', pounds: 'GBP',
  jpy: 'JPY', yen: 'JPY', inr: 'INR', rupee: 'INR', rupees: 'INR', chf: 'CHF', cad: 'CAD', aud: 'AUD', cny: 'CNY', rmb: 'CNY',
  // After a figure in Japanese, Chinese and Korean text (`1,200円`, `35元`, `1,200원`).
  '円': 'JPY', '元': 'CNY', '원': 'KRW', krw: 'KRW',
};
/** Each currency's spellings but `$` (lower case): codes, words and the other symbols (built on first need). */
let spellings: Map<string, string[]> | undefined;
function currencySpellings(): Map<string, string[]> {
  if (spellings === undefined) {
    spellings = new Map();
    for (const [spelling, code] of [...Object.entries(CURRENCY_SYMBOL), ...Object.entries(CURRENCY_WORD)]) {
      if (spelling !== '$' && spelling !== 'us$') spellings.set(code, [...(spellings.get(code) ?? []), spelling]);
    }
  }
  return spellings;
}
/**
 * A scale after an amount: a word, with or without a space (`$1.25 million`,
 * `$1.25mn`, `$2.5MM`), or one letter attached (`$50k`, `$1.25M`, `$9.9T`: with
 * a space a letter is more often a word, `$20 t-shirts`). Case-insensitive
 * patterns use SCALE; the one of currency codes, case-sensitive, SCALE_ANY_CASE.
 */
const SCALE_WORDS = ['thousand', 'trillion', 'million', 'billion', 'mln', 'mn', 'mm', 'bn', 'tn'];
const SCALE = String.raw`(\s?(?:${SCALE_WORDS.join('|')})|[kmbt])?`;
const anyCase = (word: string) => [...word].map((c) => `[${c}${c.toUpperCase()}]`).join('');
const SCALE_ANY_CASE = String.raw`(\s?(?:${SCALE_WORDS.map(anyCase).join('|')})|[kmbtKMBT])?`;
/** After an amount: no letter or digit, nor a decimal part (a partial amount is no amount: `$1.99mn` is not `$1`). */
const AMOUNT_END = String.raw`(?![A-Za-z0-9]|[.,]\d)`;
const AMOUNT = String.raw`(\d+(?:[.,]\d+)*)`;
/**
 * A token that is only a figure and its unit (`12kg`, `5-day`, `3.5GB`): a
 * number, not an identifier. A leading zero makes it a code (`0634102a`).
 */
const FIGURE_TOKEN = new RegExp(`^(?:0|[1-9]\\d*)(?:[.,]\\d+)?-?${ANY_UNIT}$`, 'iu');
/**
 * FIGURE_TOKEN on an ASCII token of letters, digits and connectors (an
 * identifier candidate), without its regex of every unit: no unit starts
 * with a digit, `.`, `,` or `-`, so the unit can only be what follows the
 * longest figure prefix, and no unit outside ASCII case-folds to ASCII.
 */
function isFigureTokenAscii(token: string): boolean {
  const prefix = FIGURE_PREFIX.exec(token);
  if (prefix === null || prefix[0].length === token.length) return false;
  return ASCII_UNITS.has(token.slice(prefix[0].length).toLowerCase());
}
const FIGURE_PREFIX = /^(?:0|[1-9]\d*)(?:[.,]\d+)?-?/;
const ASCII_UNITS = new Set([...UNIT_OF.keys()].filter((u) => !NON_ASCII.test(u)).map((u) => u.toLowerCase()));

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

interface Pattern {
  kind: FactKind;
  /** The matches in `text`, whose runs of digits are `runs`. */
  find(text: string, runs: Runs): Match[];
  /** Every match contains one of these: a text without any is not searched (`includes` is much cheaper than the pattern). */
  needs?: readonly string[];
}

/**
 * Patterns that need case-insensitive matching use ASCII classes only, and
 * those that need Unicode letters anchor on one character (`@`, `/`, a
 * digit) and look around it: V8 runs `iu` regexes and unanchored `\p{L}`
 * scans many times slower, and the check must stay a small part of a commit.
 */
function byRegex(regex: RegExp, key: (m: RegExpExecArray) => string | null, text?: (m: RegExpExecArray) => string): (input: string) => Match[] {
  return function find(input: string) {
    const out: Match[] = [];
    regex.lastIndex = 0;
    for (let m = regex.exec(input); m !== null; m = regex.exec(input)) {
      if (m[0].length === 0) { regex.lastIndex++; continue; }
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
function byStart(regex: RegExp, start: number, key: (m: RegExpExecArray) => string | null): (input: string, runs: Runs) => Match[] {
  if (!regex.sticky || regex.global) throw new Error(`byStart: ${regex} must be sticky, not global`);
  return function find(input: string, runs: Runs) {
    const out: Match[] = [];
    const { starts, kinds } = runs;
    let next = 0;
    for (let i = 0; i < starts.length; i++) {
      if ((kinds[i]! & start) === 0) continue;
      const d = starts[i]!;
      const at = start === S_MONTH ? monthStart(input, d)
        : start === S_MONEY_CODE ? (isSpaceAt(input, d - 1) ? d - 4 : d - 3)
          : start === S_VERSION && (input.charCodeAt(d - 1) | 0x20) === 0x76 ? d - 1 : start === S_DOT ? d - 1 : d;
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
 * The runs of ASCII digits of a text: where each starts (`starts`, in order),
 * and for each the patterns (S_ bits) a match of which can hold it as its
 * first run of digits (`kinds`). Each bit is a test the pattern itself makes
 * (its look-behind; the few characters it allows after one or two digits: a
 * day, an hour, a slashed date's part; a month name or a currency code
 * before), computed once per run for all patterns, not once per pattern.
 */
interface Runs {
  starts: number[];
  kinds: number[];
}
const S_ISO = 1 << 0;
const S_MONTH = 1 << 1;
const S_DAY_MONTH = 1 << 2;
const S_SLASHED = 1 << 3;
const S_TIME = 1 << 4;
const S_MONEY_WORD = 1 << 5;
const S_MONEY_CODE = 1 << 6;
const S_VERSION = 1 << 7;
const S_NUMBER = 1 << 8;
const S_YEAR_FIRST = 1 << 9;
const S_DOT = 1 << 10;

/** The runs of digits of `text` (a regex scan: a loop over the characters costs three times as much). */
function runsOf(text: string): Runs {
  const starts: number[] = [];
  DIGIT_RUN.lastIndex = 0;
  for (let m = DIGIT_RUN.exec(text); m !== null; m = DIGIT_RUN.exec(text)) starts.push(m.index);
  return { starts, kinds: kindsOf(text, starts) };
}
const DIGIT_RUN = /\d+/g;
const NO_RUNS: Runs = { starts: [], kinds: [] };

/** The S_ bits of each start of `starts` in `text` as it is now (0: not the start of a run of digits, or masked). */
function kindsOf(text: string, starts: readonly number[]): number[] {
  // A plain array: a typed one this small is allocated outside the heap, which costs more than all the tests.
  const kinds: number[] = [];
  for (let i = 0; i < starts.length; i++) {
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
        if (after === 0x2e || after === 0x2c || spaceAfter || isAsciiLetterIn(after, MONEY_WORD_FIRST) || after === 0x5186 || after === 0x5143 || after === 0xc6d0) k |= S_MONEY_WORD;
      }
      // (?<![A-Za-z0-9.]) \d+ \.
      if (after === 0x2e && before !== 0x2e) k |= S_VERSION;
      // (?<![A-Za-z0-9./]) \d{4} (/ | \.\s)
      if (e - d === 4 && before !== 0x2e && before !== 0x2f && (after === 0x2f || (after === 0x2e && isSpaceAt(text, e + 1)))) k |= S_YEAR_FIRST;
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
    if (code >= 0 && isAsciiUpper(text.charCodeAt(code)) && isAsciiUpper(text.charCodeAt(code + 1)) && isAsciiUpper(text.charCodeAt(code + 2))) k |= S_MONEY_CODE;
    kinds[i] = k;
  }
  return kinds;
}
const isAsciiUpper = (c: number): boolean => c >= 0x41 && c <= 0x5a;
/** Whether `c` is an ASCII letter whose lower case is in the bit set `letters` (bit 0: `a`). */
const isAsciiLetterIn = (c: number, letters: number): boolean => isAsciiLetter(c) && (letters & (1 << ((c | 0x20) - 0x61))) !== 0;
const letterSet = (letters: string): number => [...letters].reduce((set, l) => set | (1 << (l.charCodeAt(0) - 0x61)), 0);
/** First letters of `st` `nd` `rd` `th`; of `am` `pm`; of a scale or currency word after an amount (SCALE, CURRENCY_WORD). */
const ORDINAL_FIRST = letterSet('snrt');
const HALF_DAY = letterSet('ap');
const MONEY_WORD_FIRST = letterSet('kmbtudegpjyirca');

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
const isAsciiLetter = (c: number): boolean => (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a);

/** Trailing punctuation that ends a sentence or a parenthesis, not a URL or a path. */
const TRAILING = '.,;:!?\'"’”)]}>*_';

function trimTrailing(token: string): string {
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
function dropTrailing(text: string, chars: string): string {
  let end = text.length;
  while (end > 0 && chars.includes(text[end - 1]!)) end--;
  return end === text.length ? text : text.slice(0, end);
}

/** A letter or digit at `i` of `text` (one UTF-16 unit; outside the text: no). */
function isWordAt(text: string, i: number): boolean {
  if (i < 0 || i >= text.length) return false;
  const c = text.charCodeAt(i);
  return c < 0x80 ? isAsciiAlnum(c) : WORD.test(text[i]!);
}

/** The non-space token around `at`, bounded by white space and quoting characters. */
function tokenAround(text: string, at: number, stop: RegExp): [number, number] {
  let from = at;
  while (from > 0 && !stop.test(text[from - 1]!)) from--;
  let to = at + 1;
  while (to < text.length && !stop.test(text[to]!)) to++;
  return [from, to];
}

function around(input: string, anchor: RegExp, stop: RegExp, judge: (token: string) => { text: string; key: string } | null): Match[] {
  const out: Match[] = [];
  anchor.lastIndex = 0;
  let consumed = -1;
  for (let m = anchor.exec(input); m !== null; m = anchor.exec(input)) {
    if (m.index < consumed) continue;
    const [from, to] = tokenAround(input, m.index, stop);
    consumed = to;
    const judged = judge(input.slice(from, to));
    if (judged !== null) out.push({ index: from, length: to - from, text: judged.text, key: judged.key });
  }
  return out;
}

const EMAIL = /^[\p{L}\p{N}._%+-]+@[\p{L}\p{N}-]+(?:\.[\p{L}\p{N}-]+)*\.\p{L}{2,}$/u;
const PATH = /^(?:(?:~|\.{1,2})?\/[\p{L}\p{N}._@%+-]+(?:\/[\p{L}\p{N}._@%+-]*)*|[A-Za-z]:\\[^\s"'<>|]+|[\p{L}\p{N}._-]+(?:[\/\\][\p{L}\p{N}._@-]+)+\.[A-Za-z][A-Za-z0-9]{0,7})$/u;
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
function identifiers(input: string, { starts }: Runs): Match[] {
  const out: Match[] = [];
  let consumed = -1;
  for (let i = 0; i < starts.length; i++) {
    const index = starts[i]!;
    if (index < consumed || !isAsciiDigit(input.charCodeAt(index))) continue;
    let from = index;
    for (;;) {
      if (isWordAt(input, from - 1)) { from--; continue; }
      if (isConnector(input.charCodeAt(from - 1)) && isWordAt(input, from - 2)) { from -= 2; continue; }
      break;
    }
    let to = index + 1;
    for (;;) {
      if (isWordAt(input, to)) { to++; continue; }
      if (isConnector(input.charCodeAt(to)) && isWordAt(input, to + 1)) { to += 2; continue; }
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
  return m === null ? null : { index: d, length: m[0].length, text: m[0], key: canonicalNumber(m[1]!), checked: isCheckedNumber(m[1]!, null) };
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
const DOT_NUMBER = new RegExp(String.raw`(?<![A-Za-z0-9.,])\.(\d+)(?:[ \t\u00A0-]?(${SPACED_UNIT})|(${ANY_UNIT}))?(?![A-Za-z0-9°]|[.,]\d)`, 'iy');
const NUMBER = new RegExp(String.raw`(?<![A-Za-z0-9.,])(\d+(?:[.,']\d+)*)(?:[ \t\u00A0-]?${SCALE_THEN}|[ \t\u00A0-]?(${SPACED_UNIT})|(${ANY_UNIT}))?(?![A-Za-z0-9°])`, 'iy');

const PATTERNS: readonly Pattern[] = [
  // Quoted code: fenced blocks (fences at line starts), then inline spans on one line.
  { kind: 'code', find: byRegex(/^[ \t]*```[^\n`]*\n([^]*?)\n[ \t]*```/gm, (m) => m[1]!.trim()), needs: ['```'] },
  { kind: 'code', find: byRegex(/(?<!`)`([^`\n]{1,400})`(?!`)/g, (m) => m[1]!.trim()), needs: ['`'] },
  {
    kind: 'url',
    find: byRegex(/(?<![A-Za-z0-9])(?:(?:https?|ftp):\/\/|www\.)[^\s<>"'`]+/gi,
      (m) => dropTrailing(trimTrailing(m[0]).toLowerCase().replace(/^(?:https?|ftp):\/\//, '').replace(/^www\./, ''), '/'),
      (m) => trimTrailing(m[0])),
  },
  {
    kind: 'email',
    find: (input) => around(input, /@/g, /[\s<>()[\]"',;:`]/, (token) => {
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
    find: byStart(new RegExp(String.raw`(?<![A-Za-z0-9])${YEAR}-(\d{1,2})-(\d{1,2})(?![A-SU-Za-su-z0-9]|[Tt](?!\d)|-\d)`, 'y'),
      S_ISO, (m) => isoKey(m[1]!, m[2]!, m[3]!)),
    needs: ['-'],
  },
  // Year first with slashes (`2024/03/06`: Japan, China) or dots and spaces (`2024. 3. 6.`: Korea): unambiguous.
  { kind: 'date', find: byStart(YEAR_FIRST_DATE, S_YEAR_FIRST, (m) => isoKey(m[1]!, m[2] ?? m[4]!, m[3] ?? m[5]!)) },
  {
    kind: 'date',
    find: byStart(new RegExp(String.raw`(?<![A-Za-z])(${MONTH})\s+${DAY}(?![A-Za-z0-9])(?:,?\s+${YEAR}(?![A-Za-z0-9]))?`, 'iy'), S_MONTH, (m) => isoKey(m[3] ?? null, monthNumber(m[1]!), m[2]!)),
  },
  {
    kind: 'date',
    find: byStart(new RegExp(String.raw`(?<![A-Za-z0-9])${DAY}(?:\s+of)?\s+(${MONTH})(?:,?\s+${YEAR})?(?![A-Za-z0-9])`, 'iy'), S_DAY_MONTH, (m) => isoKey(m[3] ?? null, monthNumber(m[2]!), m[1]!)),
  },
  { kind: 'date', find: byStart(new RegExp(String.raw`(?<![A-Za-z])(${MONTH})\s+${YEAR}(?![A-Za-z0-9])`, 'iy'), S_MONTH, (m) => `${m[2]}-${monthNumber(m[1]!)}`) },
  { kind: 'date', find: byStart(/(?<![A-Za-z0-9.\/])\d{1,2}[./]\d{1,2}[./](?:\d{4}|\d{2})(?![A-Za-z0-9]|[./]\d)/y, S_SLASHED, (m) => slashedKey(m[0])) },
  {
    kind: 'time',
    find: byStart(/(?<![A-SU-Za-su-z0-9:]|[A-Za-z0-9][Tt])(\d{1,2}):(\d{2})(?::(\d{2}))?(?:\s?([ap])\.?m\.?)?(?![A-Ya-y0-9]|[Zz][A-Za-z0-9]|:\d)|(?<![A-Za-z0-9])(\d{1,2})\s?([ap])\.?m\.?(?![A-Za-z0-9])/iy,
      S_TIME, (m) => timeKey(m[1] ?? m[5]!, m[2] ?? '00', m[3] ?? null, m[4] ?? m[6] ?? null)),
  },
  {
    kind: 'money',
    find: byRegex(new RegExp(String.raw`(US\$|[$€£¥₹])\s?${AMOUNT}${SCALE}${AMOUNT_END}`, 'gi'), (m) => moneyKey(CURRENCY_SYMBOL[m[1]!.toLowerCase()] ?? m[1]!, m[2]!, m[3])),
    needs: ['$', '€', '£', '¥', '₹'],
  },
  // The symbol after the amount (`50 €`, `1.234,56 €`; not after a figure and a space: `1 000 €` may be one amount, and
  // a plain space is no separator): tried where a number can start (S_NUMBER: the look-behind, but for that).
  {
    kind: 'money',
    find: byStart(new RegExp(String.raw`(?<![A-Za-z0-9.,]|\d\s)${AMOUNT}\s?([$€£¥₹])(?![A-Za-z0-9])`, 'y'), S_NUMBER, (m) => moneyKey(CURRENCY_SYMBOL[m[2]!]!, m[1]!, undefined)),
    needs: ['$', '€', '£', '¥', '₹'],
  },
  {
    kind: 'money',
    find: byStart(new RegExp(String.raw`(?<![A-Za-z0-9.,])${AMOUNT}${SCALE}\s?(${Object.keys(CURRENCY_WORD).join('|')})(?![A-Za-z0-9])`, 'iy'), S_MONEY_WORD, (m) => moneyKey(CURRENCY_WORD[m[3]!.toLowerCase()]!, m[1]!, m[2])),
  },
  {
    kind: 'money',
    find: byStart(new RegExp(String.raw`\b(USD|EUR|GBP|JPY|INR|CHF|CAD|AUD|CNY)\s?${AMOUNT}${SCALE_ANY_CASE}${AMOUNT_END}`, 'y'),
      S_MONEY_CODE, (m) => moneyKey(CURRENCY_WORD[m[1]!.toLowerCase()]!, m[2]!, m[3])),
  },
  {
    kind: 'version',
    find: byStart(/(?<![A-Za-z0-9.])(?:[vV]\d+(?:\.\d+)+|\d+\.\d+\.\d+(?:\.\d+)*)(?:-[0-9A-Za-z]+(?:\.[0-9A-Za-z]+)*)?(?![A-Za-z0-9]|\.\d)/y,
      S_VERSION, (m) => m[0].toLowerCase().replace(/^v/, '')),
  },
  { kind: 'identifier', find: identifiers },
  {
    kind: 'number',
    find: function numbers(input, { starts, kinds }) {
      const out: Match[] = [];
      let next = 0;
      for (let i = 0; i < starts.length; i++) {
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
        out.push({ index: d, length: m[0].length, text: m[0], key: numberKey(m[1]!, unit, m[3] ?? null), checked: isCheckedNumber(m[1]!, unit) });
      }
      return out;
    },
  },  // A decimal written without its leading zero (`.5%`, `.45 in`): the figure with it, after every other kind.
  { kind: 'number', find: byStart(DOT_NUMBER, S_DOT, (m) => numberKey(`0.${m[1]}`, m[2] ?? m[3] ?? null)) },
];

/** The checkable facts of `text`, in order. Each span of text is one fact at most (earlier kinds win). */
export function extractFacts(text: string): Fact[] {
  return locatedFacts(text).facts.map((f) => f.fact);
}

/** The facts of `text` with where each starts in `prepared` (`prepare(text)`), in order. */
function locatedFacts(text: string): { prepared: string; facts: { at: number; fact: Fact }[] } {
  // Thousands separators and no-break spaces are handled before anything is matched.
  const found: { at: number; fact: Fact }[] = [];
  // Quoted code first, over the whole text (a fenced block spans lines); then every other
  // kind only in the windows that can hold one.
  const prepared = prepare(text);
  const rest = matchAll(prepared, (i) => i, CODE, found, NO_RUNS);
  const windows = factWindows(rest);
  if (windows.length > 0) {
    // All windows in one text, each pattern run once over it (not once per window).
    const starts: number[] = [];
    let length = 0;
    const parts = windows.map(([from, to]) => {
      starts.push(length);
      length += to - from + BARRIER.length;
      return rest.slice(from, to);
    });
    // The window that holds index i of the joined text: the last one starting at or before it.
    const at = (i: number): number => {
      let lo = 0;
      let hi = starts.length - 1;
      while (lo < hi) {
        const mid = (lo + hi + 1) >> 1;
        if (starts[mid]! <= i) lo = mid;
        else hi = mid - 1;
      }
      return windows[lo]![0] + i - starts[lo]!;
    };
    const joined = parts.join(BARRIER);
    matchAll(joined, at, IN_WINDOWS, found, runsOf(joined));
  }
  return { prepared, facts: found.sort((a, b) => a.at - b.at) };
}

/**
 * Between two windows in the text the patterns run over: no pattern matches
 * across it or with it (none consumes `<`: URLs, e-mails and paths stop at
 * it), and every look-around sees it as the start or end of a text (no
 * look-behind or look-ahead class has it, and it is no word character).
 */
const BARRIER = '<';

/** Runs `patterns` in order over `text` (`at` maps an index to the whole), each masking what it matched; returns the masked text. */
function matchAll(text: string, at: (index: number) => number, patterns: readonly Pattern[], found: { at: number; fact: Fact }[], runs: Runs): string {
  // `runs` is kept what Pattern.find expects of it through the masking below.
  let rest = text;
  for (const pattern of patterns) {
    if (pattern.needs !== undefined && !pattern.needs.some((s) => rest.includes(s))) continue;
    const spans: [number, number][] = [];
    for (const m of pattern.find(rest, runs)) {
      if (m.key === null) continue;
      spans.push([m.index, m.index + m.length]);
      if (m.checked === false) continue;
      const end = m.index + m.text.length;
      found.push({ at: at(m.index), fact: { kind: pattern.kind, text: m.text.trim(), key: m.key, truncated: rest.startsWith('…', end) || rest.startsWith('...', end) } });
    }
    // Mask what this kind matched, so a later kind does not match inside it.
    if (spans.length > 0) {
      // A span that ends right before a digit and after another starts a run of digits there: find
      // the runs again; else only their kinds change (what is next to them may be masked now).
      const split = runs !== NO_RUNS && spans.some(([, to]) => isAsciiDigit(rest.charCodeAt(to)) && isAsciiDigit(rest.charCodeAt(to - 1)));
      rest = mask(rest, spans);
      if (split) runs = runsOf(rest);
      else if (runs !== NO_RUNS) runs = { starts: runs.starts, kinds: kindsOf(rest, runs.starts) };
    }
  }
  return rest;
}


/** The patterns of quoted code, which run first and over the whole text; then the others, in windows. */
const CODE = PATTERNS.slice(0, 2);
const IN_WINDOWS = PATTERNS.slice(2);

/**
 * Every fact but quoted code has a digit, `@`, `/`, `\\` or `www.` in it and
 * spans a few words at most (`March 5, 2024`, `5 million dollars`): so the
 * patterns only run within this many characters of one, widened to whole
 * tokens. Prose without figures is skipped, which keeps the check a small
 * part of a commit.
 */
const WINDOW_RADIUS = 48;
const TRIGGER = /[0-9@\/\\]|www\./gi;
const SPACE = /\s/;
/** `/\s/` on the character at `i` (in the text), without a regex call for ASCII. */
function isSpaceAt(text: string, i: number): boolean {
  const c = text.charCodeAt(i);
  return c < 0x80 ? c === 0x20 || (c >= 0x09 && c <= 0x0d) : SPACE.test(text[i]!);
}

/** The spans of `text` that can hold a fact, in order, merged. */
function factWindows(text: string): [number, number][] {
  const spans: [number, number][] = [];
  TRIGGER.lastIndex = 0;
  for (let m = TRIGGER.exec(text); m !== null; m = TRIGGER.exec(text)) {
    const last = spans.at(-1);
    if (last !== undefined && m.index < last[1]) continue;
    let from = Math.max(0, m.index - WINDOW_RADIUS);
    let to = Math.min(text.length, m.index + WINDOW_RADIUS);
    while (from > 0 && !isSpaceAt(text, from - 1)) from--;
    while (to < text.length && !isSpaceAt(text, to)) to++;
    if (last !== undefined && from <= last[1]) last[1] = to;
    else spans.push([from, to]);
    TRIGGER.lastIndex = Math.max(TRIGGER.lastIndex, to);
  }
  return spans;
}

function mask(text: string, spans: [number, number][]): string {
  let out = '';
  let last = 0;
  for (const [from, to] of spans) {
    out += text.slice(last, from) + ' '.repeat(to - from);
    last = to;
  }
  return out + text.slice(last);
}

function isCheckedNumber(digits: string, unit: string | null): boolean {
  if (unit !== null) return true;
  if (/[.,']/.test(digits)) return true;
  return digits.replace(/^0+(?=\d)/, '').length >= 3;
}

function numberKey(digits: string, unit: string | null, after: string | null = null): string {
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
function canonicalNumber(digits: string): string {
  // Digits only (most figures): only leading zeros to drop.
  if (!/[.,']/.test(digits)) return digits.charCodeAt(0) === 0x30 ? digits.replace(/^0+(?=\d)/, '') : digits;
  let d = digits.replace(/'/g, '');
  // A comma not followed by exactly three digits is a decimal comma.
  d = d.replace(/,(?=\d{3}(?!\d))/g, '').replace(/,/g, '.');
  // Several points: group separators, every one when the figure had no comma and each group after
  // the first has three digits (`2.500.000` = 2500000), else all but the last (`1.234.567,89`).
  const points = d.split('.');
  if (points.length > 2) {
    d = !digits.includes(',') && points.slice(1).every((g) => g.length === 3) ? points.join('') : points.slice(0, -1).join('') + '.' + points.at(-1);
  }
  if (d.includes('.')) d = dropTrailing(d, '0').replace(/\.$/, '');
  return d.replace(/^0+(?=\d)/, '');
}

function moneyKey(currency: string, amount: string, scale: string | undefined): string {
  const s = scale?.trim().toLowerCase();
  const zeros = s === undefined ? 0 : s === 'k' || s === 'thousand' ? 3
    : s === 'm' || s === 'mn' || s === 'mm' || s === 'mln' || s === 'million' ? 6 : s === 'b' || s === 'bn' || s === 'billion' ? 9 : 12;
  // `$1.25M` = `$1.25 million` = `$1,250,000`.
  return `${currency}:${scaled(canonicalNumber(amount.replace(/[.,]$/, '')), zeros)}`;
}

/** Zeros each scale word (a UNIT_ALIASES name) stands for. */
const SCALE_ZEROS: Readonly<Record<string, number>> = { thousand: 3, million: 6, billion: 9, trillion: 12, '万': 4, '亿': 8, '兆': 12 };

/** A canonical number times 10^zeros, canonical again (decimal digits moved, not multiplied: exact). */
function scaled(value: string, zeros: number): string {
  if (zeros === 0) return value;
  const [whole = '', fraction = ''] = value.split('.');
  const digits = `${whole}${fraction.padEnd(zeros, '0')}`;
  const point = whole.length + zeros;
  const rest = dropTrailing(digits.slice(point), '0');
  return `${digits.slice(0, point).replace(/^0+(?=\d)/, '')}${rest === '' ? '' : `.${rest}`}`;
}

function monthNumber(name: string): string {
  const i = MONTHS.indexOf(name.toLowerCase().slice(0, 3));
  return String(i + 1).padStart(2, '0');
}

/**
 * A slashed or dotted date (`12/25/2023`, `25.12.2023`): ISO when its order is
 * plain (a four-digit year, one of the first two parts above 12: the day);
 * else as written with slashes, since `03/05/2024` is 3 May or March 5.
 */
function slashedKey(text: string): string {
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
function isoKey(year: string | null, month: string, day: string): string | null {
  const m = Number(month);
  const d = Number(day);
  if (m < 1 || m > 12 || d < 1 || d > 31) return null;
  const md = `${String(m).padStart(2, '0')}-${String(d).padStart(2, '0')}`;
  return year === null ? `--${md}` : `${year}-${md}`;
}

/** A 年月日 date's key: with its day as isoKey; a year and month alone `YYYY-MM`; a month alone is no date. */
function cjkDateKey(year: string | null, month: string, day: string | null): string | null {
  if (day !== null) return isoKey(year, month, day);
  const m = Number(month);
  return year === null || m < 1 || m > 12 ? null : `${year}-${String(m).padStart(2, '0')}`;
}

function timeKey(hours: string, minutes: string, seconds: string | null, half: string | null): string | null {
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

function escapeRegex(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
}
