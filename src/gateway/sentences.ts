import { codePointLength } from './text.ts';

/**
 * Sentence splitting and scoring for the offline extractive summarizer.
 * Deterministic: the same text always gives the same sentences and scores.
 */

export interface Sentence {
  /** Position in the item, from 0. */
  index: number;
  text: string;
  /** Length in code points. */
  length: number;
  score: number;
}

// Line breaks end a sentence (lists, headings); so do . ! ? followed by whitespace
// (so "3.14", "v1.2.3" and "e.g.x" stay whole) and CJK full stops, which take no space after them.
const BOUNDARY = /\r?\n|(?<=[.!?])[\t\f\v ]+|(?<=[。！？])/u;

// Only ASCII whitespace is collapsed: a no-break space inside "1 000 €" is part of the figure.
const ASCII_SPACE_RUN = /[\t\n\v\f\r ]+/g;

const HAS_DIGIT = /\p{Nd}/u;
const DATE = /\b\d{4}-\d{2}-\d{2}\b|\b\d{1,2}[./]\d{1,2}[./]\d{2,4}\b|\b(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*\.? \d{1,2}\b/;
// One token that mixes letters and digits (INV-2024-001, sha256), snake_case, camelCase or `code`.
const IDENTIFIER_TOKEN = /^(?:(?=[^]*\d)(?=[^]*[A-Za-z])[\w.:/#-]+|[A-Za-z]+_\w+|[a-z]+[A-Z]\w*|`[^`]+`)$/;
// Punctuation around a token that is not part of it ("(INV-7)," -> "INV-7").
const TOKEN_EDGES = /^[("'\[{<]+|[)"'\]}>,;:.!?]+$/g;

/**
 * Features are read from the first 1,000 characters of a sentence and from
 * tokens of at most 64 characters: scoring stays linear on a 10 MB sentence
 * without spaces, where a scanning regex would be quadratic.
 */
const SCORE_WINDOW = 1_000;
const MAX_TOKEN = 64;

/** Scoring weights: facts (figures, dates, identifiers) outrank position, position outranks length. */
const WEIGHT = {
  first: 2,
  last: 0.5,
  digit: 2,
  date: 1,
  identifier: 1.5,
  /** Sentences of 40–300 characters carry a whole statement without padding. */
  goodLength: 1,
  /** Under 20 characters is usually a fragment ("OK.", "See below:"). */
  fragment: -1,
  /** No letter or digit at all (direction marks, rules, emoji only): kept only when nothing else fits. */
  noWords: -4,
} as const;

const HAS_WORD = /[\p{L}\p{N}]/u;

/** The sentences of `text`, whitespace-collapsed, empty ones dropped, each scored. */
export function splitSentences(text: string): Sentence[] {
  const pieces = text.split(BOUNDARY);
  const sentences: Sentence[] = [];
  for (const piece of pieces) {
    const cleaned = piece.replace(ASCII_SPACE_RUN, ' ').trim();
    if (cleaned.length === 0) continue;
    sentences.push({ index: sentences.length, text: cleaned, length: codePointLength(cleaned), score: 0 });
  }
  for (const s of sentences) s.score = score(s, sentences.length);
  return sentences;
}

function score(s: Sentence, count: number): number {
  const window = s.text.length > SCORE_WINDOW ? s.text.slice(0, SCORE_WINDOW) : s.text;
  let value = s.index === 0 ? WEIGHT.first : 1 / (1 + s.index);
  if (count > 2 && s.index === count - 1) value += WEIGHT.last;
  if (HAS_DIGIT.test(window)) value += WEIGHT.digit;
  if (DATE.test(window)) value += WEIGHT.date;
  if (hasIdentifier(window)) value += WEIGHT.identifier;
  if (!HAS_WORD.test(window)) value += WEIGHT.noWords;
  if (s.length < 20) value += WEIGHT.fragment;
  else if (s.length >= 40 && s.length <= 300) value += WEIGHT.goodLength;
  return value;
}

function hasIdentifier(window: string): boolean {
  for (const raw of window.split(' ')) {
    if (raw.length < 3 || raw.length > MAX_TOKEN) continue;
    const token = raw.replace(TOKEN_EDGES, '');
    if (token.length >= 3 && IDENTIFIER_TOKEN.test(token)) return true;
  }
  return false;
}
