/**
 * Grounding: every checkable fact of a summary must occur in the material the
 * summarizer was given (docs/grounding.md). One module for both systems:
 * conversation ranges (src/conversation) and Run checkpoints (src/run) call
 * `groundOutcomeAsync` on the summarizer's answer before they commit it: the
 * check of `groundOutcome`, in slices that let the event loop in.
 *
 * The files, lowest first: chars.ts (character classes), slices.ts (a check
 * that pauses: run whole or in slices), tables.ts (months,
 * units, currencies, scales), normalize.ts (rules 1-3 below), keys.ts (a
 * fact's canonical key), patterns.ts (what a fact looks like), extract.ts (the
 * facts of a text), material-index.ts (the material's keys and normalized
 * text), occurs.ts (a fact as written in the material), ground.ts (the
 * verdict). This header is the rule set; each file implements its part.
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

export { groundOutcome, groundOutcomeAsync, groundSummary } from './ground.ts';
export { extractFacts } from './extract.ts';
export { normalizeText } from './normalize.ts';
export {
  DEFAULT_GROUNDING_POLICY,
  GROUNDING_POLICIES,
  type Fact,
  type FactKind,
  type Grounding,
  type GroundingPolicy,
} from '../support/summary-contract.ts';
