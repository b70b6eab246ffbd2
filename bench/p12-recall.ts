import type { Thread } from '../src/cli/demo-threads.ts';
import type { BenchContext } from './lib/context.ts';
import { dataset } from './lib/data.ts';
import { addRecall, emptyRecall, share, type Recall } from './lib/facts.ts';
import { CACHE_TTL_MS } from './lib/prompt-cache.ts';
import { replayForRecall, STRATEGIES, type RecallReplay, type Strategy, type Tally } from './lib/recall-replay.ts';
import type { BenchResult, Figure, Headline } from './lib/report.ts';
import { benchPool } from './lib/server.ts';
import { spread } from './lib/stats.ts';
import { conversations } from './p8-cache.ts';

/**
 * P12 recall: how much of the conversation the history carries.
 *
 * The real threads P8 replays (the 3 longest and a ~150-pair joined one;
 * `--full`: the 50 long threads and the joined one), replayed turn by turn
 * with summaries arriving as their ranges become plannable
 * (lib/recall-replay.ts), at 16, 32 and 64 KiB. For the request after the
 * last pair (its history is the whole conversation): the share of the
 * conversation's checkable facts (lib/facts.ts) its history carries, overall
 * and by age quartile of the pair the fact came from, for the default
 * `stable` layout, `newest-first`, raw newest-first truncation and the whole
 * history. And the budget fill (history bytes / budget) over every request
 * whose whole history exceeds the budget.
 *
 * Second, P8's pricing with pauses longer than the cache lifetime: the same
 * replay on a simulated clock with a 10-minute pause every 10 turns; the
 * prompt-cache model expires entries after 5 minutes, and the projection is
 * given the clock and the lifetime (`now`, `cacheTtlSeconds`).
 */

const BUDGETS = [16 * 1024, 32 * 1024, 64 * 1024];
const TURN_MS = 30_000;
const GAP = { every: 10, ms: 10 * 60_000 };
const TTL_SECONDS = CACHE_TTL_MS / 1000;
const SAMPLE_EVERY = 5;
/** P8's cost goals, per budget, on the ~150-pair replay. */
const COST_GOALS: Record<number, number> = { [16 * 1024]: 0.4, [32 * 1024]: 0.55, [64 * 1024]: 1.0 };
const PARALLEL = 4;

function threadsFor(full: boolean): Thread[] {
  const p8 = conversations();
  if (!full) return p8;
  const long = dataset().threads.filter((t) => t.id.includes('-long-'));
  return [...long, p8.at(-1)!];
}

async function replayAll(ctx: BenchContext, threads: readonly Thread[], label: string, gaps: typeof GAP | null): Promise<RecallReplay[]> {
  const url = await ctx.server.freshDatabase(`p12_${label}`);
  const pool = benchPool(url, PARALLEL + 2);
  const t0 = performance.now();
  const out: RecallReplay[] = new Array(threads.length);
  try {
    let next = 0;
    await Promise.all(
      Array.from({ length: PARALLEL }, async () => {
        while (next < threads.length) {
          const i = next++;
          out[i] = await replayForRecall(pool, threads[i]!, 'p12', {
            budgets: BUDGETS,
            gaps,
            turnMs: TURN_MS,
            ttlSeconds: TTL_SECONDS,
            sampleEvery: SAMPLE_EVERY,
          });
        }
      }),
    );
  } finally {
    await pool.end();
  }
  ctx.log(`P12: ${label}: ${threads.length} conversations replayed in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  return out;
}

const one = (x: number) => spread([x]);
const f3 = (x: number) => (Number.isNaN(x) ? '-' : x.toFixed(3));

function pooled(replays: readonly RecallReplay[], budget: number, strategy: Strategy, pick: (t: Tally) => Recall): Recall {
  const r = emptyRecall();
  for (const rep of replays) addRecall(r, pick(rep.tallies.get(`${budget} ${strategy}`)!));
  return r;
}

/** The replays whose whole conversation exceeds the budget at the last request (or fits it): where a layout has a choice to make. */
const overBudget = (replays: readonly RecallReplay[], budget: number, over: boolean) =>
  replays.filter((r) => r.tallies.get(`${budget} whole`)!.finalOver === over);

const tallies = (replays: readonly RecallReplay[], budget: number, strategy: Strategy, only?: string) =>
  replays.filter((r) => only === undefined || r.conversation === only).map((r) => r.tallies.get(`${budget} ${strategy}`)!);
const total = (ts: readonly Tally[], f: (t: Tally) => number) => ts.reduce((k, t) => k + f(t), 0);
const quartiles = (r: Recall) => [0, 1, 2, 3].map((q) => f3(share(r, q))).join(' / ');

export async function benchRecall(ctx: BenchContext): Promise<BenchResult> {
  const threads = threadsFor(ctx.full);
  const reference = threads.at(-1)!.id;
  const result: BenchResult = {
    id: 'P12',
    title: 'recall: facts the history carries',
    status: 'ok',
    seconds: 0,
    params: {
      budgets: BUDGETS,
      sampleEvery: SAMPLE_EVERY,
      gaps: { turnMs: TURN_MS, pauseEveryTurns: GAP.every, pauseMs: GAP.ms, cacheTtlSeconds: TTL_SECONDS },
      conversations:
        threads.length <= 4
          ? threads.map((t) => `${t.id} (${t.pairs.length} pairs)`)
          : `${threads.length} (${threads.reduce((k, t) => k + t.pairs.length, 0)} pairs)`,
    },
    figures: [],
    headlines: [],
    notes: [],
  };
  const plain = await replayAll(ctx, threads, 'plain', null);
  const paused = await replayAll(ctx, threads, 'gaps', GAP);

  for (const replays of [plain, paused]) {
    for (const rep of replays) {
      for (const [key, t] of rep.tallies) {
        // Never over budget: the projection throws first; truncation is built to fit. A fault here is the bench's.
        if (!key.endsWith(' whole') && t.overBudget > 0)
          throw new Error(`P12: ${rep.conversation} ${key}: ${t.overBudget} requests over budget`);
        // Every fact is carried by its own pair's text, so the whole history carries all: else the counting is wrong.
        if (key.endsWith(' whole') && share(t.final) !== 1)
          throw new Error(`P12: ${rep.conversation}: the whole history carries ${share(t.final)} of the facts`);
      }
    }
  }

  for (const budget of BUDGETS) {
    const kib = `${budget / 1024} KiB`;
    const figures: Figure[] = [];
    const over = overBudget(plain, budget, true);
    const within = overBudget(plain, budget, false);
    const final = (s: Strategy) => pooled(over, budget, s, (t) => t.final);
    const finalAll = (s: Strategy) => pooled(plain, budget, s, (t) => t.final);
    const sampled = (s: Strategy) => pooled(plain, budget, s, (t) => t.sampled);
    const fills = (s: Strategy) => tallies(plain, budget, s).flatMap((t) => t.fills);
    for (const s of STRATEGIES) {
      figures.push({
        label: `${kib}, ${s}: fact recall of the last request, the ${over.length} conversations over the budget (quartiles oldest..newest ${quartiles(final(s))})`,
        unit: 'share',
        value: one(share(final(s))),
      });
      figures.push({
        label: `${kib}, ${s}: fact recall of the last request, all ${plain.length} conversations (quartiles ${quartiles(finalAll(s))})`,
        unit: 'share',
        value: one(share(finalAll(s))),
      });
      figures.push({
        label: `${kib}, ${s}: fact recall over requests every ${SAMPLE_EVERY} turns over the budget (quartiles ${quartiles(sampled(s))})`,
        unit: 'share',
        value: one(share(sampled(s))),
      });
      if (s === 'whole') continue;
      const f = fills(s);
      figures.push({
        label: `${kib}, ${s}: budget fill, mean over ${f.length} requests over the budget (min ${f3(Math.min(...f))})`,
        unit: 'ratio',
        value: one(mean(f)),
      });
      figures.push({
        label: `${kib}, ${s}: cost with caching / whole history, no pauses`,
        unit: 'ratio',
        value: one(total(tallies(plain, budget, s), (t) => t.cost) / total(tallies(plain, budget, 'whole'), (t) => t.cost)),
      });
    }
    // Per conversation when there are few (quick mode); with many, how many the stable layout carries less of than truncation.
    const fewer = over.filter(
      (rep) => share(rep.tallies.get(`${budget} stable`)!.final) < share(rep.tallies.get(`${budget} truncation`)!.final),
    );
    result.notes.push(
      `${kib}: the stable layout carries fewer facts than raw truncation on ${fewer.length} of the ${over.length} conversations over the budget.`,
    );
    for (const rep of plain.length <= 4 ? plain : []) {
      const r = (s: Strategy) => rep.tallies.get(`${budget} ${s}`)!.final;
      figures.push({
        label: `${kib}, ${rep.conversation}${rep.tallies.get(`${budget} whole`)!.finalOver ? '' : ' (fits the budget)'}: last-request recall stable ${f3(share(r('stable')))}, newest-first ${f3(share(r('newest-first')))}, truncation ${f3(share(r('truncation')))}; newest quarter ${f3(share(r('stable'), 3))} / ${f3(share(r('newest-first'), 3))} / ${f3(share(r('truncation'), 3))}`,
        unit: 'share',
        value: one(share(r('stable'))),
      });
    }
    result.figures.push(...figures);

    const stableFill = fills('stable');
    const headlines: Headline[] = [
      {
        label: `P12 ${kib}: stable fact recall, last request (${over.length} conversations over the budget)`,
        ratio: one(share(final('stable'))),
        goal: null,
      },
      {
        label: `P12 ${kib}: stable fact recall - raw truncation's (conversations over the budget)`,
        ratio: one(share(final('stable')) - share(final('truncation'))),
        goal: { op: '>=', target: 0.05 },
      },
      {
        label: `P12 ${kib}: stable newest-quarter recall / raw truncation's (conversations over the budget)`,
        ratio: one(share(final('stable'), 3) / share(final('truncation'), 3)),
        goal: { op: '>=', target: 0.9 },
      },
      {
        label: `P12 ${kib}: newest-first fact recall - raw truncation's (conversations over the budget)`,
        ratio: one(share(final('newest-first')) - share(final('truncation'))),
        goal: null,
      },
      {
        label: `P12 ${kib}: stable fact recall of the ${within.length} conversations within the budget (all fits: 1 is all)`,
        ratio: one(share(pooled(within, budget, 'stable', (t) => t.final))),
        goal: null,
      },
      {
        label: `P12 ${kib}: stable budget fill, mean over requests over the budget`,
        ratio: one(mean(stableFill)),
        goal: { op: '>=', target: 0.85 },
      },
      {
        label: `P12 ${kib}: stable budget fill, min over requests over the budget`,
        ratio: one(Math.min(...stableFill)),
        goal: { op: '>=', target: 0.5 },
      },
    ];
    result.headlines.push(...headlines);
  }

  // P8 with pauses longer than the cache lifetime.
  for (const budget of BUDGETS) {
    const kib = `${budget / 1024} KiB`;
    const cost = (s: Strategy, only?: string) =>
      total(tallies(paused, budget, s, only), (t) => t.cost) / total(tallies(paused, budget, 'whole', only), (t) => t.cost);
    const stable = tallies(paused, budget, 'stable');
    const newest = tallies(paused, budget, 'newest-first');
    const worst = Math.max(...paused.map((r) => cost('stable', r.conversation)));
    const recall = pooled(paused, budget, 'stable', (t) => t.final);
    result.figures.push(
      { label: `${kib}, with pauses: stable cost / whole history, all replays`, unit: 'ratio', value: one(cost('stable')) },
      { label: `${kib}, with pauses: newest-first cost / whole history, all replays`, unit: 'ratio', value: one(cost('newest-first')) },
      {
        label: `${kib}, with pauses: stable fact recall of the last request (quartiles ${quartiles(recall)})`,
        unit: 'share',
        value: one(share(recall)),
      },
    );
    result.headlines.push(
      {
        label: `P12 pauses ${kib}: stable cost / whole history, cached (${reference})`,
        ratio: one(cost('stable', reference)),
        goal: { op: '<=', target: COST_GOALS[budget]! },
      },
      { label: `P12 pauses ${kib}: worst replay, stable cost / whole history`, ratio: one(worst), goal: { op: '<=', target: 1.0 } },
      {
        label: `P12 pauses ${kib}: newest-first cost / whole history (${reference})`,
        ratio: one(cost('newest-first', reference)),
        goal: null,
      },
      {
        label: `P12 pauses ${kib}: stable cache-hit turns / turns not after a pause`,
        ratio: one(total(stable, (t) => t.hits) / total(stable, (t) => t.hitTurns)),
        goal: { op: '>=', target: 0.85 },
      },
      {
        label: `P12 pauses ${kib}: verbatim user messages in the last request, stable / newest-first`,
        ratio: one(total(stable, (t) => t.finalUserMessages) / total(newest, (t) => t.finalUserMessages)),
        goal: null,
      },
    );
  }

  const facts = plain.reduce((k, r) => k + r.facts, 0);
  const uncheckable = plain.reduce((k, r) => k + r.uncheckable, 0);
  result.notes.push(
    `Facts: ${facts} (pair, fact) entries over ${threads.length} conversations: the grounding extractor's (src/grounding/index.ts extractFacts) and proper names, normalized with normalizeText, once per pair; ` +
      `${uncheckable} left out because their own pair's normalized text does not contain them at word boundaries (e.g. a name followed by a sign NFKC turns into letters). ` +
      "A fact is carried when it occurs in the history's normalized text (raw pairs, summaries and the user messages beside them; not labels or notes) at word boundaries, wherever it occurs: a fact repeated by another pair the history keeps is carried.",
    "Recall figures pool the (pair, fact) entries of the conversations; quartiles are of the pair index over the history's length (the last request: the whole conversation). " +
      'The recall goals are held on the conversations whose whole history exceeds the budget at the last request: one that fits it has nothing to choose (raw truncation and the stable layout carry all of it), and pooling it in only dilutes the difference (at 64 KiB most long threads fit). ' +
      `"Every ${SAMPLE_EVERY} turns": the requests at turns 0, ${SAMPLE_EVERY}, ${2 * SAMPLE_EVERY}... whose whole history exceeds the budget, pooled (the last request falls anywhere in a rewrite cycle; these do not).`,
    'Raw truncation: the newest pairs raw as the adapter sends them (toAnthropicMessages, end-of-history breakpoint, no note), stopping at the first pair that does not fit. Fill: history bytes / budget of each request whose whole history exceeds the budget.',
    `Pauses: ${TURN_MS / 1000} s between turns on a simulated clock, a ${GAP.ms / 60_000}-minute pause before every ${GAP.every}th turn; cache entries live ${TTL_SECONDS} s after their last write or read. ` +
      `Cost goals as P8's, on ${reference}. The projection is called with now (the simulated clock) and cacheTtlSeconds; a projection that does not know these options ignores them and lays out as without pauses.`,
  );
  return result;
}

function mean(xs: readonly number[]): number {
  return xs.length === 0 ? Number.NaN : xs.reduce((a, b) => a + b, 0) / xs.length;
}
