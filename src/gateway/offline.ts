import { promptEntry } from './prompts.ts';
import { splitSentences, type Sentence } from './sentences.ts';
import { textRank } from './textrank.ts';
import { codePointLength, sliceCodePoints, toWellFormed } from './text.ts';
import type { Outcome, Summarizer, SummaryRequest } from './types.ts';

/**
 * The model identity of the offline summarizer. Its records carry it, so an
 * extractive digest can never pass for a model's summary. Bump the version
 * when the output for the same input changes (@2: a target of a quarter of
 * the input, TextRank, Intl.Segmenter sentences).
 */
export const OFFLINE_MODEL = 'sourcebound/extractive@2';

/**
 * Sizes here are UTF-8 bytes: a summary of at most N bytes has at most N
 * characters, so it fits a character limit (conversations) and a byte limit
 * (run checkpoints) alike, and the share is a share of what is sent.
 */
const bytes = (text: string) => Buffer.byteLength(text, 'utf8');

/** The summary aims at this share of the input's UTF-8 bytes... */
export const TARGET_SHARE = 0.25;
/** ...but at least this many bytes, so a short range still says something (never more than the input or the cap). */
export const MIN_TARGET_BYTES = 400;
/**
 * Only the first this many characters of an item are read: the target is
 * bounded by the 6,000-character cap, and ranking stays fast on a 10 MB reply.
 */
const SCAN_CHARS = 200_000;
/** Ids longer than this are shortened to their first `SHORT_ID_CHARS` characters in the part's tag. */
const LONG_ID_CHARS = 12;
const SHORT_ID_CHARS = 8;
/** Marks a sentence cut short because nothing whole fit. */
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

/**
 * A deterministic extractive summarizer (no network, no clock, no randomness).
 * It aims at a quarter of the input's UTF-8 bytes (at least 400, never more
 * than the cap, counted in bytes so it fits a character cap too) and picks sentences by TextRank (Mihalcea & Tarau, 2004) over all
 * sentences of the material: first the best sentence of each item, then the
 * best of the rest, while they fit. Each item's chosen sentences appear in
 * their original order, after `[<short id>]`, items in their order. Sentences
 * are copied, never rewritten (only runs of ASCII whitespace are collapsed),
 * so every figure and identifier stays byte-exact and grounded; a sentence is
 * cut (at a word boundary, marked `…`) only when no whole one fits at all.
 * Lone surrogates become U+FFFD.
 */
export function createOfflineSummarizer(options: { maxChars: number }): Summarizer {
  return {
    model: OFFLINE_MODEL,
    async summarize(request: SummaryRequest): Promise<Outcome> {
      if (promptEntry(request.promptVersion) === undefined) {
        return { kind: 'config', reason: `unknown_prompt_version:${request.promptVersion}`, status: null };
      }
      if (request.signal?.aborted) return { kind: 'deferred', reason: 'aborted_before_send', retryAfterMs: null };
      const text = extractiveSummary(request.items, request.maxChars ?? options.maxChars);
      if (text === null) return { kind: 'invalid', reason: 'empty_input', model: OFFLINE_MODEL, usage: null, requestId: null };
      return { kind: 'ok', text, model: OFFLINE_MODEL, usage: null, requestId: null };
    },
  };
}

/**
 * The size the summary aims at, in UTF-8 bytes: a quarter of the input's
 * `inputBytes`, at least `MIN_TARGET_BYTES` (or `wholeBytes`, the size of a
 * summary that keeps everything, when that is smaller), never more than `max`.
 */
export function targetBytes(inputBytes: number, wholeBytes: number, max: number): number {
  return Math.max(0, Math.min(max, Math.max(Math.ceil(inputBytes * TARGET_SHARE), Math.min(MIN_TARGET_BYTES, wholeBytes))));
}

/** The summary text, at most `maxChars` code points, or null when no item has any text. */
export function extractiveSummary(items: readonly { id: string; text: string }[], maxChars: number): string | null {
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
  const cost = (r: Ranked) => r.sentence.bytes + (chosen[r.part]!.length === 0
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
