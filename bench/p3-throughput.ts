import type { BenchContext } from './lib/context.ts';
import type { BenchResult } from './lib/report.ts';
import { startClaimFloor } from './lib/floor.ts';
import { benchClient } from './lib/server.ts';
import { p50p99, roundRatios, sidesInRound, spread, until } from './lib/stats.ts';
import { instantSummarizer, peakRssSoFar, startNoopSide, startSourceboundSide, type WorkerSettings } from './lib/workers.ts';
import { bulkPairs, createConversations } from './lib/writes.ts';

/**
 * P3 compaction throughput: summary ranges completed per second by
 * startWorker (claim, instant summarizer, commit) versus graphile-worker no-op
 * jobs per second, with the same concurrency, pool size and poll interval, in
 * the same run, rounds interleaved.
 *
 * Each round enqueues a burst in one transaction: for sourcebound, K
 * conversations of exactly 30 pairs (the triggers add one job each, one
 * plannable range each, so a job is a range); for the baseline, M no-op jobs.
 * The clock starts when COMMIT returns and stops when the last job's
 * completion is written back. Peak RSS of this process (both workers run
 * in-process) is sampled every 10 ms during the sourcebound rounds.
 *
 * The goal is a regression guard at the floor: a range's claim must be
 * durable before the model call, so every range pays a claim statement and a
 * synchronous COMMIT that a no-op job does not. Each round also times that
 * durable claim on fresh ranges of another database (lib/floor.ts), and the
 * floor is printed beside the goal.
 */
export async function benchThroughput(ctx: BenchContext): Promise<BenchResult> {
  const settings: WorkerSettings = { concurrency: 4, poolSize: 10, pollIntervalMs: 2000 };
  const rounds = ctx.full ? 9 : 5;
  const conversationsPerRound = ctx.full ? 400 : 60;
  const noopPerRound = ctx.full ? 4000 : 600;
  const floorPerRound = ctx.full ? 60 : 30;

  const urlS = await ctx.server.freshDatabase('p3_compaction');
  const urlN = await ctx.server.freshDatabase('p3_noop');
  const writerS = await benchClient(urlS);
  const writerN = await benchClient(urlN);
  let calls = 0;
  const sourcebound = await startSourceboundSide(
    urlS,
    settings,
    instantSummarizer(() => {
      calls++;
    }),
  );
  // A round is done when every one of its conversations had a job completed
  // and every range was summarized. Jobs are matched by payload: the sweep
  // (crontab, every minute) may add a second job for a conversation whose
  // first job is running, so a count of completions could end a round early.
  let round = new Set<string>();
  const completedInRound = new Set<string>();
  let lastCompleteAt = NaN;
  sourcebound.runner.events.on('job:complete', ({ job }) => {
    const id = (job.payload as { conversationId?: string } | null)?.conversationId;
    if (job.task_identifier === 'compact_conversation' && id !== undefined && round.has(id)) {
      completedInRound.add(id);
      lastCompleteAt = performance.now();
    }
  });
  const noop = await startNoopSide(urlN, settings);
  const floor = await startClaimFloor(ctx.server, 'p3_floor', (rounds + 1) * floorPerRound, 200_000);

  const result: BenchResult = {
    id: 'P3',
    title: 'compaction throughput versus graphile-worker no-op jobs',
    status: 'ok',
    seconds: 0,
    params: {
      ...settings,
      rounds,
      rangesPerRound: conversationsPerRound,
      noopJobsPerRound: noopPerRound,
      pairsPerConversation: 30,
      floorClaimsPerRound: floorPerRound,
    },
    figures: [],
    headlines: [],
    notes: [],
  };
  const rss0 = process.memoryUsage().rss;
  let sampling: { peak: number } | null = null;
  const sampler = setInterval(() => {
    if (sampling) sampling.peak = Math.max(sampling.peak, process.memoryUsage().rss);
  }, 10);
  try {
    let textOffset = 0;
    const compactionRound = async (): Promise<{ rate: number; peakRss: number }> => {
      sampling = { peak: process.memoryUsage().rss };
      const callsBefore = calls;
      await writerS.query('begin');
      const ids = await createConversations(writerS, conversationsPerRound);
      round = new Set(ids);
      completedInRound.clear();
      await bulkPairs(writerS, ids, 30, textOffset);
      textOffset += conversationsPerRound * 30;
      await writerS.query('commit');
      const t0 = performance.now();
      await until(
        () =>
          (completedInRound.size === round.size && calls - callsBefore >= conversationsPerRound) ||
          sourcebound.completions.errors.length > 0,
        120_000,
        'compaction jobs',
      );
      if (sourcebound.completions.errors.length > 0)
        throw new Error('a compaction job failed', { cause: sourcebound.completions.errors[0] });
      const seconds = (lastCompleteAt - t0) / 1000;
      // Outside the clock: every range of the round is completed (a commit may trail its job's completion event by a moment).
      const completedRanges = async () =>
        (
          await writerS.query<{ n: number }>(
            `select count(*)::int as n from sourcebound.conversation_summaries where status = 'completed' and conversation_id = any($1::uuid[])`,
            [ids],
          )
        ).rows[0]!.n;
      await until(async () => (await completedRanges()) === conversationsPerRound, 10_000, `${conversationsPerRound} completed ranges`, 20);
      const peakRss = sampling.peak;
      sampling = null;
      return { rate: conversationsPerRound / seconds, peakRss };
    };
    const noopRound = async (): Promise<number> => {
      const before = noop.completions.count('noop');
      await writerN.query('begin');
      await writerN.query(`select graphile_worker.add_job('noop', json_build_object('i', g)) from generate_series(1, $1::int) g`, [
        noopPerRound,
      ]);
      await writerN.query('commit');
      const t0 = performance.now();
      await until(
        () => noop.completions.count('noop') - before >= noopPerRound || noop.completions.errors.length > 0,
        120_000,
        'no-op jobs',
      );
      if (noop.completions.errors.length > 0) throw new Error('a no-op job failed', { cause: noop.completions.errors[0] });
      return noopPerRound / ((noop.completions.lastAt('noop') - t0) / 1000);
    };

    // The durable claim, one fresh range after another, with both workers idle.
    const floorRound = async (): Promise<{ claim: number; commit: number }> => {
      const claim: number[] = [];
      const commit: number[] = [];
      for (let k = 0; k < floorPerRound; k++) {
        const x = await floor.sample();
        claim.push(x.claim);
        commit.push(x.commit);
      }
      return { claim: p50p99(claim).p50, commit: p50p99(commit).p50 };
    };

    ctx.log('P3: warm-up');
    await compactionRound();
    await noopRound();
    await floorRound();
    const rates = { S: [] as number[], N: [] as number[] };
    const peaks: number[] = [];
    const floors = { claim: [] as number[], commit: [] as number[], both: [] as number[] };
    for (let i = 0; i < rounds; i++) {
      for (const side of sidesInRound(i, 'S' as const, 'N' as const)) {
        if (side === 'S') {
          const r = await compactionRound();
          rates.S.push(r.rate);
          peaks.push(r.peakRss);
        } else {
          rates.N.push(await noopRound());
        }
      }
      const f = await floorRound();
      floors.claim.push(f.claim);
      floors.commit.push(f.commit);
      floors.both.push(f.claim + f.commit);
      ctx.log(
        `P3 round ${i + 1}/${rounds}: ${rates.S.at(-1)!.toFixed(0)} ranges/s, ${rates.N.at(-1)!.toFixed(0)} no-op jobs/s; durable claim ${f.claim.toFixed(2)} + ${f.commit.toFixed(2)} ms`,
      );
    }
    result.figures.push(
      { label: `ranges completed, concurrency ${settings.concurrency}`, unit: 'ranges/s', value: spread(rates.S) },
      { label: `graphile-worker no-op jobs, concurrency ${settings.concurrency}`, unit: 'jobs/s', value: spread(rates.N) },
      { label: 'peak RSS during compaction rounds', unit: 'MiB', value: spread(peaks.map((b) => b / 2 ** 20)) },
      { label: "floor: the durable claim's statement (next-mark claim, prepared), p50 per round", unit: 'ms', value: spread(floors.claim) },
      { label: 'floor: its COMMIT (synchronous), p50 per round', unit: 'ms', value: spread(floors.commit) },
    );
    result.headlines.push({
      label: 'P3 ranges/s / no-op jobs/s',
      ratio: spread(roundRatios(rates.S, rates.N)),
      goal: { op: '>=', target: 0.15 },
      floor: `durable claim ${spread(floors.claim).median.toFixed(2)} + COMMIT ${spread(floors.commit).median.toFixed(2)} ms a range`,
    });
    result.notes.push(
      `Summarizer calls: ${calls} (one per range; the warm-up included). Both workers run in this process: RSS ${(rss0 / 2 ** 20).toFixed(0)} MiB before P3; ` +
        `VmHWM (peak since the process started, all benchmarks so far) ${(peakRssSoFar() / 2 ** 20).toFixed(0)} MiB after P3.`,
    );
  } finally {
    clearInterval(sampler);
    await floor.close().catch(() => {});
    await sourcebound.stop().catch(() => {});
    await noop.stop().catch(() => {});
    await writerS.end().catch(() => {});
    await writerN.end().catch(() => {});
  }
  return result;
}
