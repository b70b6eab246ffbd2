import { describe, expect, it } from 'vitest';
import { carriedText, occurs, pairFacts, properNames, quartile, recallOf, share } from '../bench/lib/facts.ts';
import { PromptCache } from '../bench/lib/prompt-cache.ts';
import { toAnthropicMessages, type MessageParam, type PairItem, type SummaryItem } from '../src/projection/index.ts';

/** P12's fact counting (bench/lib/facts.ts) and the prompt-cache model's lifetime (bench/lib/prompt-cache.ts). */

const pair = (pairIndex: number, userText: string, assistantText: string): PairItem => ({
  kind: 'pair',
  pairIndex,
  runId: '',
  userMessageId: '',
  assistantMessageId: '',
  userText,
  assistantText,
});

describe('proper names', () => {
  it("takes capitalized words and runs of them, not a sentence's first word", () => {
    expect(properNames('We met Ada Lovelace in London. Then Paris: Rome was next.\n- Python is nice, unlike Java.')).toEqual([
      'Ada Lovelace',
      'London',
      'Paris',
      'Java',
    ]);
  });

  it('drops only the first word of a run that starts a sentence', () => {
    expect(properNames('New York is big. The Beatles played in Hamburg.')).toEqual(['York', 'Beatles', 'Hamburg']);
  });

  it('keeps inner hyphens and an apostrophe before a capital, not a possessive or a pronoun', () => {
    expect(properNames("ask O'Brien about Jean-Luc and Fermat's Last Theorem, I said")).toEqual([
      "O'Brien",
      'Jean-Luc',
      'Fermat',
      'Last Theorem',
    ]);
  });

  it('does not take a capital inside a word, and starts a sentence after a line, a list mark or a table cell', () => {
    expect(properNames('an iPhone\n1. Install it\n| Name | Tokyo |')).toEqual([]);
  });
});

describe('occurrence at word boundaries', () => {
  it('finds a fact only where no letter or digit touches it', () => {
    expect(occurs('it weighs 112 kg', '12 kg')).toBe(false);
    expect(occurs('it weighs 12 kg.', '12 kg')).toBe(true);
    expect(occurs('JavaScript and Java', 'Java')).toBe(true);
    expect(occurs('JavaScript only', 'Java')).toBe(false);
    expect(occurs('see https://x.com/a/b', 'https://x.com/a')).toBe(true);
  });
});

describe('pair facts', () => {
  it('normalizes, counts each fact once per pair, and keeps only what its own text carries', () => {
    const { facts, uncheckable } = pairFacts({
      user: 'What did Ada Lovelace pay in 1843?',
      assistant: 'Ada Lovelace paid 1,250 pounds in 1843, said Babbage.',
    });
    // The reply's "Ada Lovelace" starts a sentence: its run gives "Lovelace", a fact of its own.
    expect(facts.sort()).toEqual(['1250 pounds', '1843', 'Ada Lovelace', 'Babbage', 'Lovelace'].sort());
    expect(uncheckable).toBe(0);
  });
});

describe('recall', () => {
  it('counts a fact carried by a raw pair, a summary or a user message beside it, by quartile of its pair', () => {
    const facts = [['Alpha'], ['Bravo'], ['Charlie'], ['Delta', 'Echo']];
    const summary: SummaryItem = {
      kind: 'summary',
      fromPair: 0,
      toPair: 1,
      recordId: '',
      promptVersion: '',
      model: '',
      ungrounded: [],
      label: 'Summary of pairs 0-1',
      userMessages: [{ pairIndex: 0, messageId: '', text: 'about Alpha' }],
      summary: 'it said Bravo',
    };
    const r = recallOf(facts, [summary, pair(3, 'and Delta', 'no')]);
    expect(r.total).toEqual([1, 1, 1, 2]);
    expect(r.carried).toEqual([1, 1, 0, 1]);
    expect(share(r)).toBeCloseTo(3 / 5);
    expect(share(r, 3)).toBe(0.5);
  });

  it('does not read labels: only what the history says of the conversation', () => {
    const summary: SummaryItem = {
      kind: 'summary',
      fromPair: 0,
      toPair: 1,
      recordId: '',
      promptVersion: '',
      model: '',
      ungrounded: [],
      label: 'Summary of Golf',
      userMessages: [],
      summary: 'x',
    };
    expect(carriedText([summary])).toBe('x');
    expect(share(recallOf([['Golf']], [summary]))).toBe(0);
  });

  it('puts pair i of n in quartile floor(4i/n)', () => {
    expect([0, 1, 2, 3, 4, 5, 6].map((i) => quartile(i, 7))).toEqual([0, 0, 1, 1, 2, 2, 3]);
  });
});

describe('prompt cache lifetime', () => {
  const history = [pair(0, 'hello', 'hi there'), pair(1, 'more', 'sure')];
  const request = (items: PairItem[]): MessageParam[] => [
    ...toAnthropicMessages({ items, omitted: [] }),
    { role: 'user', content: 'next' },
  ];

  it('never expires without a clock', () => {
    const cache = new PromptCache();
    cache.price(request(history));
    expect(cache.price(request(history)).read).toBeGreaterThan(0);
  });

  it('reads an entry within its lifetime, refreshes it on a read, and reads nothing after a longer pause', () => {
    let now = 0;
    const cache = new PromptCache({ now: () => now, ttlMs: 300_000 });
    const first = cache.price(request(history));
    expect(first.read).toBe(0);
    now += 200_000;
    expect(cache.price(request(history)).read).toBe(first.written);
    now += 200_000; // 400 s after the write, 200 s after the read that refreshed it
    expect(cache.price(request(history)).read).toBe(first.written);
    now += 300_001;
    const late = cache.price(request(history));
    expect(late.read).toBe(0);
    expect(late.extendsPrevious).toBe(false);
    expect(late.written).toBe(first.written);
  });
});
