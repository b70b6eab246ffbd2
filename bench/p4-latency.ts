import type { BenchContext } from './lib/context.ts';
import type { BenchResult } from './lib/report.ts';
import { startClaimFloor } from './lib/floor.ts';
import { benchClient } from './lib/server.ts';
import { p50p99, roundRatios, sleep, spread, until } from './lib/stats.ts';
import { textAt } from './lib/data.ts';
import { instantSummarizer, startNoopSide, startSourceboundSide, type WorkerSettings } from './lib/workers.ts';
import { bulkPairs, createConversations, pairTransaction } from './lib/writes.ts';

/**
 * P4 latency: from the commit that crosses the threshold (the 30th pair's
 * transaction; the clock reads just before its COMMIT is sent) to the start
 * of the summarizer call (the clock reads inside the instant summarizer),
 * versus graphile-worker's own enqueue-to-start latency (the clock reads
 * just before add_job's COMMIT is sent, and inside a no-op task), in the same
 * run, samples interleaved one by one.
 *
 * Both commits are asynchronous and the clock starts before COMMIT, not when
 * it returns: the NOTIFY reaches the worker at commit, before the committing
 * backend replies, and on a loaded machine a pickup can finish before the
 * client reads that reply (P11 printed a negative ratio so; see there). The
 * no-op side, whose task starts right after its pickup, is the one exposed:
 * its negative samples lowered the baseline and raised the ratio. The
 * samples whose job started before COMMIT returned are counted in a note.
 *
 * The goal is a regression guard at the floor: the claim must be durable
 * before the model call, so our path is at least graphile-worker's pickup
 * plus a claim statement and its synchronous COMMIT. That durable claim is
 * a third side of the same rotation (lib/floor.ts: fresh ranges of another
 * database, one connection), and the ratio P4 would have at the floor,
 * (no-op p50 + claim p50 + COMMIT p50) / no-op p50 per round, is printed
 * beside the goal.
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

  const floor = await startClaimFloor(ctx.server, 'p4_floor', warmup + rounds * perRound, 300_000);
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
  const sourcebound = await startSourceboundSide(
    urlS,
    settings,
    instantSummarizer(() => {
      if (Number.isNaN(summarizerAt)) summarizerAt = performance.now();
    }),
  );
  const conversationOf = (payload: unknown) => (payload as { conversationId?: string } | null)?.conversationId;
  sourcebound.runner.events.on('job:start', ({ job }) => {
    if (job.task_identifier === 'compact_conversation' && conversationOf(job.payload) === current && Number.isNaN(jobStartAt))
      jobStartAt = performance.now();
  });
  sourcebound.runner.events.on('job:complete', ({ job }) => {
    if (job.task_identifier === 'compact_conversation' && conversationOf(job.payload) === current && !Number.isNaN(summarizerAt))
      done = true;
  });
  const noop = await startNoopSide(urlN, settings, () => {
    noopAt = performance.now();
  });

  const result: BenchResult = {
    id: 'P4',
    title: 'crossing-to-summarizer latency versus graphile-worker pickup',
    status: 'ok',
    seconds: 0,
    params: { ...settings, rounds, samplesPerRoundAndSide: perRound },
    figures: [],
    headlines: [],
    notes: [],
  };
  try {
    let next = 0;
    // Samples whose job started before the COMMIT that enqueued it had returned.
    const early = { S: 0, N: 0, samples: 0 };
    const sampleSourcebound = async () => {
      current = conversations[next]!;
      summarizerAt = NaN;
      jobStartAt = NaN;
      done = false;
      let t0 = NaN;
      await pairTransaction(writerS, current, textAt(next * 29 + 29), {
        asynchronousCommit: true,
        beforeCommit: () => {
          t0 = performance.now();
        },
      });
      const committed = performance.now();
      next++;
      await until(
        () => done || sourcebound.completions.errors.length > 0,
        30_000,
        'the crossing job to call the summarizer and complete',
        1,
      );
      if (sourcebound.completions.errors.length > 0)
        throw new Error('a compaction job failed', { cause: sourcebound.completions.errors[0] });
      if (jobStartAt < committed) early.S++;
      await sleep(5);
      return { total: summarizerAt - t0, pickup: jobStartAt - t0, ours: summarizerAt - jobStartAt };
    };
    const sampleNoop = async () => {
      const before = noop.completions.count('noop');
      noopAt = NaN;
      await writerN.query('begin');
      await writerN.query('set local synchronous_commit = off');
      await writerN.query(`select graphile_worker.add_job('noop', '{}'::json)`);
      const t0 = performance.now();
      await writerN.query('commit');
      const committed = performance.now();
      await until(() => noop.completions.count('noop') > before, 30_000, 'the no-op job', 1);
      if (noopAt < committed) early.N++;
      early.samples++;
      await sleep(5);
      return noopAt - t0;
    };

    ctx.log('P4: warm-up');
    for (let i = 0; i < warmup; i++) {
      await sampleSourcebound();
      await sampleNoop();
      await floor.sample();
    }
    const q = {
      sP50: [] as number[],
      sP99: [] as number[],
      nP50: [] as number[],
      nP99: [] as number[],
      pickup: [] as number[],
      ours: [] as number[],
      claim: [] as number[],
      commit: [] as number[],
      atFloor: [] as number[],
    };
    const sides = ['S', 'N', 'F'] as const;
    for (let r = 0; r < rounds; r++) {
      const s: number[] = [];
      const n: number[] = [];
      const pickup: number[] = [];
      const ours: number[] = [];
      const claim: number[] = [];
      const commit: number[] = [];
      for (let i = 0; i < perRound; i++) {
        // S N F, N F S, F S N, ...: each side goes first, second and third alike.
        for (let k = 0; k < sides.length; k++) {
          const side = sides[(i + k) % sides.length];
          if (side === 'S') {
            const x = await sampleSourcebound();
            s.push(x.total);
            pickup.push(x.pickup);
            ours.push(x.ours);
          } else if (side === 'N') {
            n.push(await sampleNoop());
          } else {
            const x = await floor.sample();
            claim.push(x.claim);
            commit.push(x.commit);
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
      q.claim.push(p50p99(claim).p50);
      q.commit.push(p50p99(commit).p50);
      q.atFloor.push((qn.p50 + q.claim.at(-1)! + q.commit.at(-1)!) / qn.p50);
      ctx.log(
        `P4 round ${r + 1}/${rounds}: p50 crossing-to-summarizer ${qs.p50.toFixed(2)} ms, no-op ${qn.p50.toFixed(2)} ms, durable claim ${q.claim.at(-1)!.toFixed(2)} + ${q.commit.at(-1)!.toFixed(2)} ms`,
      );
    }
    result.figures.push(
      { label: 'crossing commit to summarizer call, p50', unit: 'ms', value: spread(q.sP50) },
      { label: 'crossing commit to summarizer call, p99', unit: 'ms', value: spread(q.sP99) },
      { label: '  of which commit to job start (pickup), p50', unit: 'ms', value: spread(q.pickup) },
      { label: '  of which job start to summarizer call, p50', unit: 'ms', value: spread(q.ours) },
      { label: 'graphile-worker add_job commit to no-op task start, p50', unit: 'ms', value: spread(q.nP50) },
      { label: 'graphile-worker add_job commit to no-op task start, p99', unit: 'ms', value: spread(q.nP99) },
      { label: "floor: the durable claim's statement (next-mark claim, prepared), p50", unit: 'ms', value: spread(q.claim) },
      { label: 'floor: its COMMIT (synchronous), p50', unit: 'ms', value: spread(q.commit) },
    );
    result.headlines.push(
      {
        label: 'P4 p50 latency / graphile-worker p50',
        ratio: spread(roundRatios(q.sP50, q.nP50)),
        goal: { op: '<=', target: 3 },
        floor: `${spread(q.atFloor).median.toFixed(2)}x: no-op ${spread(q.nP50).median.toFixed(2)} + claim ${spread(q.claim).median.toFixed(2)} + COMMIT ${spread(q.commit).median.toFixed(2)} ms`,
      },
      { label: 'P4 at the floor: (no-op p50 + durable claim p50 + its COMMIT p50) / no-op p50', ratio: spread(q.atFloor), goal: null },
      { label: 'P4 p99 latency / graphile-worker p99', ratio: spread(roundRatios(q.sP99, q.nP99)), goal: null },
    );
    result.notes.push(
      `p99 of ${perRound} samples per round is close to their maximum: read it as "the slow tail", with the min and max over rounds.`,
      `The clock starts just before each side's COMMIT is sent (asynchronous commits). Jobs started before that COMMIT had returned (a clock started on its return would have read them short or negative): sourcebound ${early.S}, no-op ${early.N}, of ${early.samples} samples per side.`,
      "The floor is what P4 would be if our path between pickup and summarizer call were only the claim made durable, timed apart on one connection (one round trip more than the worker's autocommit claim).",
    );
  } finally {
    await sourcebound.stop().catch(() => {});
    await noop.stop().catch(() => {});
    await floor.close().catch(() => {});
    await writerS.end().catch(() => {});
    await writerN.end().catch(() => {});
  }
  return result;
}
