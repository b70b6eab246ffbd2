/**
 * What the offline summarizer keeps of what a reader would ask about, old
 * (`sourcebound/extractive@2`, frozen in bench/lib/extractive-at2.ts) against
 * current (OFFLINE_MODEL), on the real threads:
 *
 *   node --import tsx bench/summary-facts.ts [threads.jsonl]
 *
 * For every aligned range of ten pairs of every thread (pairs 0-9, 10-19...,
 * complete ranges only; not only the plannable ones), the ten assistant
 * replies are summarized both ways, as compaction gives them: the old one
 * with the replies' message ids (shaped like the database's), the current
 * one with the current prompt version's material (conversationMaterial()).
 * Reported, old vs current:
 * - facts kept: the range's distinct checkable facts (what src/grounding/index.ts
 *   extracts: figures, dates, times, money, versions, identifiers, paths,
 *   URLs, e-mails, quoted code; keyed by their canonical form) and proper
 *   names (a capitalized word not at a sentence start, and a run of two or
 *   more capitalized words anywhere; `I` and its contractions are none) that
 *   the summary holds too, over all the range's facts;
 * - size: summary bytes over the replies' bytes (the length share);
 * - answers kept: for each pair whose user message shares at least two
 *   content words with a sentence of the reply, the reply's sentence that
 *   shares the most (the earliest on a tie) is its answer-like sentence; the
 *   share of those the summary holds. The summarizers never see the user
 *   messages, so this is no feature either of them was tuned on.
 * Deterministic; no database.
 */
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readThreads, type Thread } from '../src/cli/demo-threads.ts';
import { conversationMaterial } from '../src/conversation/material.ts';
import { extractiveSummary, OFFLINE_MODEL } from '../src/gateway/offline.ts';
import { CONVERSATION_PROMPT_VERSION, promptEntry } from '../src/gateway/prompts.ts';
import { splitSentences } from '../src/gateway/sentences.ts';
import { extractFacts, groundSummary } from '../src/grounding/index.ts';
import { RANGE_SIZE } from '../src/conversation/plan.ts';
import { extractiveSummaryAt2 } from './lib/extractive-at2.ts';

const SUMMARY_MAX_CHARS = 6000;

/** A message id per thread and pair, shaped like the database's (as bench/p9-grounding.ts makes them). */
function messageIdFor(threadId: string, pair: number): string {
  const h = createHash('sha256').update(`${threadId}:${pair}`).digest('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-4${h.slice(13, 16)}-8${h.slice(17, 20)}-${h.slice(20, 32)}`;
}
const path = process.argv[2] ?? '/work/shared/data/oasst1-threads.jsonl';

/** A word with a capital first letter (letters, digits, `'`, `-`, `.` inside: `O'Brien`, `Jean-Paul`, `U.S.`). */
const CAPITALIZED = /\p{Lu}[\p{L}\p{N}'’.-]*[\p{L}\p{N}]|\p{Lu}/uy;
const TOKEN = /[\p{L}\p{N}][\p{L}\p{N}'’.-]*[\p{L}\p{N}]|[\p{L}\p{N}]/gu;
/** `I`, `I'm`, `I've`...: capitalized by rule, no name. */
const FIRST_PERSON = /^I(?:['’](?:m|ve|ll|d))?$/;

/** Proper names of `sentence` (see the header), lower-cased, as `name:...`. */
function namesOf(sentence: string): string[] {
  const out: string[] = [];
  let run: string[] = [];
  let runStartsSentence = false;
  const flush = () => {
    const words = runStartsSentence ? run.slice(1) : run;
    if (run.length >= 2) out.push(`name:${run.join(' ').toLowerCase()}`);
    // Single words: only those not at the sentence start.
    for (const w of words) out.push(`name:${w.toLowerCase()}`);
    run = [];
  };
  TOKEN.lastIndex = 0;
  let first = true;
  let last = -1;
  for (let m = TOKEN.exec(sentence); m !== null; m = TOKEN.exec(sentence)) {
    CAPITALIZED.lastIndex = 0;
    const word = m[0];
    const capitalized = CAPITALIZED.test(word) && CAPITALIZED.lastIndex === word.length && !FIRST_PERSON.test(word);
    // A run is consecutive words separated by spaces only (`Nelson Nash`, not `Nash, Martin`).
    const adjacent = last >= 0 && /^ +$/.test(sentence.slice(last, m.index));
    if (capitalized) {
      if (run.length > 0 && !adjacent) flush();
      if (run.length === 0) runStartsSentence = first;
      run.push(word);
    } else if (run.length > 0) flush();
    first = false;
    last = m.index + word.length;
  }
  if (run.length > 0) flush();
  return out;
}

/** The checkable facts and proper names of a text, as a set of keys. */
function factsOf(text: string): Set<string> {
  const keys = new Set<string>();
  for (const line of text.split('\n')) {
    for (const s of splitSentences(line)) for (const n of namesOf(s.text)) keys.add(n);
  }
  for (const f of extractFacts(text)) keys.add(`${f.kind}:${f.key}`);
  return keys;
}

/** A summary without its reply tags (`[pair 12] `, `[40573cdb] ` at a line start), which are no fact of the replies. */
function untagged(summary: string): string {
  return summary.replace(/^\[[^\]\n]*\] /gm, '');
}

const STOP = new Set(
  (
    'a an and are as at be been but by can could did do does for from had has have he her his i if in into is it its ' +
    'me my no not of on or our she so than that the their them then there these they this those to was we were what when ' +
    'which who will with would you your how why where about should some any more most also just like get make one all'
  ).split(' '),
);
function contentWords(text: string): Set<string> {
  const set = new Set<string>();
  for (const m of text.toLowerCase().matchAll(/[\p{L}\p{N}]+/gu)) if (m[0].length > 2 && !STOP.has(m[0])) set.add(m[0]);
  return set;
}

/** The reply sentence that shares the most content words with the question (at least two), or null. */
function answerSentence(question: string, reply: string): string | null {
  const asked = contentWords(question);
  let best: string | null = null;
  let most = 1;
  for (const s of splitSentences(reply)) {
    let shared = 0;
    for (const w of contentWords(s.text)) if (asked.has(w)) shared++;
    if (shared > most) {
      best = s.text;
      most = shared;
    }
  }
  return best;
}

interface Tally {
  facts: number;
  kept: number;
  names: number;
  namesKept: number;
  figures: number;
  figuresKept: number;
  inputBytes: number;
  summaryBytes: number;
  answers: number;
  answersKept: number;
  flagged: number;
  ms: number;
}
const tally = (): Tally => ({
  facts: 0,
  kept: 0,
  names: 0,
  namesKept: 0,
  figures: 0,
  figuresKept: 0,
  inputBytes: 0,
  summaryBytes: 0,
  answers: 0,
  answersKept: 0,
  flagged: 0,
  ms: 0,
});

function measure(t: Tally, pairs: Thread['pairs'], summary: string, material: { id: string; text: string }[], ms: number): void {
  const all = new Set<string>();
  for (const p of pairs) for (const k of factsOf(p.assistant)) all.add(k);
  const kept = factsOf(untagged(summary));
  for (const k of all) {
    const isName = k.startsWith('name:');
    t.facts++;
    if (isName) t.names++;
    else t.figures++;
    if (kept.has(k)) {
      t.kept++;
      if (isName) t.namesKept++;
      else t.figuresKept++;
    }
  }
  t.inputBytes += pairs.reduce((n, p) => n + Buffer.byteLength(p.assistant), 0);
  t.summaryBytes += Buffer.byteLength(summary);
  for (const p of pairs) {
    const answer = answerSentence(p.user, p.assistant);
    if (answer === null) continue;
    t.answers++;
    if (summary.includes(answer)) t.answersKept++;
  }
  if (groundSummary(summary, material).ungrounded.length > 0) t.flagged++;
  t.ms += ms;
}

function timed<T>(f: () => T): [T, number] {
  const t0 = performance.now();
  const value = f();
  return [value, performance.now() - t0];
}

function main(): void {
  if (!existsSync(path)) throw new Error(`no threads at ${path}`);
  const threads = readThreads(path);
  const old = tally();
  const current = tally();
  let ranges = 0;
  const label = promptEntry(CONVERSATION_PROMPT_VERSION)!.itemKey;
  for (const thread of threads) {
    for (let from = 0; from + RANGE_SIZE <= thread.pairs.length; from += RANGE_SIZE) {
      const pairs = thread.pairs.slice(from, from + RANGE_SIZE);
      const oldItems = pairs.map((p, i) => ({ id: messageIdFor(thread.id, from + i), text: p.assistant }));
      const [a, ta] = timed(() => extractiveSummaryAt2(oldItems, SUMMARY_MAX_CHARS)!);
      measure(old, pairs, a, oldItems, ta);
      const items = conversationMaterial(
        pairs.map((p) => ({ assistantMessageId: '', assistantText: p.assistant })),
        from,
        CONVERSATION_PROMPT_VERSION,
      );
      const [b, tb] = timed(() => extractiveSummary(items, SUMMARY_MAX_CHARS, label)!);
      measure(current, pairs, b, items, tb);
      ranges++;
    }
  }
  const pct = (a: number, b: number) => `${((100 * a) / b).toFixed(1)}%`;
  const row = (name: string, t: Tally) =>
    `| ${name} | ${pct(t.kept, t.facts)} | ${pct(t.figuresKept, t.figures)} | ${pct(t.namesKept, t.names)} | ${pct(t.summaryBytes, t.inputBytes)} | ${pct(t.answersKept, t.answers)} | ${t.flagged} | ${t.ms.toFixed(0)} |`;
  process.stdout.write(
    [
      `${path}: ${threads.length} threads, ${ranges} aligned ranges of ${RANGE_SIZE} pairs, ${old.facts} facts (${old.figures} checkable figures/identifiers, ${old.names} names), ${old.answers} answer-like sentences.`,
      '',
      '| summarizer | facts kept | figures etc. kept | names kept | summary / input bytes | answer-like sentences kept | summaries flagged by grounding | ms total |',
      '|---|---|---|---|---|---|---|---|',
      row('sourcebound/extractive@2 (message-id tags)', old),
      row(`${OFFLINE_MODEL} (${CONVERSATION_PROMPT_VERSION} material)`, current),
      '',
    ].join('\n'),
  );
}

main();
