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

/** The sentences of `text`, whitespace-collapsed, empty ones dropped. */
export function splitSentences(text: string): Sentence[] {
  const sentences: Sentence[] = [];
  const push = (piece: string) => {
    const cleaned = piece.replace(ASCII_SPACE_RUN, ' ').trim();
    if (cleaned.length > 0) sentences.push({ index: sentences.length, text: cleaned, length: codePointLength(cleaned), bytes: Buffer.byteLength(cleaned, 'utf8') });
  };
  for (const line of text.split(/\r?\n/)) {
    if (line.trim().length === 0) continue;
    let pending = '';
    let ticks = 0;
    for (const { segment } of segmenter.segment(line)) {
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
