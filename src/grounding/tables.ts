// Grounding tables: months, units, currencies and scales, and the regular
// expression fragments built from them. Data only (src/grounding/index.ts has
// the rules these tables serve).
import { NON_ASCII, escapeRegex } from './chars.ts';

export const MONTHS = ['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct', 'nov', 'dec'];
export const MONTH = String.raw`(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?`;
export const DAY = String.raw`(\d{1,2})(?:st|nd|rd|th)?`;
export const YEAR = String.raw`(\d{4})`;
/** A range's join between two days: `-` `–` `—` or `to`. */
const DAY_JOIN = String.raw`(?:\s?[-–—]\s?|\s+to\s+)`;
/** `March 5-7, 2024`: the month, the days, the year (rangeKeys). */
export const MONTH_DAYS = new RegExp(
  String.raw`(?<![A-Za-z])(${MONTH})\s+${DAY}${DAY_JOIN}${DAY}(?![A-Za-z0-9])(?:,?\s+${YEAR}(?![A-Za-z0-9]))?`,
  'gi',
);
/** `5-7 March 2024`: the days, the month, the year (rangeKeys). */
export const DAYS_MONTH = new RegExp(
  String.raw`(?<![A-Za-z0-9])${DAY}${DAY_JOIN}${DAY}(?:\s+of)?\s+(${MONTH})(?:,?\s+${YEAR})?(?![A-Za-z0-9])`,
  'gi',
);

/**
 * Units a figure may carry, each with its canonical name (plural and singular
 * spellings are one unit). Compared without case. A unit of one letter (and
 * `in`, `am`) counts only when attached to its number (`5m`, `3x`): with a
 * space it is more often a word (`5 a day`, `100 in total`).
 */
export const UNIT_ALIASES: Readonly<Record<string, readonly string[]>> = {
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
export const UNIT_OF = new Map<string, string>(
  Object.entries(UNIT_ALIASES).flatMap(([canon, names]) => names.map((n) => [n, canon] as [string, string])),
);
const byLength = (a: string, b: string) => b.length - a.length;
export const ANY_UNIT = `(?:${[...UNIT_OF.keys()].sort(byLength).map(escapeRegex).join('|')})`;
export const SPACED_UNIT = `(?:${[...UNIT_OF.keys()]
  .filter((u) => (u.length >= 2 && u !== 'in' && u !== 'am') || /^[%‰°×]/.test(u))
  .sort(byLength)
  .map(escapeRegex)
  .join('|')})`;

export const CURRENCY_SYMBOL: Readonly<Record<string, string>> = { $: 'USD', us$: 'USD', '€': 'EUR', '£': 'GBP', '¥': 'JPY', '₹': 'INR' };
export const CURRENCY_WORD: Readonly<Record<string, string>> = {
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
export function currencySpellings(): Map<string, string[]> {
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
export const SCALE = String.raw`(\s?(?:${SCALE_WORDS.join('|')})|[kmbt])?`;
const anyCase = (word: string) => [...word].map((c) => `[${c}${c.toUpperCase()}]`).join('');
export const SCALE_ANY_CASE = String.raw`(\s?(?:${SCALE_WORDS.map(anyCase).join('|')})|[kmbtKMBT])?`;
/** After an amount: no letter or digit, nor a decimal part (a partial amount is no amount: `$1.99mn` is not `$1`). */
export const AMOUNT_END = String.raw`(?![A-Za-z0-9]|[.,]\d)`;
export const AMOUNT = String.raw`(\d+(?:[.,]\d+)*)`;
/**
 * A token that is only a figure and its unit (`12kg`, `5-day`, `3.5GB`): a
 * number, not an identifier. A leading zero makes it a code (`0634102a`).
 */
export const FIGURE_TOKEN = new RegExp(`^(?:0|[1-9]\\d*)(?:[.,]\\d+)?-?${ANY_UNIT}$`, 'iu');
/**
 * FIGURE_TOKEN on an ASCII token of letters, digits and connectors (an
 * identifier candidate), without its regex of every unit: no unit starts
 * with a digit, `.`, `,` or `-`, so the unit can only be what follows the
 * longest figure prefix, and no unit outside ASCII case-folds to ASCII.
 */
export function isFigureTokenAscii(token: string): boolean {
  const prefix = FIGURE_PREFIX.exec(token);
  if (prefix === null || prefix[0].length === token.length) return false;
  return ASCII_UNITS.has(token.slice(prefix[0].length).toLowerCase());
}
const FIGURE_PREFIX = /^(?:0|[1-9]\d*)(?:[.,]\d+)?-?/;
const ASCII_UNITS = new Set([...UNIT_OF.keys()].filter((u) => !NON_ASCII.test(u)).map((u) => u.toLowerCase()));

/** Zeros each scale word (a UNIT_ALIASES name) stands for. */
export const SCALE_ZEROS: Readonly<Record<string, number>> = { thousand: 3, million: 6, billion: 9, trillion: 12, 万: 4, 亿: 8, 兆: 12 };
