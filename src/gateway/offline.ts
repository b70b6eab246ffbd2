import { neutralizeQuoted } from '../support/markers.ts';
import { DEFAULT_MAX_INPUT_CHARS } from './contract.ts';
import { promptEntry, type ItemKey } from './prompts.ts';
import { factKeys, isPhatic, namesInside } from './salience.ts';
import { splitSentences, type Sentence } from './sentences.ts';
import { textRank } from './textrank.ts';
import { codePointLength, sliceCodePoints, toWellFormed } from './text.ts';
import type { Outcome, Summarizer, SummaryRequest } from '../support/summary-contract.ts';

/**
 * The model identity of the offline summarizer. Its records carry it, so an
 * extractive digest can never pass for a model's summary. Bump the version
 * when the output for the same input changes (@2: a target of a quarter of
 * the input, TextRank, Intl.Segmenter sentences; @3: sentences with facts
 * first, phatic ones dropped, `[pair 12]` tags for versions that name
 * replies by pair number).
 */
export const OFFLINE_MODEL = 'sourcebound/extractive@3';

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
/**
 * A sentence's priority is (facts not yet in the summary x FACT_WEIGHT +
 * centrality x RANK_WEIGHT + LEAD_WEIGHT for a reply's first informative
 * sentence) per (its bytes + BYTES_DAMPING): what it adds for what it costs,
 * without letting a three-word fragment win on size alone.
 */
const FACT_WEIGHT = 1;
const RANK_WEIGHT = 0.5;
const LEAD_WEIGHT = 2;
const BYTES_DAMPING = 40;
const LETTER = /\p{L}/u;
/** Marks a sentence cut short because nothing whole fit. */
const ELLIPSIS = '…';

interface Part {
  tag: string;
  sentences: Sentence[];
}

interface Candidate {
  part: number;
  sentence: Sentence;
  /** Its fact keys (salience.ts). */
  keys: string[];
  /** Its TextRank score over the mean score: 1 is an average sentence. */
  rank: number;
  /** Neither phatic (salience.ts) nor a bare list marker. */
  informative: boolean;
  /** The first informative sentence of its item: where a reply most often gives its answer. */
  lead: boolean;
}

/**
 * A deterministic extractive summarizer (no network, no clock, no randomness).
 * It aims at a quarter of the input's UTF-8 bytes (at least 400, never more
 * than the cap, counted in bytes so it fits a character cap too) and keeps
 * what a reader would ask about: sentences are chosen by what they add per
 * byte, the facts (salience.ts: figures, dates, identifiers, code, links,
 * proper names) the summary does not hold yet first, then a reply's first
 * informative sentence (where a reply answers), then centrality (TextRank,
 * Mihalcea & Tarau, 2004, over all sentences of the material); phatic
 * sentences (greetings, thanks, praise, offers of more help) only when
 * nothing else is there. First the best sentence of each item, then the best
 * of the rest, while they fit. Each item's chosen sentences appear in their
 * original order, after its tag (`[pair 12]` when the prompt version names
 * items by pair number, else `[<short id>]`), items in their order.
 * Sentences are copied, never rewritten (only runs of ASCII whitespace are
 * collapsed), so every figure and identifier stays byte-exact and grounded;
 * a sentence is cut (at a word boundary, marked `…`) only when no whole one
 * fits at all. Lone surrogates become U+FFFD.
 */
export function createOfflineSummarizer(options: { maxChars: number; maxInputChars?: number }): Summarizer {
  const maxInputChars = options.maxInputChars ?? DEFAULT_MAX_INPUT_CHARS;
  return {
    model: OFFLINE_MODEL,
    async summarize(request: SummaryRequest): Promise<Outcome> {
      if (promptEntry(request.promptVersion) === undefined) {
        return { kind: 'config', reason: `unknown_prompt_version:${request.promptVersion}`, status: null };
      }
      if (request.signal?.aborted) return { kind: 'deferred', reason: 'aborted_before_send', retryAfterMs: null };
      // The same input cap as a model's (prepareSummary): a range of huge replies costs no memory spike here either.
      const inputChars = request.items.reduce((sum, item) => sum + codePointLength(item.text) + codePointLength(item.id), 0);
      if (inputChars > maxInputChars)
        return { kind: 'invalid', reason: 'input_too_large', model: OFFLINE_MODEL, usage: null, requestId: null };
      const text = extractiveSummary(request.items, request.maxChars ?? options.maxChars, promptEntry(request.promptVersion)!.itemKey);
      if (text === null) return { kind: 'invalid', reason: 'empty_input', model: OFFLINE_MODEL, usage: null, requestId: null };
      // Quoted replies that show a transcript or copy a marker are made safe to stand as a summary
      // (same length): otherwise the commit path would refuse them as imitations (support/markers.ts).
      return { kind: 'ok', text: neutralizeQuoted(text), model: OFFLINE_MODEL, usage: null, requestId: null };
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

/**
 * The summary text, at most `maxChars` code points, or null when no item has
 * any text. `key` says what each item's id is (prompts.ts ItemKey): a source
 * id, tagged by its start (`[0b6f1c2e] `), or a pair number (`[pair 12] `).
 */
export function extractiveSummary(items: readonly { id: string; text: string }[], maxChars: number, key: ItemKey = 'id'): string | null {
  const parts: Part[] = [];
  let inputBytes = 0;
  let wholeBytes = -1; // n parts need n-1 newlines
  for (const item of items) {
    const text = toWellFormed(item.text.length > SCAN_CHARS ? sliceCodePoints(item.text, SCAN_CHARS) : item.text);
    const sentences = splitSentences(text);
    if (sentences.length === 0) continue;
    inputBytes += bytes(item.text);
    const tag = key === 'pair' ? `[pair ${tagText(item.id)}] ` : `[${shortId(item.id)}] `;
    parts.push({ tag, sentences });
    wholeBytes += 1 + bytes(tag) + sentences.reduce((sum, s) => sum + s.bytes, 0) + sentences.length - 1;
  }
  if (parts.length === 0) return null;
  const budget = targetBytes(inputBytes, wholeBytes, maxChars);
  if (budget <= 0) return '';

  const all = parts.flatMap((p) => p.sentences.map((s) => s.text));
  const ranks = textRank(all);
  const meanRank = ranks.reduce((a, b) => a + b, 0) / ranks.length || 1;
  const names = namesInside(all);
  const candidates: Candidate[] = [];
  parts.forEach((part, p) => {
    let lead = true;
    for (const sentence of part.sentences) {
      const keys = factKeys(sentence.text, names);
      // Phatic sentences say nothing a reader would ask about; nor do a list's bare markers (`7.`),
      // which, run together, can even read as a date (`2017. 7. 8.`).
      const informative = !isPhatic(sentence.text, keys, names) && (keys.length > 0 || LETTER.test(sentence.text));
      candidates.push({ part: p, sentence, keys, rank: ranks[candidates.length]! / meanRank, informative, lead: lead && informative });
      if (informative) lead = false;
    }
  });

  const chosen: Sentence[][] = parts.map(() => []);
  const seen = new Set<string>(); // a repeated sentence says nothing new
  const covered = new Set<string>(); // fact keys already in the summary
  let used = 0;
  const cost = (c: Candidate) =>
    c.sentence.bytes +
    (chosen[c.part]!.length === 0
      ? bytes(parts[c.part]!.tag) + (used === 0 ? 0 : 1) // a new part: its tag, and a newline before it
      : 1); // a space before it
  const priority = (c: Candidate) => {
    let fresh = 0;
    for (const k of c.keys) if (!covered.has(k)) fresh++;
    return (fresh * FACT_WEIGHT + c.rank * RANK_WEIGHT + (c.lead ? LEAD_WEIGHT : 0)) / (c.sentence.bytes + BYTES_DAMPING);
  };
  const take = (c: Candidate) => {
    if (seen.has(c.sentence.text) || used + cost(c) > budget) return;
    used += cost(c);
    chosen[c.part]!.push(c.sentence);
    seen.add(c.sentence.text);
    for (const k of c.keys) covered.add(k);
  };
  const order = (a: Candidate, b: Candidate) => a.part - b.part || a.sentence.index - b.sentence.index;

  // Sentences that are not informative only when nothing else is there.
  const informative = candidates.filter((c) => c.informative);
  const pool = informative.length > 0 ? informative : candidates;
  // Each item's best sentence first (so each reply is represented while room lasts), best items first...
  const byPart = parts.map((_, p) => pool.filter((c) => c.part === p));
  const bestOf = (list: Candidate[]) =>
    list.reduce<Candidate | undefined>((best, c) => (best === undefined || priority(c) > priority(best) ? c : best), undefined);
  const firsts = byPart
    .map(bestOf)
    .filter((c): c is Candidate => c !== undefined)
    .sort((a, b) => priority(b) - priority(a) || order(a, b));
  for (const first of firsts) {
    // ...each judged again on what the ones before it already cover.
    const best = bestOf(byPart[first.part]!)!;
    take(best);
  }
  // ...then the rest by facts not yet covered per byte (lazy greedy: a priority only falls as the summary grows).
  greedy(pool, priority, order, take);

  if (used === 0) {
    // Not one whole sentence fits: the best sentence, cut to fit (tagged when the tag leaves room).
    const best = [...pool].sort((a, b) => b.rank - a.rank || order(a, b))[0]!;
    const tag = parts[best.part]!.tag;
    const room = budget - bytes(tag);
    return room >= 8 ? tag + cutAtWord(best.sentence.text, room) : cutAtWord(best.sentence.text, budget);
  }
  return parts
    .map((part, p) => (chosen[p]!.length === 0 ? null : part.tag + joinSentences(chosen[p]!.sort((a, b) => a.index - b.index))))
    .filter((line): line is string => line !== null)
    .join('\n');
}

/**
 * Offers every candidate to `take` once, highest `priority` first, where a
 * priority may only fall as candidates are taken (it counts facts not yet
 * covered): a popped candidate is judged again, and taken only while its
 * new priority is still the highest (ties: `order`). O(n log n).
 */
function greedy(
  candidates: readonly Candidate[],
  priority: (c: Candidate) => number,
  order: (a: Candidate, b: Candidate) => number,
  take: (c: Candidate) => void,
): void {
  const heap = new Heap<{ c: Candidate; p: number }>((a, b) => b.p - a.p || order(a.c, b.c));
  for (const c of candidates) heap.push({ c, p: priority(c) });
  for (let top = heap.pop(); top !== undefined; top = heap.pop()) {
    const p = priority(top.c);
    const next = heap.peek();
    if (next === undefined || p > next.p || (p === next.p && order(top.c, next.c) < 0)) take(top.c);
    else heap.push({ c: top.c, p });
  }
}

/** A binary heap: `pop` gives the element that `before` puts first. */
class Heap<T> {
  private readonly items: T[] = [];
  constructor(private readonly before: (a: T, b: T) => number) {}
  peek(): T | undefined {
    return this.items[0];
  }
  push(item: T): void {
    const a = this.items;
    a.push(item);
    for (let i = a.length - 1; i > 0;) {
      const parent = (i - 1) >> 1;
      if (this.before(a[i]!, a[parent]!) >= 0) break;
      [a[i], a[parent]] = [a[parent]!, a[i]!];
      i = parent;
    }
  }
  pop(): T | undefined {
    const a = this.items;
    const top = a[0];
    const last = a.pop();
    if (a.length > 0 && last !== undefined) {
      a[0] = last;
      for (let i = 0; ;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < a.length && this.before(a[l]!, a[m]!) < 0) m = l;
        if (r < a.length && this.before(a[r]!, a[m]!) < 0) m = r;
        if (m === i) break;
        [a[i], a[m]] = [a[m]!, a[i]!];
        i = m;
      }
    }
    return top;
  }
}

/** A pair number for its tag: as given, white space and `]` replaced (it stays one bracketed token). */
function tagText(id: string): string {
  return toWellFormed(id).replace(/[\s\]]+/g, '_');
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
