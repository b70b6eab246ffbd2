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
    const pair = unit >= 0xd800 && unit <= 0xdbff && i + 1 < text.length
      && text.charCodeAt(i + 1) >= 0xdc00 && text.charCodeAt(i + 1) <= 0xdfff;
    i += pair ? 2 : 1;
    points++;
  }
  return text.slice(0, i);
}
