import type { BenchContext } from './lib/context.ts';
import type { BenchResult } from './lib/report.ts';
import { benchClient } from './lib/server.ts';
import { p50p99, roundRatios, sleep, spread, until } from './lib/stats.ts';
import { textAt } from './lib/data.ts';
import { instantSummarizer, startNoopSide, startSourceboundSide, type WorkerSettings } from './lib/workers.ts';
import { bulkPairs, createConversations, pairTransaction } from './lib/writes.ts';

/**
 * P4 latency: from the commit that crosses the threshold (the 30th pair's
 * transaction; the clock reads right after COMMIT returns) to the start of the
 * summarizer call (the clock reads inside the instant summarizer), versus
 * graphile-worker's own enqueue-to-start latency (add_job committed, clock
 * read inside a no-op task), in the same run, samples interleaved one by one.
 *
 * One sample at a time: each waits for its job to be written back complete,
 * then 5 ms, so neither side ever queues behind the other. Both workers run in
 * this process with the same concurrency, pool size and poll interval
 * (LISTEN/NOTIFY wakes them; the poll is the fallback). The sourcebound side
 * is split into pickup (commit to graphile-worker's job:start) and our path
 * (job:start to the summarizer call: payload, scope read, claim).
 */
export async function benchLatency(ctx: BenchContext): Promise<BenchResult> {
  const settings: WorkerSettings = { concurrency: 4, poolSize: 10, pollIntervalMs: 2000 };
  const rounds = ctx.full ? 9 : 5;
  const perRound = ctx.full ? 200 : 30;
  const warmup = 10;

  const urlS = await ctx.server.freshDatabase('p4_compaction');
  const urlN = await ctx.server.freshDatabase('p4_noop');
  const writerS = await benchClient(urlS);
  const writerN = await benchClient(urlN);

  // Conversations one pair short of the threshold: no job yet.
  const conversations = await createConversations(writerS, warmup + rounds * perRound);
  for (let i = 0; i < conversations.length; i += 100) await bulkPairs(writerS, conversations.slice(i, i + 100), 29, i * 29);

  // The sample's own job is told apart by its payload. The sweep (crontab,
  // every minute) may add a second job for a conversation whose first job is
  // running; that one finds the range busy and can complete before the first
  // one's summarizer call (P4 once failed so): a sample is done when a job of
  // its conversation completes after the call.
  let current = '';
  let summarizerAt = NaN;
  let jobStartAt = NaN;
  let done = false;
  let noopAt = NaN;
  const sourcebound = await startSourceboundSide(urlS, settings, instantSummarizer(() => {
    if (Number.isNaN(summarizerAt)) summarizerAt = performance.now();
  }));
  const conversationOf = (payload: unknown) => (payload as { conversationId?: string } | null)?.conversationId;
  sourcebound.runner.events.on('job:start', ({ job }) => {
    if (job.task_identifier === 'compact_conversation' && conversationOf(job.payload) === current && Number.isNaN(jobStartAt)) jobStartAt = performance.now();
  });
  sourcebound.runner.events.on('job:complete', ({ job }) => {
    if (job.task_identifier === 'compact_conversation' && conversationOf(job.payload) === current && !Number.isNaN(summarizerAt)) done = true;
  });
  const noop = await startNoopSide(urlN, settings, () => { noopAt = performance.now(); });

  const result: BenchResult = {
    id: 'P4', title: 'crossing-to-summarizer latency versus graphile-worker pickup', status: 'ok', seconds: 0,
    params: { ...settings, rounds, samplesPerRoundAndSide: perRound },
    figures: [], headlines: [], notes: [],
  };
  try {
    let next = 0;
    const sampleSourcebound = async () => {
      current = conversations[next]!;
      summarizerAt = NaN;
      jobStartAt = NaN;
      done = false;
      await pairTransaction(writerS, current, textAt(next * 29 + 29));
      next++;
      const t0 = performance.now();
      await until(() => done || sourcebound.completions.errors.length > 0, 30_000, 'the crossing job to call the summarizer and complete', 1);
      if (sourcebound.completions.errors.length > 0) throw new Error('a compaction job failed', { cause: sourcebound.completions.errors[0] });
      await sleep(5);
      return { total: summarizerAt - t0, pickup: jobStartAt - t0, ours: summarizerAt - jobStartAt };
    };
    const sampleNoop = async () => {
      const before = noop.completions.count('noop');
      noopAt = NaN;
      await writerN.query('begin');
      await writerN.query(`select graphile_worker.add_job('noop', '{}'::json)`);
      await writerN.query('commit');
      const t0 = performance.now();
      await until(() => noop.completions.count('noop') > before, 30_000, 'the no-op job', 1);
      await sleep(5);
      return noopAt - t0;
    };

    ctx.log('P4: warm-up');
    for (let i = 0; i < warmup; i++) {
      await sampleSourcebound();
      await sampleNoop();
    }
    const q = { sP50: [] as number[], sP99: [] as number[], nP50: [] as number[], nP99: [] as number[], pickup: [] as number[], ours: [] as number[] };
    for (let r = 0; r < rounds; r++) {
      const s: number[] = [];
      const n: number[] = [];
      const pickup: number[] = [];
      const ours: number[] = [];
      for (let i = 0; i < perRound; i++) {
        // A B, B A, ...: neither side always follows the other.
        const order = i % 2 === 0 ? ['S', 'N'] : ['N', 'S'];
        for (const side of order) {
          if (side === 'S') {
            const x = await sampleSourcebound();
            s.push(x.total);
            pickup.push(x.pickup);
            ours.push(x.ours);
          } else {
            n.push(await sampleNoop());
          }
        }
      }
      const qs = p50p99(s);
      const qn = p50p99(n);
      q.sP50.push(qs.p50);
      q.sP99.push(qs.p99);
      q.nP50.push(qn.p50);
      q.nP99.push(qn.p99);
      q.pickup.push(p50p99(pickup).p50);
      q.ours.push(p50p99(ours).p50);
      ctx.log(`P4 round ${r + 1}/${rounds}: p50 crossing-to-summarizer ${qs.p50.toFixed(2)} ms, no-op ${qn.p50.toFixed(2)} ms`);
    }
    result.figures.push(
      { label: 'crossing commit to summarizer call, p50', unit: 'ms', value: spread(q.sP50) },
      { label: 'crossing commit to summarizer call, p99', unit: 'ms', value: spread(q.sP99) },
      { label: '  of which commit to job start (pickup), p50', unit: 'ms', value: spread(q.pickup) },
      { label: '  of which job start to summarizer call, p50', unit: 'ms', value: spread(q.ours) },
      { label: 'graphile-worker add_job commit to no-op task start, p50', unit: 'ms', value: spread(q.nP50) },
      { label: 'graphile-worker add_job commit to no-op task start, p99', unit: 'ms', value: spread(q.nP99) },
    );
    result.headlines.push(
      { label: 'P4 p50 latency / graphile-worker p50', ratio: spread(roundRatios(q.sP50, q.nP50)), goal: { op: '<=', target: 2 } },
      { label: 'P4 p99 latency / graphile-worker p99', ratio: spread(roundRatios(q.sP99, q.nP99)), goal: { op: '<=', target: 2 } },
    );
    result.notes.push(`p99 of ${perRound} samples per round is close to their maximum: read it as "the slow tail", with the min and max over rounds.`);
  } finally {
    await sourcebound.stop().catch(() => {});
    await noop.stop().catch(() => {});
    await writerS.end().catch(() => {});
    await writerN.end().catch(() => {});
  }
  return result;
}
