import { codePointLength } from './text.ts';

/**
 * Sentence splitting for the offline extractive summarizer, with
 * `Intl.Segmenter` (ICU's sentence rules, built into Node): it knows
 * abbreviations followed by lower case ("e.g. this", "the U.S. and"),
 * closing quotes after a full stop, CJK full stops and emoji sequences.
 * Two rules of ours on top, because replies hold code: an ICU boundary is
 * kept only where white space follows it (or a CJK full stop ends the
 * sentence), so `(a).Magnitude` or `${x}!` is never cut; and never inside an
 * inline code span (an odd number of backticks so far on the line). Line
 * breaks always end a sentence (lists, headings, code lines).
 * Deterministic: the same text always gives the same sentences.
 */

export interface Sentence {
  /** Position in the item, from 0. */
  index: number;
  text: string;
  /** Length in code points. */
  length: number;
  /** Size in UTF-8 bytes. */
  bytes: number;
}

const segmenter = new Intl.Segmenter('en', { granularity: 'sentence' });

// Only ASCII whitespace is collapsed: a no-break space inside "1 000 €" is part of the figure.
const ASCII_SPACE_RUN = /[\t\n\v\f\r ]+/g;
const CJK_STOP = /[。！？]$/u;
const ENDS_WITH_SPACE = /\s$/u;

/**
 * A line longer than this is given to the segmenter a window at a time:
 * V8's Intl.Segmenter takes time quadratic in the length of the string it
 * walks (one 200,000-character line of short sentences: 6 s, 20 s in CJK).
 */
export const SEGMENT_WINDOW = 4096;

/** The sentences of `text`, whitespace-collapsed, empty ones dropped. */
export function splitSentences(text: string, window = SEGMENT_WINDOW): Sentence[] {
  const sentences: Sentence[] = [];
  const push = (piece: string) => {
    const cleaned = piece.replace(ASCII_SPACE_RUN, ' ').trim();
    if (cleaned.length > 0)
      sentences.push({
        index: sentences.length,
        text: cleaned,
        length: codePointLength(cleaned),
        bytes: Buffer.byteLength(cleaned, 'utf8'),
      });
  };
  for (const line of text.split(/\r?\n/)) {
    if (line.trim().length === 0) continue;
    let pending = '';
    let ticks = 0;
    for (const segment of segmentsOf(line, window)) {
      pending += segment;
      for (let i = segment.indexOf('`'); i !== -1; i = segment.indexOf('`', i + 1)) ticks++;
      if (ticks % 2 === 0 && (ENDS_WITH_SPACE.test(segment) || CJK_STOP.test(segment))) {
        push(pending);
        pending = '';
      }
    }
    push(pending);
  }
  return sentences;
}

/**
 * ICU's sentence segments of `line`, the same as `segmenter.segment(line)`
 * gives, except that a segment may come in two pieces where a window ends.
 * Each window ends between two letters, where no rule breaks (UAX #29:
 * letters only break after a terminator), no rule's left context reaches
 * back across the end (it is a terminator, closing punctuation and spaces),
 * and every look-ahead from a place before it stops at or before its last
 * letter (the longest, rule SB8, reads up to the next letter). So the
 * segments before the end are the line's own, and the piece cut at the end
 * is completed by the next window's first segment: splitSentences only ends
 * a sentence on a segment that ends with white space or a CJK full stop,
 * never one that ends with a letter. A window whose second half has no two
 * adjacent letters (a table of figures) grows until it has them, up to
 * `MAX_GROWTH` times its length; past that it ends there, and a segment's
 * end may differ from the line's.
 */
function* segmentsOf(line: string, window: number): Generator<string> {
  // ASCII without a terminator (`.` `!` `?`) or a lone CR has no sentence break: the segmenter
  // would give the line back whole, at a few microseconds a call (most lines of a table or a log).
  if (!MAY_BREAK.test(line)) {
    yield line;
    return;
  }
  let from = 0;
  while (line.length - from > window) {
    const to = windowEnd(line, from, window);
    for (const { segment } of segmenter.segment(line.slice(from, to))) yield segment;
    from = to;
  }
  for (const { segment } of segmenter.segment(from === 0 ? line : line.slice(from))) yield segment;
}

/**
 * Where the window of `line` from `from` ends: between the last two adjacent
 * letters of its second half, else between the first two after it, else
 * (none within MAX_GROWTH windows) there, not inside a surrogate pair.
 */
function windowEnd(line: string, from: number, window: number): number {
  const full = from + window;
  for (let to = full - 1; to > from + window / 2; to--) {
    if (isLetter(line, to) && isLetter(line, to - 1)) return to;
  }
  const last = Math.min(line.length, from + MAX_GROWTH * window);
  for (let to = full; to < last; to++) {
    if (isLetter(line, to) && isLetter(line, to - 1)) return to;
  }
  if (last === line.length) return last;
  const c = line.charCodeAt(last - 1);
  return c >= 0xd800 && c <= 0xdbff ? last - 1 : last;
}
const MAX_GROWTH = 2;

const MAY_BREAK = /[^\x00-\x7f]|[.!?\r]/;
const LETTER = /\p{L}/u;
/** A letter at `i` of `text` (one UTF-16 unit: a letter outside the BMP is a pair and does not count). */
function isLetter(text: string, i: number): boolean {
  const c = text.charCodeAt(i);
  return c < 0x80 ? (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a) : LETTER.test(text[i]!);
}
