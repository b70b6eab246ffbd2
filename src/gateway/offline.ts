import { promptEntry } from './prompts.ts';
import { splitSentences, type Sentence } from './sentences.ts';
import { codePointLength, sliceCodePoints, toWellFormed } from './text.ts';
import type { Outcome, Summarizer, SummaryRequest } from './types.ts';

/**
 * The model identity of the offline summarizer. Its records carry it, so an
 * extractive digest can never pass for a model's summary. Bump the version
 * when the output for the same input changes.
 */
export const OFFLINE_MODEL = 'sourcebound/extractive@1';

/** An item gets no part of the summary when fewer characters than this are left for it. */
const MIN_ITEM_CHARS = 24;
/** Ids longer than this are shortened to their first `SHORT_ID_CHARS` characters in the part's tag. */
const LONG_ID_CHARS = 12;
const SHORT_ID_CHARS = 8;
/** Marks a sentence cut short because it alone did not fit. */
const ELLIPSIS = '…';

interface Part {
  tag: string;
  sentences: Sentence[];
  /** Code points of all sentences joined by single spaces. */
  fullLength: number;
}

/**
 * A deterministic extractive summarizer (no network, no clock, no randomness).
 * Per item it keeps the highest-scoring sentences (figures, dates,
 * identifiers, the opening sentence) in their original order, prefixed with
 * `[<short id>]`. Sentences are copied, never rewritten (only runs of ASCII
 * whitespace are collapsed), so numbers and identifiers stay byte-exact; a
 * sentence is cut only when it alone exceeds an item's share, at a word
 * boundary, marked with `…`. Lone surrogates become U+FFFD. Always within the cap.
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

/** The summary text, at most `maxChars` code points, or null when no item has any text. */
export function extractiveSummary(items: readonly { id: string; text: string }[], maxChars: number): string | null {
  const parts: Part[] = [];
  for (const item of items) {
    const sentences = splitSentences(toWellFormed(item.text));
    if (sentences.length === 0) continue;
    const fullLength = sentences.reduce((sum, s) => sum + s.length, 0) + sentences.length - 1;
    parts.push({ tag: `[${shortId(item.id)}] `, sentences, fullLength });
  }
  if (parts.length === 0) return null;
  if (maxChars <= 0) return '';

  const kept = partsThatFit(parts, maxChars);
  if (kept.length === 0) {
    // Not even one tag and a minimal share fit: the best sentence of the first item, untagged.
    const first = parts[0]!;
    return pick(first.sentences, first.fullLength, maxChars);
  }
  const overhead = kept.reduce((sum, p) => sum + codePointLength(p.tag), 0) + kept.length - 1;
  const shares = waterFill(kept.map((p) => p.fullLength), maxChars - overhead);
  return kept.map((p, i) => p.tag + pick(p.sentences, p.fullLength, shares[i]!)).join('\n');
}

function shortId(id: string): string {
  const clean = toWellFormed(id).replace(/[\s\]]+/g, '_');
  return codePointLength(clean) > LONG_ID_CHARS ? sliceCodePoints(clean, SHORT_ID_CHARS) : clean;
}

/** The leading parts whose tags, separators and a minimal share all fit in `maxChars`. */
function partsThatFit(parts: Part[], maxChars: number): Part[] {
  let used = -1; // n parts need n-1 newlines
  const kept: Part[] = [];
  for (const part of parts) {
    const cost = 1 + codePointLength(part.tag) + MIN_ITEM_CHARS;
    if (used + cost > maxChars) break;
    used += cost;
    kept.push(part);
  }
  return kept;
}

/**
 * Splits `budget` among parts that need `needs[i]`: each gets an equal share,
 * and what a short part does not need goes to the others.
 */
function waterFill(needs: number[], budget: number): number[] {
  const order = needs.map((need, index) => ({ need, index })).sort((a, b) => a.need - b.need || a.index - b.index);
  const shares = new Array<number>(needs.length).fill(0);
  let left = budget;
  order.forEach(({ need, index }, rank) => {
    const share = Math.min(need, Math.floor(left / (order.length - rank)));
    shares[index] = share;
    left -= share;
  });
  return shares;
}

/** The best sentences of one item that fit in `budget`, in original order; or the best one cut to fit. */
function pick(sentences: Sentence[], fullLength: number, budget: number): string {
  if (fullLength <= budget) return joinSentences(sentences);
  const ranked = [...sentences].sort((a, b) => b.score - a.score || a.index - b.index);
  const shortest = sentences.reduce((min, s) => Math.min(min, s.length), Infinity);
  const chosen: Sentence[] = [];
  const seen = new Set<string>(); // a repeated sentence says nothing new
  let used = -1; // n sentences need n-1 spaces
  for (const s of ranked) {
    if (used + 1 + s.length <= budget && !seen.has(s.text)) {
      chosen.push(s);
      seen.add(s.text);
      used += 1 + s.length;
    }
    if (budget - used - 1 < shortest) break;
  }
  if (chosen.length === 0) return cutAtWord(ranked[0]!.text, budget);
  return joinSentences(chosen.sort((a, b) => a.index - b.index));
}

/** Sentences joined by a space, except after a CJK full stop, which takes none (budgets count one anyway). */
function joinSentences(sentences: Sentence[]): string {
  let out = '';
  for (const s of sentences) out += out.length === 0 || /[。！？]$/u.test(out) ? s.text : ` ${s.text}`;
  return out;
}

/** `text` cut to at most `budget` code points including the `…`, at the last space when there is one. */
function cutAtWord(text: string, budget: number): string {
  if (budget <= 0) return '';
  if (budget === 1) return ELLIPSIS;
  const head = sliceCodePoints(text, budget - 1);
  const space = head.lastIndexOf(' ');
  // Cut at a word boundary unless that throws away more than half: a text without spaces
  // (CJK, one long token) is cut at a code point instead.
  const cut = space > head.length / 2 ? head.slice(0, space) : head;
  return cut.trimEnd() + ELLIPSIS;
}
