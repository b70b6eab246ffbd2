/**
 * FROZEN REFERENCE: src/grounding/index.ts as it was before the digit-run
 * extraction and the id-first tag lookup (main at 0cf7b86), kept only for
 * test/compaction/grounding-equivalence.test.ts, which requires the current
 * module to give the same facts, normalized text and grounding on real and
 * hostile text. Do not edit it to make that test pass.
 */
import type { MaterialItem, Outcome } from '../../src/support/summary-contract.ts';

/**
 * Grounding (docs/grounding.md): every checkable fact
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
 *   a decimal part, a thousands separator or at least three digits).
 * - Key: a fact's canonical form after normalization (below). Two spellings
 *   of the same fact have the same key.
 * - Grounded: the fact's key is among the keys of the material's facts, or
 *   its normalized text occurs in the normalized material between token
 *   boundaries (neither side a letter or digit).
 * - Policy: what an ungrounded fact does. `reject` (default): the answer is
 *   invalid, the attempt is spent. `flag`: the summary is accepted, the
 *   ungrounded facts are recorded and the projection labels the summary.
 *
 * Normalization, applied the same way to summary and material:
 * 1. Unicode NFKC (full-width digits, ligatures, no-break spaces become
 *    their plain forms), every run of white space one space.
 * 2. Thousands separators inside a number are dropped: `,` `'` `’` `_`,
 *    no-break and thin spaces before a group of exactly three digits
 *    (`1,234,567` = `1234567`; `3,5` is a decimal comma = `3.5`). A plain
 *    space is never a thousands separator (`2023 100` stays two numbers).
 * 3. Percent: `50 %`, `50%`, `50 percent` and `50 per cent` are one key.
 *    A unit may stand with or without a space (`12kg` = `12 kg`), any case.
 *    Trailing zeros of a decimal part are dropped (`1.50` = `1.5`); signs are
 *    not compared.
 * 4. Dates: ISO `2024-03-05`, `March 5, 2024`, `5 March 2024`, `Mar 5th
 *    2024` are one key; a date without a year (`March 5`) is grounded by any
 *    material date on that day of that month, a month and year (`March 2024`)
 *    by any date in that month. Slashed dates (`03/05/2024`) are ambiguous
 *    (day or month first) and compared as written. Times: `2:30 pm` =
 *    `14:30`.
 * 5. Money: `$`, `US$`, `USD`, `dollars` are one currency; so are `€`/`EUR`/
 *    `euros`, `£`/`GBP`/`pounds`, `¥`/`JPY`/`yen`, `₹`/`INR`/`rupees`; symbol
 *    before or code after the amount are one key.
 * 6. Versions: a leading `v` is dropped (`v1.2.3` = `1.2.3`).
 * 7. Letter case is ignored everywhere except in quoted code and file paths
 *    (identifiers, hex digests, e-mail addresses, URLs, units and month names
 *    are compared without case).
 * 8. A fact cut short by the summarizer (directly followed by `…`) is
 *    grounded when the material has a token that starts with it.
 *
 * Not checked: small bare integers (below 100, no decimal part, no unit:
 * counts, list markers), numbers written as words, names and plain words.
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
export function groundOutcome(
  outcome: Outcome,
  material: readonly MaterialItem[],
  policy: GroundingPolicy = DEFAULT_GROUNDING_POLICY,
): Outcome {
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
  let normalized: NormalizedMaterial | undefined;
  let ungrouped: string | null | undefined;
  return {
    raw,
    ungrouped() {
      if (ungrouped === undefined) {
        const dropped = raw.replace(THOUSANDS, '$1');
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
        for (let m = SPACED_GROUPS.exec(exact); m !== null; m = SPACED_GROUPS.exec(exact))
          keys.add(`n:${canonicalNumber(m[0].replace(/ /g, ''))}`);
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
function dateRangeKeys(exact: string): string[] {
  const keys: string[] = [];
  for (const [regex, month, first, second, year] of [
    [MONTH_DAYS, 1, 2, 3, 4],
    [DAYS_MONTH, 3, 1, 2, 4],
  ] as const) {
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

/** An identifier's key: without case, `-` or `_` (`GPT-4` = `gpt4`, `x86_64` = `x86-64`, `SHA-256` = `sha256`). */
function identifierKey(token: string): string {
  return token.toLowerCase().replace(/[-_]/g, '');
}

/** Whether `fact`, found at `at` of the (prepared) summary `summary`, is in the material. */
function isGrounded(fact: Fact, index: MaterialIndex, summary: string, at: number): boolean {
  if (occursUnchanged(fact, index.raw)) return true;
  const ungrouped = /\d/.test(fact.text) ? index.ungrouped() : null;
  if (ungrouped !== null && occursUnchanged(fact, ungrouped)) return true;
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
    return (currencySpellings().get(fact.key.slice(0, at)) ?? []).some((s) =>
      s.length === 1 ? folded.includes(s) : occurs(folded, s, false),
    );
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
function occursUnchanged(fact: Fact, raw: string): boolean {
  if (fact.kind === 'code') {
    const needle = normalizeText(fact.key).replace(/\s+/g, '');
    return needle.length === 0 || unchangedIn(raw, needle, false, true);
  }
  return unchangedIn(raw, normalizeText(fact.text), true, fact.truncated);
}

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
function unchangedIn(raw: string, needle: string, bounded: boolean, prefix: boolean): boolean {
  if (needle.length === 0 || NON_ASCII.test(needle) || LAYOUT.test(needle) || needle[0] === '%' || needle.includes(' %')) return false;
  const n = needle.length;
  for (let at = raw.indexOf(needle); at !== -1; at = raw.indexOf(needle, at + 1)) {
    if (bounded) {
      const before = raw.charCodeAt(at - 1);
      if (isAsciiAlnum(before) || isGroupMark(before)) continue;
      // A figure's decimal part is no figure (`5%` is not in `0.5%`).
      if (before === 0x2e && isAsciiDigit(raw.charCodeAt(at)) && isAsciiDigit(raw.charCodeAt(at - 2))) continue;
      const after = raw.charCodeAt(at + n);
      if (!prefix && (isAsciiAlnum(after) || ((after === 0x2e || isGroupMark(after)) && isAsciiDigit(raw.charCodeAt(at + n + 1)))))
        continue;
    }
    // A hard neighbour ends the context on its side: no rule reaches across it.
    const hardBefore = isHard(raw.charCodeAt(at - 1));
    const hardAfter = isHard(raw.charCodeAt(at + n));
    const from = hardBefore ? at - 1 : Math.max(0, at - UNCHANGED_MARGIN);
    const window = raw.slice(from, hardAfter ? at + n + 2 : at + n + UNCHANGED_MARGIN);
    if (NON_ASCII.test(window)) continue;
    // The range of the window that must come out unchanged: the character before the needle to the
    // second after it (the first after it, when that one is hard: it alone decides the boundary).
    const lo = at - 1 - from;
    const hi = at + n + (hardAfter ? 1 : 2) - from;
    if (/[,'_]/.test(window) && touches(THOUSANDS, window, lo, hi, 1, 1)) continue;
    if (/cent/i.test(window) && touches(PERCENT_WORD, window, lo, hi, 0, 0)) continue;
    return true;
  }
  return false;
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

/** `needle` in `hay` with no letter or digit right before it, nor right after it unless `prefix`. */
function occurs(hay: string, needle: string, prefix: boolean): boolean {
  if (needle.length === 0) return true;
  for (let at = hay.indexOf(needle); at !== -1; at = hay.indexOf(needle, at + 1)) {
    const before = at === 0 ? '' : hay[at - 1]!;
    const after = hay.slice(at + needle.length, at + needle.length + 2);
    if (WORD_CHAR.test(before)) continue;
    if (afterFigure(hay, at)) continue;
    if (!prefix && WORD_START.test(after)) continue;
    return true;
  }
  return false;
}

// Letters of scripts written without spaces between words bound tokens as white space does.
const UNSPACED = String.raw`\p{scx=Han}\p{scx=Hiragana}\p{scx=Katakana}\p{scx=Hangul}\p{scx=Thai}\p{scx=Lao}\p{scx=Khmer}\p{scx=Myanmar}`;
const WORD = new RegExp(`(?![${UNSPACED}])[\\p{L}\\p{N}]`, 'u');
const WORD_CHAR = new RegExp(`^${WORD.source}$`, 'u');
/** A digit at `at` of `hay` right after a digit and a `.` or `,`: the decimal part of a figure (`5` in `0.5`), no token. */
function afterFigure(hay: string, at: number): boolean {
  const before = hay.charCodeAt(at - 1);
  return (before === 0x2e || before === 0x2c) && isAsciiDigit(hay.charCodeAt(at)) && isAsciiDigit(hay.charCodeAt(at - 2));
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
  // Before NFKC, which turns no-break and thin spaces into plain ones.
  let t = text.replace(THOUSANDS, '$1');
  // NFKC leaves ASCII as it is: a pure-ASCII text (most are) skips it.
  if (NON_ASCII.test(t)) {
    // Invisible characters and marks after a digit dropped, every script's digits ASCII, Arabic separators plain, hyphens and the minus sign `-`.
    const nfkc = t
      .normalize('NFKC')
      .replace(/\p{Default_Ignorable_Code_Point}/gu, '')
      .replace(/(?<=\p{Nd})\p{M}+/gu, '')
      .replace(/(?![0-9])\p{Nd}/gu, (d) => {
        let zero = d.codePointAt(0)!;
        while (/^\p{Nd}$/u.test(String.fromCodePoint(zero - 1))) zero--;
        return String((d.codePointAt(0)! - zero) % 10);
      })
      .replace(/\u066B/g, '.')
      .replace(/\u066C/g, ',')
      .replace(/[\u2010-\u2012\u2212]/g, '-');
    // Again when NFKC changed something: full-width digits are digits only after it.
    if (nfkc !== t) t = nfkc.replace(THOUSANDS, '$1');
  }
  if (/cent/i.test(t)) t = t.replace(PERCENT_WORD, '$1%');
  return t;
}

// A separator between a digit and a group of exactly three digits (not followed by another digit).
const THOUSANDS = /(\d)[,'’_\u00A0\u202F\u2009](?=\d{3}(?!\d))/g;
const PERCENT_WORD = /(\d) ?per ?cent(?![A-Za-z])/gi;

// ---------------------------------------------------------------------------
// Extraction

const MONTHS = ['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct', 'nov', 'dec'];
const MONTH = String.raw`(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?`;
const DAY = String.raw`(\d{1,2})(?:st|nd|rd|th)?`;
const YEAR = String.raw`(\d{4})`;
/** A range's join between two days: `-` `–` `—` or `to`. */
const DAY_JOIN = String.raw`(?:\s?[-–—]\s?|\s+to\s+)`;
/** `March 5-7, 2024`: the month, the days, the year (rangeKeys). */
const MONTH_DAYS = new RegExp(
  String.raw`(?<![A-Za-z])(${MONTH})\s+${DAY}${DAY_JOIN}${DAY}(?![A-Za-z0-9])(?:,?\s+${YEAR}(?![A-Za-z0-9]))?`,
  'gi',
);
/** `5-7 March 2024`: the days, the month, the year (rangeKeys). */
const DAYS_MONTH = new RegExp(
  String.raw`(?<![A-Za-z0-9])${DAY}${DAY_JOIN}${DAY}(?:\s+of)?\s+(${MONTH})(?:,?\s+${YEAR})?(?![A-Za-z0-9])`,
  'gi',
);

/**
 * Units a figure may carry, each with its canonical name (plural and singular
 * spellings are one unit). Compared without case. A unit of one letter (and
 * `in`, `am`) counts only when attached to its number (`5m`, `3x`): with a
 * space it is more often a word (`5 a day`, `100 in total`).
 */
const UNIT_ALIASES: Readonly<Record<string, readonly string[]>> = {
  '%': ['%', 'percent'],
  '‰': ['‰'],
  pp: ['pp', 'percentage points', 'percentage point'],
  bps: ['bps', 'basis points', 'basis point'],
  ns: ['ns', 'nanoseconds', 'nanosecond'],
  µs: ['µs', 'μs', 'us', 'microseconds', 'microsecond'],
  ms: ['ms', 'milliseconds', 'millisecond'],
  s: ['s', 'sec', 'secs', 'seconds', 'second'],
  min: ['min', 'mins', 'minutes', 'minute'],
  h: ['h', 'hr', 'hrs', 'hours', 'hour'],
  day: ['days', 'day'],
  week: ['weeks', 'week'],
  month: ['months', 'month'],
  year: ['years', 'year', 'yrs', 'yr'],
  byte: ['bytes', 'byte'],
  bit: ['bits', 'bit'],
  kb: ['kb', 'kilobytes', 'kilobyte'],
  mb: ['mb', 'megabytes', 'megabyte'],
  gb: ['gb', 'gigabytes', 'gigabyte'],
  tb: ['tb', 'terabytes', 'terabyte'],
  pb: ['pb', 'petabytes', 'petabyte'],
  kib: ['kib'],
  mib: ['mib'],
  gib: ['gib'],
  tib: ['tib'],
  kbps: ['kbps', 'kbit/s'],
  mbps: ['mbps', 'mbit/s'],
  gbps: ['gbps', 'gbit/s'],
  b: ['b'],
  hz: ['hz', 'hertz'],
  khz: ['khz', 'kilohertz'],
  mhz: ['mhz', 'megahertz'],
  ghz: ['ghz', 'gigahertz'],
  rpm: ['rpm'],
  fps: ['fps'],
  dpi: ['dpi'],
  px: ['px'],
  pt: ['pt'],
  em: ['em'],
  rem: ['rem'],
  nm: ['nm', 'nanometers', 'nanometres', 'nanometer', 'nanometre'],
  mm: ['mm', 'millimeters', 'millimetres', 'millimeter', 'millimetre'],
  cm: ['cm', 'centimeters', 'centimetres', 'centimeter', 'centimetre'],
  m: ['m'],
  km: ['km', 'kilometers', 'kilometres', 'kilometer', 'kilometre'],
  'km/h': ['km/h', 'kph', 'kilometers per hour', 'kilometres per hour'],
  'm/s': ['m/s'],
  mph: ['mph', 'miles per hour'],
  in: ['in', 'inch', 'inches'],
  ft: ['ft', 'feet', 'foot'],
  yd: ['yd', 'yards', 'yard'],
  mi: ['mi', 'miles', 'mile'],
  mg: ['mg', 'milligrams', 'milligram'],
  g: ['g'],
  kg: ['kg', 'kilograms', 'kilogram', 'kilos'],
  lb: ['lb', 'lbs'],
  oz: ['oz', 'ounces', 'ounce'],
  t: ['t', 'tons', 'tonnes', 'ton', 'tonne'],
  ml: ['ml', 'milliliters', 'millilitres', 'milliliter', 'millilitre'],
  l: ['l', 'liters', 'litres', 'liter', 'litre'],
  gal: ['gal', 'gallons', 'gallon'],
  cup: ['cups', 'cup'],
  tbsp: ['tbsp'],
  tsp: ['tsp'],
  '°c': ['°c', 'degrees celsius', 'degree celsius', 'degrees c', 'degree c'],
  '°f': ['°f', 'degrees fahrenheit', 'degree fahrenheit', 'degrees f', 'degree f'],
  '°': ['°', 'degrees', 'degree'],
  c: ['c'],
  f: ['f'],
  k: ['k', 'kelvin'],
  w: ['w'],
  kw: ['kw', 'kilowatts', 'kilowatt'],
  mw: ['mw', 'megawatts', 'megawatt'],
  kwh: ['kwh', 'kilowatt-hours', 'kilowatt hours', 'kilowatt-hour', 'kilowatt hour'],
  mwh: ['mwh'],
  v: ['v'],
  mv: ['mv'],
  kv: ['kv'],
  a: ['a'],
  ma: ['ma'],
  mah: ['mah'],
  ah: ['ah'],
  j: ['j'],
  kj: ['kj', 'kilojoules', 'kilojoule'],
  cal: ['cal', 'calories', 'calorie'],
  kcal: ['kcal'],
  ppm: ['ppm'],
  mol: ['mol'],
  x: ['x', '×'],
  thousand: ['thousand'],
  million: ['million', 'mn', 'mln'],
  billion: ['billion', 'bn'],
  trillion: ['trillion'],
  // Chinese and Japanese scales, attached to their figure (`3.5亿` is 350,000,000).
  万: ['万', '萬'],
  亿: ['亿', '億'],
  兆: ['兆'],
};
const UNIT_OF = new Map<string, string>(
  Object.entries(UNIT_ALIASES).flatMap(([canon, names]) => names.map((n) => [n, canon] as [string, string])),
);
const byLength = (a: string, b: string) => b.length - a.length;
const ANY_UNIT = `(?:${[...UNIT_OF.keys()].sort(byLength).map(escapeRegex).join('|')})`;
const SPACED_UNIT = `(?:${[...UNIT_OF.keys()]
  .filter((u) => (u.length >= 2 && u !== 'in' && u !== 'am') || /^[%‰°×]/.test(u))
  .sort(byLength)
  .map(escapeRegex)
  .join('|')})`;

const CURRENCY_SYMBOL: Readonly<Record<string, string>> = { $: 'USD', us$: 'USD', '€': 'EUR', '£': 'GBP', '¥': 'JPY', '₹': 'INR' };
const CURRENCY_WORD: Readonly<Record<string, string>> = {
  usd: 'USD',
  dollar: 'USD',
  dollars: 'USD',
  'us dollar': 'USD',
  'us dollars': 'USD',
  eur: 'EUR',
  euro: 'EUR',
  euros: 'EUR',
  gbp: 'GBP',
  pound: 'GBP',
  pounds: 'GBP',
  jpy: 'JPY',
  yen: 'JPY',
  inr: 'INR',
  rupee: 'INR',
  rupees: 'INR',
  chf: 'CHF',
  cad: 'CAD',
  aud: 'AUD',
  cny: 'CNY',
  rmb: 'CNY',
  // After a figure in Japanese, Chinese and Korean text (`1,200円`, `35元`, `1,200원`).
  円: 'JPY',
  元: 'CNY',
  원: 'KRW',
  krw: 'KRW',
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
/** FIGURE_TOKEN for ASCII tokens: no unit outside ASCII case-folds to ASCII, so `i` alone matches the same. */
const FIGURE_TOKEN_ASCII = new RegExp(FIGURE_TOKEN.source, 'i');

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
  find(text: string): Iterable<Match>;
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
): (input: string) => Iterable<Match> {
  return function* find(input: string) {
    regex.lastIndex = 0;
    for (let m = regex.exec(input); m !== null; m = regex.exec(input)) {
      if (m[0].length === 0) {
        regex.lastIndex++;
        continue;
      }
      yield { index: m.index, length: m[0].length, text: text ? text(m) : m[0], key: key(m) };
    }
  };
}

/** Trailing punctuation that ends a sentence or a parenthesis, not a URL or a path. */
const TRAILING = /[.,;:!?'"’”)\]}>*_]+$/u;

function trimTrailing(token: string): string {
  let t = token.replace(TRAILING, '');
  // Keep a closing parenthesis the token opened (wiki URLs).
  if (token.length > t.length && t.includes('(') && !t.includes(')') && token.slice(t.length).startsWith(')')) t += ')';
  return t;
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

function* around(
  input: string,
  anchor: RegExp,
  stop: RegExp,
  judge: (token: string) => { text: string; key: string } | null,
): Iterable<Match> {
  anchor.lastIndex = 0;
  let consumed = -1;
  for (let m = anchor.exec(input); m !== null; m = anchor.exec(input)) {
    if (m.index < consumed) continue;
    const [from, to] = tokenAround(input, m.index, stop);
    consumed = to;
    const judged = judge(input.slice(from, to));
    if (judged !== null) yield { index: from, length: to - from, text: judged.text, key: judged.key };
  }
}

const EMAIL = /^[\p{L}\p{N}._%+-]+@[\p{L}\p{N}-]+(?:\.[\p{L}\p{N}-]+)*\.\p{L}{2,}$/u;
const PATH =
  /^(?:(?:~|\.{1,2})?\/[\p{L}\p{N}._@%+-]+(?:\/[\p{L}\p{N}._@%+-]*)*|[A-Za-z]:\\[^\s"'<>|]+|[\p{L}\p{N}._-]+(?:[\/\\][\p{L}\p{N}._@-]+)+\.[A-Za-z][A-Za-z0-9]{0,7})$/u;
const IDENTIFIER = /^[\p{L}\p{N}]+(?:[-_.#+][\p{L}\p{N}]+)*$/u;
const IDENTIFIER_ASCII = /^[A-Za-z0-9]+(?:[-_.#+][A-Za-z0-9]+)*$/;

function pathFact(token: string): { text: string; key: string } | null {
  const t = trimTrailing(token.replace(/^[(\[{<*_]+/, ''));
  if (!PATH.test(t)) return null;
  // A path has a letter and is not a fraction, a date or a unit ratio (km/h, MB/s).
  if (!/\p{L}/u.test(t) || /^[\d./]+$/.test(t)) return null;
  if (!/^[~./]|^[A-Za-z]:\\/.test(t) && !/\.[A-Za-z][A-Za-z0-9]{0,7}$/.test(t)) return null;
  return { text: t, key: t };
}

/** Identifiers: the token of letters, digits and inner connectors around each digit, when it has a letter too. */
function* identifiers(input: string): Iterable<Match> {
  const digit = /\d/g;
  let consumed = -1;
  for (let m = digit.exec(input); m !== null; m = digit.exec(input)) {
    if (m.index < consumed) continue;
    let from = m.index;
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
    let to = m.index + 1;
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
    if (ascii ? !/[A-Za-z]/.test(t) || !IDENTIFIER_ASCII.test(t) : !/\p{L}/u.test(t) || !IDENTIFIER.test(t)) continue;
    if (/^\d+(?:st|nd|rd|th)$/i.test(t)) continue; // ordinals
    if ((ascii ? FIGURE_TOKEN_ASCII : FIGURE_TOKEN).test(t)) continue; // a figure with its unit: 12kg, 5-day, 3.5GB
    yield { index: from, length: to - from, text: t, key: identifierKey(t) };
  }
}
/** `-` `_` `.` `#` `+` inside an identifier. */
const isConnector = (c: number): boolean => c === 0x2d || c === 0x5f || c === 0x2e || c === 0x23 || c === 0x2b;

/** A scale word followed by a unit (`4.5 billion years`, `225 million km`): both read, the figure multiplied out. */
const SCALE_THEN = String.raw`(thousand|million|billion|trillion|mn|bn) (${SPACED_UNIT})`;
/** A decimal without its leading zero: a `.` no letter, digit, `.` or `,` comes before, digits, maybe a unit. */
const DOT_NUMBER = new RegExp(
  String.raw`(?<![A-Za-z0-9.,])\.(\d+)(?:[ \t\u00A0-]?(${SPACED_UNIT})|(${ANY_UNIT}))?(?![A-Za-z0-9°]|[.,]\d)`,
  'gi',
);
const NUMBER = new RegExp(
  String.raw`(?<![A-Za-z0-9.,])(\d+(?:[.,']\d+)*)(?:[ \t\u00A0-]?${SCALE_THEN}|[ \t\u00A0-]?(${SPACED_UNIT})|(${ANY_UNIT}))?(?![A-Za-z0-9°])`,
  'gi',
);

const PATTERNS: readonly Pattern[] = [
  // Quoted code: fenced blocks (fences at line starts), then inline spans on one line.
  { kind: 'code', find: byRegex(/^[ \t]*```[^\n`]*\n([^]*?)\n[ \t]*```/gm, (m) => m[1]!.trim()), needs: ['```'] },
  { kind: 'code', find: byRegex(/(?<!`)`([^`\n]{1,400})`(?!`)/g, (m) => m[1]!.trim()), needs: ['`'] },
  {
    kind: 'url',
    find: byRegex(
      /(?<![A-Za-z0-9])(?:(?:https?|ftp):\/\/|www\.)[^\s<>"'`]+/gi,
      (m) =>
        trimTrailing(m[0])
          .toLowerCase()
          .replace(/^(?:https?|ftp):\/\//, '')
          .replace(/^www\./, '')
          .replace(/\/+$/, ''),
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
  {
    kind: 'date',
    find: byRegex(/(?<![A-Za-z0-9])(?:(\d{4})\s?[年년]\s?)?(\d{1,2})\s?[月월](?:\s?(\d{1,2})\s?[日号일])?/g, (m) => {
      if (m[3] !== undefined) return isoKey(m[1] ?? null, m[2]!, m[3]);
      const month = Number(m[2]);
      return m[1] === undefined || month < 1 || month > 12 ? null : `${m[1]}-${String(month).padStart(2, '0')}`;
    }),
  },
  {
    kind: 'date',
    find: byRegex(new RegExp(String.raw`(?<![A-Za-z0-9])${YEAR}-(\d{1,2})-(\d{1,2})(?![A-SU-Za-su-z0-9]|[Tt](?!\d)|-\d)`, 'g'), (m) =>
      isoKey(m[1]!, m[2]!, m[3]!),
    ),
    needs: ['-'],
  },
  {
    kind: 'date',
    find: byRegex(/(?<![A-Za-z0-9.\/])(\d{4})(?:\/(\d{1,2})\/(\d{1,2})|\.\s(\d{1,2})\.\s(\d{1,2})\.?)(?![A-Za-z0-9]|[./]\d)/g, (m) =>
      isoKey(m[1]!, m[2] ?? m[4]!, m[3] ?? m[5]!),
    ),
  },
  {
    kind: 'date',
    find: byRegex(new RegExp(String.raw`(?<![A-Za-z])(${MONTH})\s+${DAY}(?![A-Za-z0-9])(?:,?\s+${YEAR}(?![A-Za-z0-9]))?`, 'gi'), (m) =>
      isoKey(m[3] ?? null, monthNumber(m[1]!), m[2]!),
    ),
  },
  {
    kind: 'date',
    find: byRegex(new RegExp(String.raw`(?<![A-Za-z0-9])${DAY}(?:\s+of)?\s+(${MONTH})(?:,?\s+${YEAR})?(?![A-Za-z0-9])`, 'gi'), (m) =>
      isoKey(m[3] ?? null, monthNumber(m[2]!), m[1]!),
    ),
  },
  {
    kind: 'date',
    find: byRegex(new RegExp(String.raw`(?<![A-Za-z])(${MONTH})\s+${YEAR}(?![A-Za-z0-9])`, 'gi'), (m) => `${m[2]}-${monthNumber(m[1]!)}`),
  },
  {
    kind: 'date',
    find: byRegex(/(?<![A-Za-z0-9.\/])\d{1,2}[./]\d{1,2}[./](?:\d{4}|\d{2})(?![A-Za-z0-9]|[./]\d)/g, (m) => slashedKey(m[0])),
  },
  {
    kind: 'time',
    find: byRegex(
      /(?<![A-SU-Za-su-z0-9:]|[A-Za-z0-9][Tt])(\d{1,2}):(\d{2})(?::(\d{2}))?(?:\s?([ap])\.?m\.?)?(?![A-Ya-y0-9]|[Zz][A-Za-z0-9]|:\d)|(?<![A-Za-z0-9])(\d{1,2})\s?([ap])\.?m\.?(?![A-Za-z0-9])/gi,
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
  {
    kind: 'money',
    find: byRegex(new RegExp(String.raw`(?<![A-Za-z0-9.,]|\d\s)${AMOUNT}\s?([$€£¥₹])(?![A-Za-z0-9])`, 'g'), (m) =>
      moneyKey(CURRENCY_SYMBOL[m[2]!]!, m[1]!, undefined),
    ),
    needs: ['$', '€', '£', '¥', '₹'],
  },
  {
    kind: 'money',
    find: byRegex(
      new RegExp(String.raw`(?<![A-Za-z0-9.,])${AMOUNT}${SCALE}\s?(${Object.keys(CURRENCY_WORD).join('|')})(?![A-Za-z0-9])`, 'gi'),
      (m) => moneyKey(CURRENCY_WORD[m[3]!.toLowerCase()]!, m[1]!, m[2]),
    ),
  },
  {
    kind: 'money',
    find: byRegex(new RegExp(String.raw`\b(USD|EUR|GBP|JPY|INR|CHF|CAD|AUD|CNY)\s?${AMOUNT}${SCALE_ANY_CASE}${AMOUNT_END}`, 'g'), (m) =>
      moneyKey(CURRENCY_WORD[m[1]!.toLowerCase()]!, m[2]!, m[3]),
    ),
  },
  {
    kind: 'version',
    find: byRegex(
      /(?<![A-Za-z0-9.])(?:[vV]\d+(?:\.\d+)+|\d+\.\d+\.\d+(?:\.\d+)*)(?:-[0-9A-Za-z]+(?:\.[0-9A-Za-z]+)*)?(?![A-Za-z0-9]|\.\d)/g,
      (m) => m[0].toLowerCase().replace(/^v/, ''),
    ),
  },
  { kind: 'identifier', find: identifiers },
  {
    kind: 'number',
    find: function* numbers(input) {
      NUMBER.lastIndex = 0;
      for (let m = NUMBER.exec(input); m !== null; m = NUMBER.exec(input)) {
        const unit = m[2] ?? m[4] ?? m[5] ?? null;
        yield {
          index: m.index,
          length: m[0].length,
          text: m[0],
          key: numberKey(m[1]!, unit, m[3] ?? null),
          checked: isCheckedNumber(m[1]!, unit),
        };
      }
    },
  },
  {
    kind: 'number',
    find: function* ordinals(input) {
      const ordinal = /(?<![A-Za-z0-9.,])(\d+)(?:st|nd|rd|th)(?![A-Za-z0-9])/gi;
      for (let m = ordinal.exec(input); m !== null; m = ordinal.exec(input)) {
        yield { index: m.index, length: m[0].length, text: m[0], key: canonicalNumber(m[1]!), checked: isCheckedNumber(m[1]!, null) };
      }
    },
  }, // A decimal written without its leading zero (`.5%`, `.45 in`): the figure with it, after every other kind.
  { kind: 'number', find: byRegex(DOT_NUMBER, (m) => numberKey(`0.${m[1]}`, m[2] ?? m[3] ?? null)), needs: ['.'] },
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
  const rest = matchAll(prepared, (i) => i, CODE, found);
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
    matchAll(parts.join(BARRIER), at, IN_WINDOWS, found);
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
function matchAll(text: string, at: (index: number) => number, patterns: readonly Pattern[], found: { at: number; fact: Fact }[]): string {
  let rest = text;
  for (const pattern of patterns) {
    if (pattern.needs !== undefined && !pattern.needs.some((s) => rest.includes(s))) continue;
    const spans: [number, number][] = [];
    for (const m of pattern.find(rest)) {
      if (m.key === null) continue;
      spans.push([m.index, m.index + m.length]);
      if (m.checked === false) continue;
      const end = m.index + m.text.length;
      found.push({
        at: at(m.index),
        fact: { kind: pattern.kind, text: m.text.trim(), key: m.key, truncated: rest.startsWith('…', end) || rest.startsWith('...', end) },
      });
    }
    // Mask what this kind matched, so a later kind does not match inside it.
    if (spans.length > 0) rest = mask(rest, spans);
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
    d =
      !digits.includes(',') && points.slice(1).every((g) => g.length === 3)
        ? points.join('')
        : points.slice(0, -1).join('') + '.' + points.at(-1);
  }
  if (d.includes('.')) d = d.replace(/0+$/, '').replace(/\.$/, '');
  return d.replace(/^0+(?=\d)/, '');
}

function moneyKey(currency: string, amount: string, scale: string | undefined): string {
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

/** Zeros each scale word (a UNIT_ALIASES name) stands for. */
const SCALE_ZEROS: Readonly<Record<string, number>> = { thousand: 3, million: 6, billion: 9, trillion: 12, 万: 4, 亿: 8, 兆: 12 };

/** A canonical number times 10^zeros, canonical again (decimal digits moved, not multiplied: exact). */
function scaled(value: string, zeros: number): string {
  if (zeros === 0) return value;
  const [whole = '', fraction = ''] = value.split('.');
  const digits = `${whole}${fraction.padEnd(zeros, '0')}`;
  const point = whole.length + zeros;
  const rest = digits.slice(point).replace(/0+$/, '');
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
