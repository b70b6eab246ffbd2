// Grounding extraction: the checkable facts of a text (a summary, or the
// material), found by the patterns in windows around their triggers.
import { type Fact } from '../support/summary-contract.ts';
import { isAsciiDigit, isSpaceAt } from './chars.ts';
import { prepare } from './normalize.ts';
import { PATTERNS, type Pattern } from './patterns.ts';
import { NO_RUNS, type Runs, kindsOf, runsOf } from './digit-runs.ts';
import { PER_PAUSE, type Sliced, whole } from './slices.ts';

/** The checkable facts of `text`, in order. Each span of text is one fact at most (earlier kinds win). */
export function extractFacts(text: string): Fact[] {
  return locatedFacts(text).facts.map((f) => f.fact);
}

/** The facts of `text` with where each starts in `prepared` (`prepare(text)`), in order. */
export function locatedFacts(text: string): { prepared: string; facts: Located[] } {
  // Thousands separators and no-break spaces are handled before anything is matched.
  const prepared = prepare(text);
  return { prepared, facts: whole(preparedFacts(prepared)) };
}

/** A fact and where it starts in the prepared text. */
export type Located = { at: number; fact: Fact };

/**
 * The facts of a text that is already `prepare`d, in order, pausing after
 * each pattern's pass and within the passes (PER_PAUSE matches or places).
 */
export function* preparedFacts(prepared: string): Sliced<Located[]> {
  const found: Located[] = [];
  // Quoted code first, over the whole text (a fenced block spans lines); then every other
  // kind only in the windows that can hold one.
  const rest = yield* matchAll(prepared, (i) => i, CODE, found, NO_RUNS);
  const windows = factWindows(rest);
  if (windows.length > 0) {
    // All windows in one text, each pattern run once over it (not once per window).
    const starts: number[] = [];
    let length = 0;
    const parts = windows.map(([from, to]) => {
      starts.push(length);
      length += to - from + BARRIER.length;
      return rest.slice(from, to);
    });
    // The window that holds index i of the joined text: the last one starting at or before it.
    const at = (i: number): number => {
      let lo = 0;
      let hi = starts.length - 1;
      while (lo < hi) {
        const mid = (lo + hi + 1) >> 1;
        if (starts[mid]! <= i) lo = mid;
        else hi = mid - 1;
      }
      return windows[lo]![0] + i - starts[lo]!;
    };
    const joined = parts.join(BARRIER);
    yield;
    yield* matchAll(joined, at, IN_WINDOWS, found, yield* runsOf(joined));
  }
  yield;
  return found.sort((a, b) => a.at - b.at);
}

/**
 * Between two windows in the text the patterns run over: no pattern matches
 * across it or with it (none consumes `<`: URLs, e-mails and paths stop at
 * it), and every look-around sees it as the start or end of a text (no
 * look-behind or look-ahead class has it, and it is no word character).
 */
const BARRIER = '<';

/** Runs `patterns` in order over `text` (`at` maps an index to the whole), each masking what it matched; returns the masked text. */
function* matchAll(
  text: string,
  at: (index: number) => number,
  patterns: readonly Pattern[],
  found: Located[],
  runs: Runs,
): Sliced<string> {
  // `runs` is kept what Pattern.find expects of it through the masking below.
  let rest = text;
  for (const pattern of patterns) {
    if (pattern.needs !== undefined && !pattern.needs.some((s) => rest.includes(s))) continue;
    yield;
    const spans: [number, number][] = [];
    let n = 0;
    for (const m of yield* pattern.find(rest, runs)) {
      if (++n % PER_PAUSE === 0) yield;
      if (m.key === null) continue;
      spans.push([m.index, m.index + m.length]);
      if (m.checked === false) continue;
      const end = m.index + m.text.length;
      found.push({
        at: at(m.index),
        fact: { kind: pattern.kind, text: m.text.trim(), key: m.key, truncated: rest.startsWith('…', end) || rest.startsWith('...', end) },
      });
    }
    // Mask what this kind matched, so a later kind does not match inside it.
    if (spans.length > 0) {
      // A span that ends right before a digit and after another starts a run of digits there: find
      // the runs again; else only their kinds change (what is next to them may be masked now).
      const split = runs !== NO_RUNS && spans.some(([, to]) => isAsciiDigit(rest.charCodeAt(to)) && isAsciiDigit(rest.charCodeAt(to - 1)));
      rest = yield* mask(rest, spans);
      if (split) runs = yield* runsOf(rest);
      else if (runs !== NO_RUNS) runs = { starts: runs.starts, kinds: yield* kindsOf(rest, runs.starts) };
    }
  }
  return rest;
}

/** The patterns of quoted code, which run first and over the whole text; then the others, in windows. */
const CODE = PATTERNS.slice(0, 2);
const IN_WINDOWS = PATTERNS.slice(2);

/**
 * Every fact but quoted code has a digit, `@`, `/`, `\\` or `www.` in it and
 * spans a few words at most (`March 5, 2024`, `5 million dollars`): so the
 * patterns only run within this many characters of one, widened to whole
 * tokens. Prose without figures is skipped, which keeps the check a small
 * part of a commit.
 */
const WINDOW_RADIUS = 48;
const TRIGGER = /[0-9@\/\\]|www\./gi;

/** The spans of `text` that can hold a fact, in order, merged. */
function factWindows(text: string): [number, number][] {
  const spans: [number, number][] = [];
  TRIGGER.lastIndex = 0;
  for (let m = TRIGGER.exec(text); m !== null; m = TRIGGER.exec(text)) {
    const last = spans.at(-1);
    if (last !== undefined && m.index < last[1]) continue;
    let from = Math.max(0, m.index - WINDOW_RADIUS);
    let to = Math.min(text.length, m.index + WINDOW_RADIUS);
    while (from > 0 && !isSpaceAt(text, from - 1)) from--;
    while (to < text.length && !isSpaceAt(text, to)) to++;
    if (last !== undefined && from <= last[1]) last[1] = to;
    else spans.push([from, to]);
    TRIGGER.lastIndex = Math.max(TRIGGER.lastIndex, to);
  }
  return spans;
}

function* mask(text: string, spans: [number, number][]): Sliced<string> {
  let out = '';
  let last = 0;
  let n = 0;
  for (const [from, to] of spans) {
    if (++n % PER_PAUSE === 0) yield;
    out += text.slice(last, from) + ' '.repeat(to - from);
    last = to;
  }
  return out + text.slice(last);
}
