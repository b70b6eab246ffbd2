/**
 * Where P9's check time goes: the grounding check on the 128 real ranges
 * (offline summaries, as in P9), p50 by what ran just before each call, in
 * one process. In P9 the check runs once per range after a database round
 * trip and TextRank, at about twice its time in a loop; this shows how much
 * of that is the state the check starts in rather than its text. Not part of
 * `npm run bench` (no goal, no database).
 *
 *   node --expose-gc --import tsx bench/p9-cold.ts
 *   node --expose-gc --import tsx bench/p9-cold.ts --candidate ./my-grounding.ts
 *
 * With `--candidate`, a module exporting `groundSummary(summary, material)`
 * is timed interleaved with src/grounding/index.ts in every state (an alternative
 * implementation's cost, measured against the product's in the same run);
 * its results must equal the product's on every range, or the run fails.
 */
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { isDeepStrictEqual, parseArgs } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import type { MaterialItem } from '../src/support/summary-contract.ts';
import { extractFacts, groundSummary, type Grounding } from '../src/grounding/index.ts';
import { offlineSummary, realRanges } from './p9-grounding.ts';

type Check = (summary: string, material: readonly MaterialItem[]) => Grounding;

const { values } = parseArgs({ options: { candidate: { type: 'string' }, rounds: { type: 'string', default: '3' } } });
const gc = (globalThis as { gc?: (options?: { type: 'minor' | 'major' }) => void }).gc;
if (gc === undefined) {
  process.stderr.write('p9-cold: run with node --expose-gc (the GC states need it)\n');
  process.exit(2);
}

const checks: [string, Check][] = [['src/grounding/index.ts', groundSummary]];
if (values.candidate !== undefined) {
  const module = (await import(pathToFileURL(resolve(values.candidate)).href)) as { groundSummary?: Check };
  if (typeof module.groundSummary !== 'function') throw new Error(`p9-cold: ${values.candidate} exports no groundSummary`);
  checks.push([values.candidate, module.groundSummary]);
}

// The ranges of P9, with their offline summaries.
const ranges = realRanges().map(({ items }) => ({ items, summary: offlineSummary(items) }));
for (const [name, check] of checks.slice(1)) {
  const differ = ranges.filter((r) => !isDeepStrictEqual(check(r.summary, r.items), groundSummary(r.summary, r.items)));
  if (differ.length > 0)
    throw new Error(`p9-cold: ${name} differs from src/grounding/index.ts on ${differ.length} of ${ranges.length} ranges`);
}

// Warm-up: every implementation optimized before anything is timed.
for (let pass = 0; pass < 20; pass++) for (const r of ranges) for (const [, check] of checks) check(r.summary, r.items);

const states: [string, (r: (typeof ranges)[number]) => unknown][] = [
  ['one check after another', () => undefined],
  ['after a minor GC', () => gc({ type: 'minor' })],
  ['after extractiveSummary of the range (as in P9)', (r) => offlineSummary(r.items)],
  ['after a 1 ms sleep', () => sleep(1)],
  ['after a full GC', () => gc()],
];
const p50 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const rounds = Number(values.rounds);
process.stdout.write(`${ranges.length} ranges, ${rounds} rounds after a warm-up; p50 of each check in us\n\n`);
process.stdout.write(
  `| just before the check | ${checks.map(([name]) => name).join(' | ')} |\n|---|${checks.map(() => '---:').join('|')}|\n`,
);
for (const [state, before] of states) {
  const times = checks.map(() => [] as number[]);
  for (let round = 0; round <= rounds; round++) {
    for (const r of ranges) {
      // Interleaved, the order alternating by round: neither implementation always runs second.
      for (let k = 0; k < checks.length; k++) {
        const which = round % 2 === 0 ? k : checks.length - 1 - k;
        await before(r);
        const t0 = performance.now();
        checks[which]![1](r.summary, r.items);
        const dt = performance.now() - t0;
        if (round > 0) times[which]!.push(dt * 1000);
      }
    }
  }
  process.stdout.write(`| ${state} | ${times.map((t) => p50(t).toFixed(1)).join(' | ')} |\n`);
}

// A fixed cost: the same after a full GC on 17 characters with one figure.
const tiny = 'It costs 12.5 kg.';
const loop: number[] = [];
const afterGc: number[] = [];
for (let i = 0; i < 200; i++) {
  const t0 = performance.now();
  extractFacts(tiny);
  loop.push((performance.now() - t0) * 1000);
}
for (let i = 0; i < 40; i++) {
  gc();
  const t0 = performance.now();
  extractFacts(tiny);
  afterGc.push((performance.now() - t0) * 1000);
}
process.stdout.write(
  `\nextractFacts(${JSON.stringify(tiny)}): ${p50(loop).toFixed(1)} us in a loop, ${p50(afterGc).toFixed(1)} us after a full GC\n`,
);
