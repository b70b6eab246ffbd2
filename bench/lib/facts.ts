import { extractFacts, normalizeText } from '../../src/grounding/index.ts';
import type { ProjectionItem } from '../../src/projection/index.ts';

/**
 * Checkable facts of a conversation and whether a request carries them (P12).
 *
 * A pair's facts: what the grounding extractor finds in its user and
 * assistant texts (figures, dates, times, amounts, versions, identifiers,
 * URLs, paths, quoted code), and proper names: capitalized words not at a
 * sentence start, alone or as a run of capitalized words (a multiword name;
 * the first word of a run that starts a sentence is dropped, as nothing
 * tells it from an ordinary sentence-initial word). Each fact is kept in its
 * normalized form (`normalize`), once per pair, and only if that form occurs
 * in the pair's own normalized text (a fact its own pair does not carry
 * cannot be carried by anything; the count of those is returned so that it
 * can be reported).
 *
 * A request carries a fact when the fact's normalized form occurs in the
 * request's normalized text, at word boundaries (`12 kg` is not in `112 kg`,
 * `Java` is not in `JavaScript`). The request text is what the history says
 * of the conversation: raw pairs' texts, and of a summary item its summary
 * and the verbatim user messages beside it; labels and omission notes are
 * not part of it (a label's pair numbers are not the conversation's).
 */

/** The one normalization of both sides: the grounding module's (NFKC, thousands separators dropped, white space collapsed). */
export const normalize = (text: string): string => normalizeText(text);

/** A letter, mark or digit: a fact that starts or ends with one must not touch another in the text. */
const WORDISH = /[\p{L}\p{M}\p{N}]/u;

/** A capitalized word: an uppercase letter not after a letter, mark or digit, then letters, marks, digits, inner hyphens, an apostrophe before a capital (`O'Brien`, not `Python's`). */
const CAP_WORD =
  /(?<![\p{L}\p{M}\p{N}])\p{Lu}[\p{L}\p{M}\p{N}]*(?:-[\p{L}\p{N}][\p{L}\p{M}\p{N}]*|['\u2019]\p{Lu}[\p{L}\p{M}\p{N}]*)*(?![\p{L}\p{M}\p{N}])/gu;
/** Characters skipped looking back from a word for what came before it: space, quotes, brackets, Markdown marks. */
const SKIPPED = new Set([
  ' ',
  '\t',
  '\r',
  '\u00a0',
  '"',
  "'",
  '\u201c',
  '\u201d',
  '\u2018',
  '\u2019',
  '\u00ab',
  '\u00bb',
  '(',
  '[',
  '{',
  '*',
  '_',
  '#',
  '>',
  '`',
  '~',
  '-',
  '\u2013',
  '\u2014',
  '\u2022',
]);
/** What ends a sentence, a line or a cell before a word: the word then starts a sentence. */
const STARTS = new Set(['.', '!', '?', ':', ';', '\u2026', '\n', '|']);

function atSentenceStart(text: string, at: number): boolean {
  for (let i = at - 1; i >= 0; i--) {
    const c = text[i]!;
    if (STARTS.has(c)) return true;
    if (!SKIPPED.has(c)) return false;
  }
  return true;
}

/** Proper names of `text` as written: runs of capitalized words joined by one space, a sentence's first word dropped; words of one letter are not names. */
export function properNames(text: string): string[] {
  const words = [...text.matchAll(CAP_WORD)].map((m) => ({ at: m.index, text: m[0] }));
  const names: string[] = [];
  let run: typeof words = [];
  const flush = () => {
    const kept = run.length > 0 && atSentenceStart(text, run[0]!.at) ? run.slice(1) : run;
    // A run of one-letter words ("I", "A") is a pronoun or a list label, not a name.
    if (kept.length > 0 && !(kept.length === 1 && [...kept[0]!.text].length < 2)) names.push(kept.map((w) => w.text).join(' '));
    run = [];
  };
  for (const w of words) {
    const prev = run.at(-1);
    const joined = prev !== undefined && w.at === prev.at + prev.text.length + 1 && (text[w.at - 1] === ' ' || text[w.at - 1] === '\u00a0');
    if (!joined) flush();
    run.push(w);
  }
  flush();
  return names;
}

/** Whether `needle` (normalized) occurs in `hay` (normalized) at word boundaries. */
export function occurs(hay: string, needle: string): boolean {
  if (needle.length === 0) return false;
  const edgeStart = WORDISH.test(String.fromCodePoint(needle.codePointAt(0)!));
  const last = [...needle.slice(-2)].at(-1)!;
  const edgeEnd = WORDISH.test(last);
  for (let i = hay.indexOf(needle); i >= 0; i = hay.indexOf(needle, i + 1)) {
    if (edgeStart && i > 0 && WORDISH.test(charBefore(hay, i))) continue;
    const end = i + needle.length;
    if (edgeEnd && end < hay.length && WORDISH.test(String.fromCodePoint(hay.codePointAt(end)!))) continue;
    return true;
  }
  return false;
}

function charBefore(text: string, i: number): string {
  const low = text.charCodeAt(i - 1);
  return low >= 0xdc00 && low <= 0xdfff && i >= 2 ? text.slice(i - 2, i) : text[i - 1]!;
}

/** A pair's facts: normalized, each once, each carried by the pair's own text. */
export function pairFacts(pair: { user: string; assistant: string }): { facts: string[]; uncheckable: number } {
  const own = [normalize(pair.user), normalize(pair.assistant)];
  const found = new Set<string>();
  let uncheckable = 0;
  for (const text of [pair.user, pair.assistant]) {
    for (const raw of [...extractFacts(text).map((f) => f.text), ...properNames(text)]) {
      const fact = normalize(raw).trim();
      if (fact.length === 0 || found.has(fact)) continue;
      if (own.some((t) => occurs(t, fact))) found.add(fact);
      else uncheckable += 1;
    }
  }
  return { facts: [...found], uncheckable };
}

/** The texts a history carries of the conversation, normalized, joined by a separator no fact contains. */
export function carriedText(items: readonly ProjectionItem[]): string {
  const texts = items.flatMap((it) =>
    it.kind === 'pair' ? [it.userText, it.assistantText] : [...it.userMessages.map((m) => m.text), it.summary],
  );
  return texts.map(normalize).join('\u0000');
}

/** The age quartile (0 oldest .. 3 newest) of pair `index` in a conversation of `length` pairs. */
export function quartile(index: number, length: number): number {
  return Math.min(3, Math.floor((4 * index) / length));
}

/** (pair, fact) counts by age quartile: how many the history had, how many the request carried. */
export interface Recall {
  total: [number, number, number, number];
  carried: [number, number, number, number];
}

export const emptyRecall = (): Recall => ({ total: [0, 0, 0, 0], carried: [0, 0, 0, 0] });

export function addRecall(into: Recall, r: Recall): void {
  for (let q = 0; q < 4; q++) {
    into.total[q]! += r.total[q]!;
    into.carried[q]! += r.carried[q]!;
  }
}

/** Carried share overall, or of one quartile. */
export function share(r: Recall, q?: number): number {
  const total = q === undefined ? r.total.reduce((a, b) => a + b, 0) : r.total[q]!;
  const carried = q === undefined ? r.carried.reduce((a, b) => a + b, 0) : r.carried[q]!;
  return total === 0 ? Number.NaN : carried / total;
}

/**
 * What a request whose history is `items` carries of the facts of pairs
 * 0..facts.length-1 (`facts[i]`: pair i's facts), by quartile of the
 * history's length. Each (pair, fact) counts once.
 */
export function recallOf(facts: readonly (readonly string[])[], items: readonly ProjectionItem[]): Recall {
  const hay = carriedText(items);
  const seen = new Map<string, boolean>();
  const r = emptyRecall();
  facts.forEach((list, pair) => {
    const q = quartile(pair, facts.length);
    for (const fact of list) {
      let hit = seen.get(fact);
      if (hit === undefined) seen.set(fact, (hit = occurs(hay, fact)));
      r.total[q]! += 1;
      if (hit) r.carried[q]! += 1;
    }
  });
  return r;
}
