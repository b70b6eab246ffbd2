import { splitSentences, type Sentence } from '../../src/gateway/sentences.ts';
import { textRank } from '../../src/gateway/textrank.ts';
import { codePointLength, sliceCodePoints, toWellFormed } from '../../src/gateway/text.ts';

/**
 * The selection of `sourcebound/extractive@2`, frozen here so that
 * bench/summary-facts.ts can compare it with the current offline summarizer
 * on the same ranges: sentences by TextRank alone, each reply tagged with
 * its short message id. Not used by the package.
 */

const bytes = (text: string) => Buffer.byteLength(text, 'utf8');
const SCAN_CHARS = 200_000;
const targetBytes = (inputBytes: number, wholeBytes: number, max: number) =>
  Math.max(0, Math.min(max, Math.max(Math.ceil(inputBytes * 0.25), Math.min(400, wholeBytes))));
const LONG_ID_CHARS = 12;
const SHORT_ID_CHARS = 8;
const ELLIPSIS = '…';

interface Part {
  tag: string;
  sentences: Sentence[];
}

interface Ranked {
  part: number;
  sentence: Sentence;
  score: number;
}

/** The summary text, at most `maxChars` code points, or null when no item has any text. */
export function extractiveSummaryAt2(items: readonly { id: string; text: string }[], maxChars: number): string | null {
  const parts: Part[] = [];
  let inputBytes = 0;
  let wholeBytes = -1; // n parts need n-1 newlines
  for (const item of items) {
    const text = toWellFormed(item.text.length > SCAN_CHARS ? sliceCodePoints(item.text, SCAN_CHARS) : item.text);
    const sentences = splitSentences(text);
    if (sentences.length === 0) continue;
    inputBytes += bytes(item.text);
    const tag = `[${shortId(item.id)}] `;
    parts.push({ tag, sentences });
    wholeBytes += 1 + bytes(tag) + sentences.reduce((sum, s) => sum + s.bytes, 0) + sentences.length - 1;
  }
  if (parts.length === 0) return null;
  const budget = targetBytes(inputBytes, wholeBytes, maxChars);
  if (budget <= 0) return '';

  const scores = textRank(parts.flatMap((p) => p.sentences.map((s) => s.text)));
  const ranked: Ranked[] = [];
  parts.forEach((part, p) => part.sentences.forEach((sentence) => ranked.push({ part: p, sentence, score: scores[ranked.length]! })));
  const byScore = (a: Ranked, b: Ranked) => b.score - a.score || a.part - b.part || a.sentence.index - b.sentence.index;

  const chosen: Sentence[][] = parts.map(() => []);
  const seen = new Set<string>(); // a repeated sentence says nothing new
  let used = 0;
  const cost = (r: Ranked) =>
    r.sentence.bytes +
    (chosen[r.part]!.length === 0
      ? bytes(parts[r.part]!.tag) + (used === 0 ? 0 : 1) // a new part: its tag, and a newline before it
      : 1); // a space before it
  const take = (r: Ranked) => {
    if (seen.has(r.sentence.text) || used + cost(r) > budget) return;
    used += cost(r);
    chosen[r.part]!.push(r.sentence);
    seen.add(r.sentence.text);
  };
  // Each item's best sentence first (so each reply is represented while room lasts), then the rest.
  const bestOfEach = parts.map((_, p) => ranked.filter((r) => r.part === p).sort(byScore)[0]!).sort(byScore);
  for (const r of bestOfEach) take(r);
  for (const r of [...ranked].sort(byScore)) take(r);

  if (used === 0) {
    // Not one whole sentence fits: the best sentence, cut to fit (tagged when the tag leaves room).
    const best = [...ranked].sort(byScore)[0]!;
    const tag = parts[best.part]!.tag;
    const room = budget - bytes(tag);
    return room >= 8 ? tag + cutAtWord(best.sentence.text, room) : cutAtWord(best.sentence.text, budget);
  }
  return parts
    .map((part, p) => (chosen[p]!.length === 0 ? null : part.tag + joinSentences(chosen[p]!.sort((a, b) => a.index - b.index))))
    .filter((line): line is string => line !== null)
    .join('\n');
}

/** The longest prefix of `text` of at most `max` UTF-8 bytes (never splits a code point). */
function sliceUtf8(text: string, max: number): string {
  let used = 0;
  let end = 0;
  for (const ch of text) {
    const size = ch.length === 2 ? 4 : ch.charCodeAt(0) < 0x80 ? 1 : ch.charCodeAt(0) < 0x800 ? 2 : 3;
    if (used + size > max) break;
    used += size;
    end += ch.length;
  }
  return text.slice(0, end);
}

/**
 * The tag's id: a long one shortened to its first characters (a UUID to its
 * first group), with `…` when the cut splits a word, so the tag never reads
 * as an identifier the material does not contain.
 */
function shortId(id: string): string {
  const clean = toWellFormed(id).replace(/[\s\]]+/g, '_');
  if (codePointLength(clean) <= LONG_ID_CHARS) return clean;
  const head = sliceCodePoints(clean, SHORT_ID_CHARS);
  return /^[\p{L}\p{N}]/u.test(clean.slice(head.length)) ? `${head}…` : head;
}

/** Sentences joined by a space, except after a CJK full stop, which takes none (budgets count one anyway). */
function joinSentences(sentences: Sentence[]): string {
  let out = '';
  for (const s of sentences) out += out.length === 0 || /[。！？]$/u.test(out) ? s.text : ` ${s.text}`;
  return out;
}

/** `text` cut to at most `budget` UTF-8 bytes including the `…` (3 bytes), at the last space when there is one. */
function cutAtWord(text: string, budget: number): string {
  if (budget < 4) return sliceUtf8(text, Math.max(0, budget));
  const head = sliceUtf8(text, budget - 3);
  const space = head.lastIndexOf(' ');
  // Cut at a word boundary unless that throws away more than half: a text without spaces
  // (CJK, one long token) is cut at a code point instead.
  const cut = space > head.length / 2 ? head.slice(0, space) : head;
  return cut.trimEnd() + ELLIPSIS;
}
