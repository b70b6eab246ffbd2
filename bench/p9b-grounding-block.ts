import { extractiveSummary } from '../src/gateway/offline.ts';
import { DEFAULT_MAX_INPUT_CHARS } from '../src/gateway/contract.ts';
import { groundOutcome, groundOutcomeAsync } from '../src/grounding/index.ts';
import { locatedFacts } from '../src/grounding/extract.ts';
import { materialIndex } from '../src/grounding/material-index.ts';
import { SLICE_MS, whole } from '../src/grounding/slices.ts';
import type { MaterialItem, Outcome } from '../src/support/summary-contract.ts';
import type { BenchContext } from './lib/context.ts';
import { dataset } from './lib/data.ts';
import type { BenchResult } from './lib/report.ts';
import { roundRatios, spread } from './lib/stats.ts';
import { reformatFaithfully } from './p9-grounding.ts';

/** The longest the event loop may be held by one check at the cap (a worker's heartbeat and lease renewals run every few seconds; an app serves requests). */
const BLOCK_GOAL_MS = 50;

/**
 * P9b how long grounding holds the event loop at the input cap: the largest
 * material a summary can be checked against (DEFAULT_MAX_INPUT_CHARS,
 * 600,000 characters of real replies, one item each) and three summaries of
 * it: the offline summarizer's, P9's reformatting stand-in's (facts not as
 * written: the normalized material and its own facts are needed), and one
 * that invents some 650 shortened commit hashes (every fact ungrounded, each
 * searched for in every form: the slowest summary found). Each check runs
 * whole (`groundOutcome`) and in slices (`groundOutcomeAsync`), interleaved,
 * while a setImmediate ticker records the longest gap between its ticks: the
 * longest time nothing else could run. Headline: the longest gap with
 * `groundOutcomeAsync` / BLOCK_GOAL_MS; beside it the whole check's and the
 * ticker's own with nothing to run for as long (what a loaded machine's
 * scheduler adds to any gap), and the sliced check's total time / the whole
 * one's (what the pauses cost).
 * Before it, where a whole check's time goes: the stages timed one by one
 * on a fresh material index.
 */
export async function benchGroundingBlock(ctx: BenchContext): Promise<BenchResult> {
  const items = capMaterial();
  const chars = items.reduce((n, m) => n + m.id.length + m.text.length, 0);
  const offline = extractiveSummary(items, 6000, 'pair')!;
  const summaries = [
    { name: 'offline summary', text: offline },
    { name: 'reformatting stand-in', text: reformatFaithfully(offline).text },
    { name: 'invented commit hashes', text: inventedHashes() },
  ];
  const rounds = ctx.full ? 9 : 3;
  const result: BenchResult = {
    id: 'P9b',
    title: 'grounding: longest event-loop block at the input cap',
    status: 'ok',
    seconds: 0,
    params: {
      materialChars: chars,
      items: items.length,
      rounds,
      sliceMs: SLICE_MS,
      summaries: summaries.map((s) => `${s.name} (${s.text.length} chars)`).join('; '),
    },
    figures: [],
    headlines: [],
    notes: [`Data: ${dataset().source}, the first ${items.length} assistant replies.`],
  };

  // Where a whole check's time goes: each stage on a fresh index (what the first check of a material pays).
  const stages = { index: [] as number[], normalize: [] as number[], keys: [] as number[] };
  for (let r = 0; r < rounds; r++) {
    let t0 = performance.now();
    const index = materialIndex(items);
    stages.index.push(performance.now() - t0);
    t0 = performance.now();
    const normalized = whole(index.normalized());
    stages.normalize.push(performance.now() - t0);
    t0 = performance.now();
    whole(normalized.keys());
    stages.keys.push(performance.now() - t0);
  }
  result.figures.push(
    { label: 'stage: material joined and its ids placed (materialIndex)', unit: 'ms', value: spread(stages.index) },
    { label: 'stage: material normalized (NFKC, separators, white space, case)', unit: 'ms', value: spread(stages.normalize) },
    {
      label: "stage: the material's own facts extracted and keyed (when a fact is not found as written)",
      unit: 'ms',
      value: spread(stages.keys),
    },
  );

  const worstSliced: number[] = Array(rounds).fill(0);
  const worstWhole: number[] = Array(rounds).fill(0);
  // The ticker's longest gap with nothing to run, over as long as each sliced check took: what the
  // machine's scheduler adds to any gap (a loaded machine takes the process off its core for tens of ms).
  const worstIdle: number[] = Array(rounds).fill(0);
  for (const s of summaries) {
    const answer: Outcome = { kind: 'ok', text: s.text, model: 'bench', usage: null, requestId: null };
    const facts = new Set(locatedFacts(s.text).facts.map((f) => `${f.fact.kind}:${f.fact.text}`)).size;
    const verdict = groundOutcome(answer, items, 'flag');
    const ungrounded = verdict.kind === 'ok' ? (verdict.grounding?.ungrounded.length ?? 0) : NaN;
    const t = {
      wholeBlock: [] as number[],
      wholeTotal: [] as number[],
      slicedBlock: [] as number[],
      slicedTotal: [] as number[],
      idle: [] as number[],
    };
    for (let r = 0; r < rounds; r++) {
      const runWhole = async () => {
        const m = await longestBlock(() => groundOutcome(answer, items, 'flag'));
        t.wholeBlock.push(m.block);
        t.wholeTotal.push(m.total);
      };
      const runSliced = async () => {
        const m = await longestBlock(() => groundOutcomeAsync(answer, items, 'flag'));
        t.slicedBlock.push(m.block);
        t.slicedTotal.push(m.total);
      };
      // Each side goes first half the time.
      if (r % 2 === 0) {
        await runWhole();
        await runSliced();
      } else {
        await runSliced();
        await runWhole();
      }
      const idle = await longestBlock(() => new Promise<void>((resolve) => setTimeout(resolve, t.slicedTotal[r]!)));
      t.idle.push(idle.block);
      worstSliced[r] = Math.max(worstSliced[r]!, t.slicedBlock[r]!);
      worstWhole[r] = Math.max(worstWhole[r]!, t.wholeBlock[r]!);
      worstIdle[r] = Math.max(worstIdle[r]!, idle.block);
    }
    ctx.log(
      `P9b ${s.name}: whole ${spread(t.wholeBlock).median.toFixed(1)} ms, sliced ${spread(t.slicedBlock).median.toFixed(1)} ms longest block`,
    );
    result.figures.push(
      {
        label: `${s.name} (${facts} facts, ${ungrounded} not in the material): check time, whole (groundOutcome)`,
        unit: 'ms',
        value: spread(t.wholeTotal),
      },
      { label: `${s.name}: longest event-loop block, whole (the check itself)`, unit: 'ms', value: spread(t.wholeBlock) },
      { label: `${s.name}: check time, in slices (groundOutcomeAsync)`, unit: 'ms', value: spread(t.slicedTotal) },
      { label: `${s.name}: longest event-loop block, in slices`, unit: 'ms', value: spread(t.slicedBlock) },
      {
        label: `${s.name}: the ticker's longest gap with nothing to run, as long as the sliced check (the machine's floor)`,
        unit: 'ms',
        value: spread(t.idle),
      },
    );
    result.headlines.push({
      label: `P9b ${s.name}: check time in slices / whole (what the pauses cost)`,
      ratio: spread(roundRatios(t.slicedTotal, t.wholeTotal)),
      goal: null,
    });
    // Every fact of the invented hashes needs every stage: the rest of its check is the matching.
    if (ungrounded === facts) {
      const stagesMs = stages.index.map((x, r) => x + stages.normalize[r]! + stages.keys[r]!);
      result.figures.push({
        label: `${s.name}: matching per fact (whole check less the three stages, / ${facts})`,
        unit: 'ms',
        value: spread(t.wholeTotal.map((x, r) => (x - stagesMs[r]!) / facts)),
      });
    }
  }
  result.headlines.unshift(
    {
      label: `P9b longest event-loop block while a summary is checked at the cap, in slices / ${BLOCK_GOAL_MS} ms (worst of the three summaries)`,
      ratio: spread(worstSliced.map((b) => b / BLOCK_GOAL_MS)),
      goal: { op: '<=', target: 1 },
      floor: `whole: ${spread(worstWhole).median.toFixed(0)} ms; nothing to run: ${spread(worstIdle).median.toFixed(1)} ms`,
    },
    {
      label: 'P9b longest block in slices / whole (worst of the three summaries)',
      ratio: spread(roundRatios(worstSliced, worstWhole)),
      goal: null,
    },
  );
  return result;
}

/**
 * The longest gap between ticks of a setImmediate ticker while `work` runs:
 * the longest time the event loop could run nothing else; and `work`'s time.
 */
async function longestBlock(work: () => unknown): Promise<{ block: number; total: number }> {
  let last = performance.now();
  let block = 0;
  let ticking = true;
  const tick = () => {
    const now = performance.now();
    block = Math.max(block, now - last);
    last = now;
    if (ticking) setImmediate(tick);
  };
  setImmediate(tick);
  await new Promise<void>((resolve) => setImmediate(resolve));
  block = 0;
  const t0 = performance.now();
  await work();
  const total = performance.now() - t0;
  // One more tick ends the gap the work's last step left.
  await new Promise<void>((resolve) => setImmediate(() => setImmediate(resolve)));
  ticking = false;
  return { block, total };
}

/** Real assistant replies, one item each (ids as a range's pair numbers), up to the summarizers' input cap. */
export function capMaterial(): MaterialItem[] {
  const items: MaterialItem[] = [];
  let chars = 0;
  for (const [i, pair] of dataset().pairs.entries()) {
    const id = String(i);
    if (chars + id.length + pair.assistant.length > DEFAULT_MAX_INPUT_CHARS) break;
    items.push({ id, text: pair.assistant });
    chars += id.length + pair.assistant.length;
  }
  return items;
}

/** A summary's worth (6,000 characters) of shortened commit hashes, none in the material. */
function inventedHashes(): string {
  let text = '';
  for (let i = 0; text.length < 5900; i++) text += `${(0xa1b2c30 + i * 7919).toString(16)} `;
  return text.trim();
}
