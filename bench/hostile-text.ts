/**
 * Every text path that reads what a reply, a tool result or a model's answer
 * holds, timed on long runs of one character (or, with `--pairs`, of two),
 * after a few prefixes that put the run where a pattern looks (after a URL, a
 * path, an e-mail, a figure, a month, a `<`). A path whose time grows faster
 * than its input is a way to stall the worker's event loop with a few
 * hundred kilobytes. Not part of `npm run bench` (it takes minutes and has no
 * single figure); it found the quadratic cases fixed in round 2, session 9
 * (CHANGELOG, "hostile text took quadratic time").
 *
 *   node --import tsx bench/hostile-text.ts [--pairs] [path...]
 *
 * Each case is timed at n and 2n; one that takes over 3 times as long (and
 * over 10 ms) is timed again at 8n, and reported when that takes over 8
 * times as long as 2n (linear: about 4; quadratic: about 16). The step from
 * 2n is the test because the first one can jump once (a GC starting to run,
 * many short lines with ICU objects to free) without the time growing faster
 * after it. Exit code 1 when any case is reported.
 */
import { parseArgs } from 'node:util';
import { extractiveSummary } from '../src/gateway/offline.ts';
import { neutralise, renderMaterial } from '../src/gateway/fence.ts';
import { splitSentences } from '../src/gateway/sentences.ts';
import { groundSummary, normalizeText } from '../src/grounding/index.ts';

const { values, positionals } = parseArgs({ options: { pairs: { type: 'boolean', default: false } }, allowPositionals: true });

const PATHS: Record<string, (text: string) => unknown> = {
  'grounding (summary)': (s) => groundSummary(s, [{ id: 'm', text: 'nothing here' }]),
  // A fact not found as written: the check normalizes the material and extracts all its facts.
  'grounding (material)': (s) => groundSummary('It read 1234 rows.', [{ id: 'm', text: s }]),
  normalizeText: (s) => normalizeText(s),
  'fence (neutralise)': (s) => neutralise(s),
  'fence (renderMaterial)': (s) => renderMaterial([{ id: s.slice(0, 300), text: s }], { tag: 'reply', nonce: 'n', maxChars: 100 }),
  splitSentences: (s) => splitSentences(s),
  extractiveSummary: (s) =>
    extractiveSummary(
      [
        { id: 'a', text: s },
        { id: 'b', text: 'Short one.' },
      ],
      6000,
    ),
};

const ONE = [
  ...Array.from({ length: 95 }, (_, i) => String.fromCharCode(32 + i)),
  '\t',
  '\n',
  '\r',
  '\u00a0',
  '’',
  '”',
  '…',
  '€',
  '°',
  'µ',
  '×',
  '\u202f',
  '\u3000',
  '。',
  'é',
  '日',
  '😀',
  '\u0301',
];
const FEW = [
  'a',
  'A',
  '1',
  '0',
  '.',
  ',',
  ' ',
  '/',
  '\\',
  ':',
  '-',
  '_',
  '@',
  '`',
  '<',
  '(',
  ')',
  '%',
  '$',
  '\n',
  "'",
  '"',
  '’',
  '。',
  '日',
  'é',
  '\u00a0',
];
const runs = values.pairs ? FEW.flatMap((a) => FEW.map((b) => a + b)) : ONE;
const PREFIXES = values.pairs
  ? ['', 'http://x/a', '/a/b', 'a@b.co', '1', 'March ', '<']
  : ['', 'http://x/a', 'www.x', '/a/b', 'a@b.co', '1', '12.5', 'March ', 'v1', '`', '```\n', '$1', 'USD ', '5 ', 'e6fd', '<', '1,'];
const SUFFIXES = values.pairs ? ['', 'x'] : ['', 'x', '1', ' ', '.'];
const N = values.pairs ? 5_000 : 10_000;

const chosen = positionals.length > 0 ? positionals : Object.keys(PATHS);
for (const name of chosen)
  if (!(name in PATHS)) throw new Error(`hostile-text: no path '${name}'; paths: ${Object.keys(PATHS).join(', ')}`);

let cases = 0;
let reported = 0;
for (const name of chosen) {
  const path = PATHS[name]!;
  for (const prefix of PREFIXES) {
    for (const run of runs) {
      for (const suffix of SUFFIXES) {
        const time = (n: number) => {
          const text = prefix + run.repeat(n) + suffix;
          const t0 = performance.now();
          path(text);
          return performance.now() - t0;
        };
        cases++;
        const t1 = time(N);
        if (t1 < 2) continue;
        const t2 = time(2 * N);
        if (t2 <= 3 * t1 || t2 <= 10) continue;
        const t8 = time(8 * N);
        if (t8 <= 8 * t2) continue;
        reported++;
        process.stdout.write(
          `${name}: ${JSON.stringify(prefix)} + ${JSON.stringify(run)} x n + ${JSON.stringify(suffix)}: ${t1.toFixed(1)} / ${t2.toFixed(1)} / ${t8.toFixed(1)} ms at n = ${N}, ${2 * N}, ${8 * N}\n`,
        );
      }
    }
  }
}
process.stdout.write(`${cases} cases, ${reported} growing faster than their input\n`);
process.exitCode = reported > 0 ? 1 : 0;
