/**
 * Character counting and sanitising shared by the summarizers. A "character"
 * everywhere in the gateway is a Unicode code point, the same count as
 * `[...text].length`, so an emoji or a CJK ideograph outside the BMP counts once.
 */

/** U+FFFD REPLACEMENT CHARACTER: what a lone surrogate becomes. */
export const REPLACEMENT_CHARACTER = '\uFFFD';

// A high surrogate not followed by a low one, or a low surrogate not preceded by a high one.
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

/** Number of code points in `text`, without allocating (equals `[...text].length`). */
export function codePointLength(text: string): number {
  let count = 0;
  for (let i = 0; i < text.length; i++) {
    const unit = text.charCodeAt(i);
    // A high surrogate followed by a low surrogate is one code point: skip the low half.
    if (unit >= 0xd800 && unit <= 0xdbff && i + 1 < text.length) {
      const next = text.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) i++;
    }
    count++;
  }
  return count;
}

/**
 * `text` with every lone surrogate replaced by U+FFFD (what
 * `String.prototype.toWellFormed` does; not in our ES2023 lib). A lone
 * surrogate cannot be encoded as UTF-8: JSON.stringify would send it as a
 * `\udXXX` escape that a provider may reject as invalid input.
 */
export function toWellFormed(text: string): string {
  return text.replace(LONE_SURROGATE, REPLACEMENT_CHARACTER);
}

/** The first `max` code points of `text` (never splits a surrogate pair). */
export function sliceCodePoints(text: string, max: number): string {
  if (max <= 0) return '';
  let points = 0;
  let i = 0;
  while (i < text.length && points < max) {
    const unit = text.charCodeAt(i);
    const pair =
      unit >= 0xd800 && unit <= 0xdbff && i + 1 < text.length && text.charCodeAt(i + 1) >= 0xdc00 && text.charCodeAt(i + 1) <= 0xdfff;
    i += pair ? 2 : 1;
    points++;
  }
  return text.slice(0, i);
}

/**
 * Characters that show nothing on their own, for "is this text empty?":
 * - `\p{White_Space}`: spaces, tabs, line breaks, NBSP, U+3000 and the like;
 * - `\p{Default_Ignorable_Code_Point}`: zero-width characters (U+200B-U+200D,
 *   U+2060, U+FEFF), variation selectors, soft hyphen, tag characters, and
 *   the Hangul fillers U+115F, U+1160, U+3164 and U+FFA0;
 * - `\p{Cf}`: format characters (bidi marks and controls, U+2061-U+2064...);
 * - `\p{Cc}`: C0 and C1 control characters (NUL included);
 * - U+2800 BRAILLE PATTERN BLANK: no dots, drawn as blank, but a symbol (So).
 * trim() knows only White_Space (and U+FEFF): an answer of U+200B alone passed it.
 */
const VISIBLE = /[^\p{White_Space}\p{Default_Ignorable_Code_Point}\p{Cf}\p{Cc}\u2800]/u;

/** Whether `text` has nothing visible: only the invisible characters above (or nothing). */
export function isBlank(text: string): boolean {
  return !VISIBLE.test(text);
}

// Controls (NUL included, which PostgreSQL text cannot hold), line breaks and other white space: one space each run.
const CONTROL_OR_SPACE_RUN = /[\p{Cc}\p{White_Space}]+/gu;

/**
 * A string a provider sent (an error message or type, a request id), made fit
 * to store and log: lone surrogates become U+FFFD, control characters (NUL
 * included) and runs of white space become one space, and it is cut to `max`
 * code points, the last one an ellipsis when it was longer. A provider can
 * send anything; PostgreSQL refuses a NUL in text, and an unbounded message
 * would grow every attempt row and log line with it.
 */
export function providerText(text: string, max: number): string {
  // Only the head can survive the cut: a megabyte message is not scanned whole.
  const head = text.length > max * 8 ? text.slice(0, max * 8) : text;
  const clean = toWellFormed(head).replace(CONTROL_OR_SPACE_RUN, ' ').trim();
  if (head === text && codePointLength(clean) <= max) return clean;
  return `${sliceCodePoints(clean, max - 1).trimEnd()}…`;
}
