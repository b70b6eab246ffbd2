/**
 * TextRank sentence scores (Mihalcea & Tarau, "TextRank: Bringing Order into
 * Texts", EMNLP 2004, section 4): sentences are the vertices of a graph whose
 * edges are weighted by content overlap, similarity(Si, Sj) =
 * |Wi ∩ Wj| / (log|Wi| + log|Wj|), and each sentence's score is its weighted
 * PageRank (damping 0.85). Words are lower-cased runs of letters and digits,
 * without a short list of English function words. Deterministic: a fixed
 * number of iterations from a uniform start.
 */

const DAMPING = 0.85;
const ITERATIONS = 30;
/** Words per sentence looked at: keeps the graph linear in a sentence's size. */
const MAX_WORDS = 64;
/** Sentences ranked by the graph; later ones score 0 (the target is bounded by the 6,000-character cap anyway). */
const MAX_SENTENCES = 600;

const STOP_WORDS = new Set(
  (
    'a an and are as at be been but by can could did do does for from had has have he her his i if in into is it its ' +
    'me my no not of on or our she so than that the their them then there these they this those to was we were what when ' +
    'which who will with would you your'
  ).split(' '),
);

const WORD = /[\p{L}\p{N}]+/gu;

/** One score per sentence, in order; higher is more central. */
export function textRank(sentences: readonly string[]): number[] {
  const n = Math.min(sentences.length, MAX_SENTENCES);
  const words = sentences.slice(0, n).map(contentWords);
  // Inverted index: only sentences sharing a word are compared.
  const postings = new Map<string, number[]>();
  words.forEach((set, i) => {
    for (const w of set) {
      const list = postings.get(w);
      if (list) list.push(i);
      else postings.set(w, [i]);
    }
  });
  const overlap: Map<number, number>[] = words.map(() => new Map());
  for (const list of postings.values()) {
    for (let a = 0; a < list.length; a++) {
      for (let b = a + 1; b < list.length; b++) {
        const i = list[a]!,
          j = list[b]!;
        overlap[i]!.set(j, (overlap[i]!.get(j) ?? 0) + 1);
      }
    }
  }
  const edges: { to: number; weight: number }[][] = words.map(() => []);
  overlap.forEach((row, i) => {
    for (const [j, shared] of row) {
      const norm = Math.log(words[i]!.size) + Math.log(words[j]!.size);
      if (norm <= 0) continue;
      const weight = shared / norm;
      edges[i]!.push({ to: j, weight });
      edges[j]!.push({ to: i, weight });
    }
  });
  const outWeight = edges.map((list) => list.reduce((s, e) => s + e.weight, 0));
  let score = new Array<number>(n).fill(1);
  for (let it = 0; it < ITERATIONS; it++) {
    const next = new Array<number>(n).fill(1 - DAMPING);
    for (let j = 0; j < n; j++) {
      if (outWeight[j] === 0) continue;
      const share = (DAMPING * score[j]!) / outWeight[j]!;
      for (const e of edges[j]!) next[e.to]! += share * e.weight;
    }
    score = next;
  }
  return sentences.map((_, i) => (i < n ? score[i]! : 0));
}

function contentWords(sentence: string): Set<string> {
  const set = new Set<string>();
  WORD.lastIndex = 0;
  for (let m = WORD.exec(sentence); m !== null && set.size < MAX_WORDS; m = WORD.exec(sentence)) {
    const w = m[0].toLowerCase();
    if (!STOP_WORDS.has(w)) set.add(w);
  }
  return set;
}
