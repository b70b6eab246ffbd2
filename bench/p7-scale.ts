import type pg from 'pg';
import { compactConversation, type CompactionContext } from '../src/conversation/compact.ts';
import { silentLogger } from '../src/support/logger.ts';
import type { BenchContext } from './lib/context.ts';
import { textAt } from './lib/data.ts';
import type { BenchResult } from './lib/report.ts';
import { seedCompleted, seedConversations, seedSettle } from './lib/seed.ts';
import { benchClient, benchPool } from './lib/server.ts';
import { roundRatios, spread } from './lib/stats.ts';
import { instantSummarizer } from './lib/workers.ts';
import { bulkPairs, pairTransaction } from './lib/writes.ts';

/**
 * P7 scale: what compaction costs as history grows (issue 14).
 *
 * 1. Per-job cost: one conversation each of 100, 2,000 and 20,000 pairs, all
 *    ranges completed; each round appends 10 pairs through the real write path
 *    (triggers on: one new plannable range) and times the compact_conversation
 *    task body (state read + compactConversation, instant summarizer), sizes
 *    interleaved. Headline: per-round ratio 20,000 / 100.
 * 2. Growth: one conversation grows 0 -> N pairs (2,000 quick, 5,000 full),
 *    one pair per transaction as a live agent writes it, the task body run at
 *    every crossing; T(n) is the summed compaction time to n pairs. Headline:
 *    T(N) / T(N/2) per growth (2 is linear, 4 quadratic).
 * 3. Sweep: 10,000 (quick) / 100,000 (full) conversations of 35 pairs, every
 *    range completed: sweep_compaction() with nothing to repair (headline: its
 *    median in ms against the 50 ms goal), then with 5,000 of them edited
 *    inside their summarized range and their jobs lost: sweeps until one
 *    enqueues nothing (headline: conversations reached / needing repair).
 * Large states are seeded set-based (bench/lib/seed.ts); all measured work
 * runs through the real code with triggers on.
 */
export async function benchScale(ctx: BenchContext): Promise<BenchResult> {
  const result: BenchResult = {
    id: 'P7',
    title: 'scale: job cost, growth and sweep versus history',
    status: 'ok',
    seconds: 0,
    params: {},
    figures: [],
    headlines: [],
    notes: [],
  };
  await jobCost(ctx, result);
  await growth(ctx, result);
  await sweep(ctx, result);
  return result;
}

/** The compact_conversation task body (src/worker/tasks/compact-conversation.ts), on the given pool. */
async function taskBody(ctx: CompactionContext, conversationId: string): Promise<void> {
  const report = await compactConversation(ctx, conversationId);
  if (report.rescheduleAt !== null || report.ranges.some((r) => r.result !== 'completed'))
    throw new Error(`unexpected pass: ${JSON.stringify(report.ranges)}`);
}

/** A pool whose queries are counted: statements sent by the task body. */
function counted(pool: pg.Pool): { pool: pg.Pool; statements: () => number } {
  let n = 0;
  const proxy = new Proxy(pool, {
    get(target, prop, receiver) {
      if (prop === 'query')
        return (...args: unknown[]) => {
          n++;
          return (target.query as (...a: unknown[]) => unknown).apply(target, args);
        };
      return Reflect.get(target, prop, receiver);
    },
  });
  return { pool: proxy, statements: () => n };
}

async function jobCost(ctx: BenchContext, result: BenchResult): Promise<void> {
  const sizes = [100, 2000, 20_000];
  const rounds = ctx.full ? 31 : 15;
  const url = await ctx.server.freshDatabase('p7_job');
  const pool = benchPool(url, 4);
  try {
    ctx.log('P7: seeding compacted conversations of 100, 2,000 and 20,000 pairs');
    const ids: string[] = [];
    for (const size of sizes) {
      const [id] = await seedConversations(pool, 1, size, { realTexts: true });
      ids.push(id!);
    }
    await seedCompleted(pool, ids);
    await seedSettle(pool, ids);
    const counter = counted(pool);
    const jobCtx: CompactionContext = {
      pool: counter.pool,
      summarizer: instantSummarizer(),
      logger: silentLogger,
      workerId: 'p7',
      leaseMs: 60_000,
    };
    const pairs = [...sizes];
    const times = sizes.map(() => [] as number[]);
    const statements = sizes.map(() => [] as number[]);
    for (let round = -1; round < rounds; round++) {
      // Rotate the order, so no size always runs first.
      for (let j = 0; j < sizes.length; j++) {
        const s = (j + Math.max(round, 0)) % sizes.length;
        await bulkPairs(pool, [ids[s]!], 10, pairs[s]!);
        pairs[s]! += 10;
        const before = counter.statements();
        const t0 = performance.now();
        await taskBody(jobCtx, ids[s]!);
        const ms = performance.now() - t0;
        if (round >= 0) {
          times[s]!.push(ms);
          statements[s]!.push(counter.statements() - before);
        }
      }
    }
    const { rows } = await pool.query<{ n: number }>(
      `select count(*)::int as n from sourcebound.conversation_summaries where conversation_id = any($1::uuid[]) and model = $2 and summary <> 'seeded summary' and status = 'completed'`,
      [ids, jobCtx.summarizer.model],
    );
    if (rows[0]!.n !== sizes.length * (rounds + 1))
      throw new Error(`expected ${sizes.length * (rounds + 1)} new completed ranges, found ${rows[0]!.n}`);
    sizes.forEach((size, i) => {
      result.figures.push({
        label: `one compaction job at ${size.toLocaleString('en')} pairs (compacted, 10 added)`,
        unit: 'ms',
        value: spread(times[i]!),
      });
      result.figures.push({
        label: `statements of that job at ${size.toLocaleString('en')} pairs`,
        unit: 'statements',
        value: spread(statements[i]!),
      });
    });
    result.headlines.push({
      label: 'P7 job at 20,000 pairs / at 100 pairs',
      ratio: spread(roundRatios(times[2]!, times[0]!)),
      goal: { op: '<=', target: 1.5 },
    });
    result.headlines.push({ label: 'P7 job at 2,000 pairs / at 100 pairs', ratio: spread(roundRatios(times[1]!, times[0]!)), goal: null });
    result.params.jobRounds = rounds;
  } finally {
    await pool.end();
  }
}

async function growth(ctx: BenchContext, result: BenchResult): Promise<void> {
  const target = ctx.full ? 5000 : 2000;
  const growths = 5;
  const url = await ctx.server.freshDatabase('p7_growth');
  const pool = benchPool(url, 4);
  const writer = await benchClient(url);
  try {
    const jobCtx: CompactionContext = { pool, summarizer: instantSummarizer(), logger: silentLogger, workerId: 'p7', leaseMs: 60_000 };
    const ratios: number[] = [];
    const totals: number[] = [];
    for (let g = 0; g < growths; g++) {
      ctx.log(`P7 growth ${g + 1}/${growths}: 0 -> ${target.toLocaleString('en')} pairs`);
      const {
        rows: [c],
      } = await writer.query<{ id: string }>(`insert into sourcebound.conversations (scope) values ('bench') returning id`);
      let compactionMs = 0;
      let atHalf = NaN;
      for (let n = 1; n <= target; n++) {
        await pairTransaction(writer, c!.id, textAt(g * target + n));
        // The crossing's job: 30, 40, 50... pairs.
        if (n >= 30 && n % 10 === 0) {
          const t0 = performance.now();
          await taskBody(jobCtx, c!.id);
          compactionMs += performance.now() - t0;
        }
        if (n === target / 2) atHalf = compactionMs;
        if (n % 1000 === 0)
          await writer.query(
            'analyze sourcebound.pairs, sourcebound.messages, sourcebound.conversation_summaries, sourcebound.compaction_marks',
          );
      }
      const { rows } = await writer.query<{ n: number }>(
        `select count(*)::int as n from sourcebound.conversation_summaries where conversation_id = $1 and status = 'completed'`,
        [c!.id],
      );
      if (rows[0]!.n !== (target - 30) / 10 + 1) throw new Error(`growth ${g}: ${rows[0]!.n} completed ranges`);
      ratios.push(compactionMs / atHalf);
      totals.push(compactionMs);
    }
    result.figures.push({
      label: `total compaction time growing 0 -> ${target.toLocaleString('en')} pairs`,
      unit: 'ms',
      value: spread(totals),
    });
    result.headlines.push({
      label: `P7 growth T(${target.toLocaleString('en')}) / T(${(target / 2).toLocaleString('en')})`,
      ratio: spread(ratios),
      goal: { op: '<=', target: 2.2 },
    });
    result.params.growthPairs = target;
  } finally {
    await writer.end();
    await pool.end();
  }
}

const SWEEP_GOAL_MS = 50;

async function sweep(ctx: BenchContext, result: BenchResult): Promise<void> {
  const conversations = ctx.full ? 100_000 : 10_000;
  const needingRepair = 5000;
  const rounds = ctx.full ? 9 : 5;
  const url = await ctx.server.freshDatabase('p7_sweep');
  const db = await benchClient(url);
  try {
    ctx.log(`P7: seeding ${conversations.toLocaleString('en')} compacted conversations of 35 pairs`);
    const ids = await seedConversations(db, conversations, 35, { realTexts: false });
    await seedCompleted(db, ids);
    await seedSettle(db, ids.slice(0, 20));
    const sweepOnce = async () => {
      const t0 = performance.now();
      const { rows } = await db.query<{ n: number }>('select sourcebound.sweep_compaction() as n');
      return { ms: performance.now() - t0, enqueued: rows[0]!.n };
    };

    await sweepOnce();
    const idle: number[] = [];
    for (let i = 0; i < rounds; i++) {
      const r = await sweepOnce();
      if (r.enqueued !== 0) throw new Error(`nothing needs repair, yet the sweep enqueued ${r.enqueued}`);
      idle.push(r.ms);
    }
    result.figures.push({
      label: `sweep, nothing to repair, ${conversations.toLocaleString('en')} conversations`,
      unit: 'ms',
      value: spread(idle),
    });
    result.headlines.push({
      label: `P7 sweep with nothing to repair (${conversations.toLocaleString('en')} conversations) / ${SWEEP_GOAL_MS} ms`,
      ratio: spread(idle.map((ms) => ms / SWEEP_GOAL_MS)),
      goal: { op: '<=', target: 1 },
    });

    // 5,000 conversations edited inside their summarized range (their binding
    // breaks, their ids do not change), and then their jobs lost.
    const edited = ids.filter((_, i) => i % Math.floor(conversations / needingRepair) === 0).slice(0, needingRepair);
    // A thousand conversations per transaction: a history edit holds two transaction
    // advisory locks per conversation until COMMIT (its write lock and its job key's lock),
    // and the default lock table holds about 6,400 (README, "Bulk edits").
    for (let i = 0; i < edited.length; i += 1000) {
      await db.query(
        `update sourcebound.messages m set content = 'edited: ' || m.content
         from sourcebound.pairs p where p.conversation_id = any($1::uuid[]) and p.pair_index = 3 and m.id = p.user_message_id`,
        [edited.slice(i, i + 1000)],
      );
    }
    await db.query('delete from graphile_worker._private_jobs');
    // As autovacuum would (it may be off here): add_job's plans go bad on stale statistics.
    await db.query('analyze sourcebound.compaction_marks, graphile_worker._private_jobs');
    const repairRuns: number[] = [];
    const reached = new Set<string>();
    for (let run = 0; run < 100; run++) {
      const r = await sweepOnce();
      if (r.enqueued === 0) break;
      repairRuns.push(r.ms);
      const { rows } = await db.query<{ c: string }>(`select payload->>'conversationId' as c from graphile_worker._private_jobs`);
      for (const row of rows) reached.add(row.c);
    }
    const reachedEdited = edited.filter((id) => reached.has(id)).length;
    result.figures.push({
      label: `sweep runs until all ${needingRepair.toLocaleString('en')} needing repair were enqueued (limit 1,000 per run)`,
      unit: 'runs',
      value: spread([repairRuns.length]),
    });
    result.figures.push({ label: 'one sweep run while repairing (1,000 enqueued)', unit: 'ms', value: spread(repairRuns) });
    result.headlines.push({
      label: `P7 sweep: conversations reached / ${needingRepair.toLocaleString('en')} needing repair`,
      ratio: spread([reachedEdited / needingRepair]),
      goal: { op: '>=', target: 1 },
    });
    result.params.sweepConversations = conversations;
    result.notes.push(
      `Sweep state: ${conversations.toLocaleString('en')} conversations x 35 pairs, one completed range each; ${reachedEdited} of ${needingRepair} edited conversations re-enqueued in ${repairRuns.length} runs.`,
    );
  } finally {
    await db.end();
  }
}
