import type pg from 'pg';
import type { BenchContext } from './lib/context.ts';
import type { BenchResult } from './lib/report.ts';
import { APP_GOAL, appRole } from './lib/app-role.ts';
import { benchClient } from './lib/server.ts';
import { rotated, roundRatios, spread } from './lib/stats.ts';
import { textAt } from './lib/data.ts';
import { createConversations, pairTransaction } from './lib/writes.ts';

/**
 * P1 write overhead: completed-pair writes per second on the sourcebound
 * schema with its triggers (pair index maintenance, enqueue on crossings)
 * versus the same schema, created the same way, with the user triggers of
 * runs and messages disabled. Several clients write at once, each to its own
 * conversations (one live run per conversation, as in an application).
 *
 * Two loads: conversations kept below the 30-pair threshold (no job is ever
 * added), and conversations written to 45 pairs (each crosses 30 and 40, so
 * the trigger adds a compact_conversation job, then dedupes into it).
 * No worker runs: jobs the triggers add wait in graphile_worker's table and are
 * deleted between rounds, so a growing, never-drained job table does not tax
 * later rounds; the baseline adds none (that is the point of the comparison).
 *
 * Beside the goals, the triggers' own cost per pair, two ways: the server
 * time spent in the trigger functions (pg_stat_user_functions, with
 * track_functions = all on both databases), over the pairs written with
 * triggers in the rounds; and a pair's wall time per client with triggers
 * minus without, what the application sees.
 *
 * A third side, interleaved with the two: the same writes with triggers, on
 * the same database, by clients that are `sourcebound_app` with row security
 * on and `sourcebound.scope` naming the conversations' scope (the app's
 * condition in a deployment, lib/app-role.ts). Its headline: a pair's time as
 * the app over the owner's, per round.
 */
type Side = 'T' | 'A' | 'B';
/** With triggers as the owner, with triggers as the app role with row security, triggers disabled. */
const SIDES: Side[] = ['T', 'A', 'B'];
const SCOPE = 'bench';

export async function benchWrite(ctx: BenchContext): Promise<BenchResult> {
  const clients = 4;
  // Many short rounds rather than a few long ones: other processes on the
  // machine (tests of other engineers) come and go within seconds, and a
  // slice of a second, A then B then B then A, sees nearly the same machine.
  const rounds = ctx.full ? 40 : 16;
  const loads = [
    { key: 'below', label: 'below threshold (25 pairs/conversation)', pairsEach: 25, convsPerClient: ctx.full ? 6 : 3 },
    { key: 'crossing', label: 'crossing (45 pairs/conversation)', pairsEach: 45, convsPerClient: ctx.full ? 4 : 2 },
  ];

  const urlT = await ctx.server.freshDatabase('p1_triggers');
  const urlB = await ctx.server.freshDatabase('p1_baseline');
  const T = await benchClient(urlT);
  const admin = { T, A: T, B: await benchClient(urlB) };
  // Before the writers connect: their sessions time every function call (both sides, so both pay the clock reads).
  for (const [c, url] of [
    [admin.T, urlT],
    [admin.B, urlB],
  ] as const)
    await c.query(`alter database ${new URL(url).pathname.slice(1)} set track_functions = 'all'`);
  await admin.B.query('alter table sourcebound.runs disable trigger user');
  await admin.B.query('alter table sourcebound.messages disable trigger user');
  // Row security on for the whole run (the owner's writers bypass it), off again in the finally.
  const app = await appRole(urlT, SCOPE);
  const writers: Record<Side, pg.Client[]> = { T: [], A: [], B: [] };

  let textOffset = 0;
  /**
   * One measurement: every client writes its share, conversation after
   * conversation. Pairs per second, and the milliseconds of each pair's
   * transaction by pair number (1-based: the transaction that completes pair n).
   */
  const measure = async (
    side: Side,
    pairsEach: number,
    convsPerClient: number,
  ): Promise<{ rate: number; jobs: number; byPair: Map<number, number[]> }> => {
    const byPair = new Map<number, number[]>();
    const conversations = await createConversations(admin[side], clients * convsPerClient, SCOPE);
    const offset = textOffset;
    textOffset += clients * convsPerClient * pairsEach;
    const start = performance.now();
    await Promise.all(
      writers[side].map(async (client: pg.Client, c) => {
        for (let k = 0; k < convsPerClient; k++) {
          const conversationId = conversations[c * convsPerClient + k]!;
          for (let p = 0; p < pairsEach; p++) {
            const t0 = performance.now();
            await pairTransaction(client, conversationId, textAt(offset + (c * convsPerClient + k) * pairsEach + p));
            const list = byPair.get(p + 1) ?? [];
            list.push(performance.now() - t0);
            byPair.set(p + 1, list);
          }
        }
      }),
    );
    const seconds = (performance.now() - start) / 1000;
    const { rows } = await admin[side].query<{ n: number }>('select count(*)::int as n from graphile_worker._private_jobs');
    await admin[side].query('delete from graphile_worker._private_jobs');
    return { rate: (clients * convsPerClient * pairsEach) / seconds, jobs: rows[0]!.n, byPair };
  };

  const result: BenchResult = {
    id: 'P1',
    title: 'write overhead of the triggers',
    status: 'ok',
    seconds: 0,
    params: {
      clients,
      rounds,
      unit: '5 statements in 1 transaction per pair',
      app: `sourcebound_app, row security on, scope '${SCOPE}'`,
      pairsPerRoundAndSide: Object.fromEntries(loads.map((l) => [l.key, clients * l.convsPerClient * l.pairsEach])),
    },
    figures: [],
    headlines: [],
    notes: [],
  };
  try {
    for (const [side, url] of [
      ['T', urlT],
      ['A', app.url],
      ['B', urlB],
    ] as const) {
      writers[side] = await Promise.all(Array.from({ length: clients }, () => benchClient(url)));
    }
    const triggerFunctions = (
      await admin.T.query<{ oid: number }>(
        `select distinct t.tgfoid::int as oid from pg_trigger t
       where t.tgrelid in ('sourcebound.runs'::regclass, 'sourcebound.messages'::regclass) and not t.tgisinternal`,
      )
    ).rows.map((r) => r.oid);
    // PostgreSQL 15 or later (pg_stat_force_next_flush), and a role allowed to reset the statistics.
    let canFlush = (await admin.T.query<{ v: number }>(`select current_setting('server_version_num')::int as v`)).rows[0]!.v >= 150000;
    for (const load of loads) {
      ctx.log(`P1 ${load.key}: warm-up`);
      for (const side of SIDES) await measure(side, load.pairsEach, load.convsPerClient);
      // The trigger functions' server time over this load's rounds (warm-up excluded).
      // The writers' pending statistics of the warm-up are flushed first: flushed after the reset, they would count.
      if (canFlush) await triggerTime([...writers.T, ...writers.A], admin.T, triggerFunctions);
      if (canFlush)
        await admin.T.query('select pg_stat_reset()').catch(() => {
          canFlush = false;
        });
      let pairsWithTriggers = 0;
      const rates = { T: [] as number[], A: [] as number[], B: [] as number[] };
      const jobs: number[] = [];
      // The crossing write: the transaction completing pair 30 (and 40) against the one completing pair 31 (41), same round.
      const crossing: number[] = [];
      const crossingMs = { at: [] as number[], next: [] as number[] };
      for (let i = 0; i < rounds; i++) {
        for (const side of rotated(i, SIDES)) {
          const m = await measure(side, load.pairsEach, load.convsPerClient);
          rates[side].push(m.rate);
          if (side === 'T') jobs.push(m.jobs);
          if (side !== 'B') pairsWithTriggers += clients * load.convsPerClient * load.pairsEach;
          if (side === 'T' && load.key === 'crossing') {
            const at = [...(m.byPair.get(30) ?? []), ...(m.byPair.get(40) ?? [])];
            const next = [...(m.byPair.get(31) ?? []), ...(m.byPair.get(41) ?? [])];
            crossing.push(spread(at).median / spread(next).median);
            crossingMs.at.push(spread(at).median);
            crossingMs.next.push(spread(next).median);
          }
        }
      }
      ctx.log(
        `P1 ${load.key}: with triggers ${spread(rates.T).median.toFixed(0)}/s (as the app with row security ${spread(rates.A).median.toFixed(0)}/s), baseline ${spread(rates.B).median.toFixed(0)}/s (medians of ${rounds})`,
      );
      // Both sides with triggers wrote on the same database: the functions' time is over the pairs of both.
      const trigger = canFlush ? await triggerTime([...writers.T, ...writers.A], admin.T, triggerFunctions) : null;
      // A pair's wall time per client, per round: clients / (pairs/s).
      const perPair = {
        T: rates.T.map((r) => (1000 * clients) / r),
        A: rates.A.map((r) => (1000 * clients) / r),
        B: rates.B.map((r) => (1000 * clients) / r),
      };
      const extra = spread(perPair.T.map((t, i) => t - perPair.B[i]!));
      result.figures.push(
        { label: `${load.key}: with triggers`, unit: 'pairs/s', value: spread(rates.T) },
        { label: `${load.key}: with triggers, as the app role with row security`, unit: 'pairs/s', value: spread(rates.A) },
        { label: `${load.key}: triggers disabled`, unit: 'pairs/s', value: spread(rates.B) },
        { label: `${load.key}: a pair's wall time per client, with triggers minus without (per round)`, unit: 'ms', value: extra },
        {
          label: `${load.key}: a pair's wall time per client, as the app with row security minus as the owner (per round)`,
          unit: 'ms',
          value: spread(perPair.A.map((a, i) => a - perPair.T[i]!)),
        },
      );
      if (trigger !== null) {
        result.figures.push(
          {
            label: `${load.key}: the trigger functions' own server time per pair (pg_stat_user_functions, all rounds)`,
            unit: 'ms',
            value: spread([trigger.ms / pairsWithTriggers]),
          },
          { label: `${load.key}: trigger function calls per pair`, unit: 'calls', value: spread([trigger.calls / pairsWithTriggers]) },
        );
      }
      result.headlines.push({
        label: load.key === 'below' ? 'P1 below threshold: triggers / baseline' : 'P1 overall (crossing): triggers / baseline',
        ratio: spread(roundRatios(rates.T, rates.B)),
        goal: { op: '>=', target: load.key === 'below' ? 0.85 : 0.8 },
        floor: `triggers ${trigger === null ? '?' : (trigger.ms / pairsWithTriggers).toFixed(3)} ms/pair on the server, +${extra.median.toFixed(2)} ms/pair of ${spread(perPair.B).median.toFixed(2)} for the app`,
      });
      const name = load.key === 'below' ? 'P1 below threshold' : 'P1 overall (crossing)';
      result.headlines.push(
        {
          label: `${name}, as the app role with row security: triggers / baseline`,
          ratio: spread(roundRatios(rates.A, rates.B)),
          goal: null,
        },
        {
          label: `${name}: a pair's time as the app role with row security / as the owner`,
          ratio: spread(roundRatios(perPair.A, perPair.T)),
          goal: { op: '<=', target: APP_GOAL },
          floor: `owner ${spread(perPair.T).median.toFixed(2)} ms, app ${spread(perPair.A).median.toFixed(2)} ms a pair per client`,
        },
      );
      result.notes.push(
        `${load.label}: compact_conversation jobs the triggers added per round: ${spread(jobs).median} (baseline: none; deleted between rounds).`,
      );
      if (load.key === 'crossing') {
        result.figures.push(
          { label: 'crossing write: transaction completing pair 30 or 40', unit: 'ms', value: spread(crossingMs.at) },
          { label: 'crossing write: transaction completing pair 31 or 41', unit: 'ms', value: spread(crossingMs.next) },
        );
        result.headlines.push({
          label: 'P1 crossing write: pair 30 / pair 31 transaction (median per round, with triggers)',
          ratio: spread(crossing),
          goal: { op: '<=', target: 1.15 },
        });
      }
    }
    if (!canFlush)
      result.notes.push(
        "The trigger functions' server time needs PostgreSQL 15 or later (pg_stat_force_next_flush) and a role that may call pg_stat_reset(): not measured here.",
      );
    const pairs = async (c: pg.Client) => (await c.query<{ n: number }>('select count(*)::int as n from sourcebound.pairs')).rows[0]!.n;
    result.notes.push(
      `Sanity: pairs indexed with triggers ${await pairs(admin.T)}, with triggers disabled ${await pairs(admin.B)} (expected 0).`,
    );
  } finally {
    for (const c of [...writers.T, ...writers.A, ...writers.B]) await c.end().catch(() => {});
    await app.close();
    for (const c of [admin.T, admin.B]) await c.end().catch(() => {});
  }
  return result;
}

/**
 * The server time and calls of the trigger functions since the last
 * pg_stat_reset(): each writer flushes its pending statistics first (they
 * reach the shared view at most once a second otherwise).
 */
async function triggerTime(writers: pg.Client[], admin: pg.Client, functions: number[]): Promise<{ ms: number; calls: number }> {
  for (const w of writers) {
    await w.query('select pg_stat_force_next_flush()');
    await w.query('select 1');
  }
  const { rows } = await admin.query<{ ms: number; calls: number }>(
    `select coalesce(sum(total_time), 0)::float8 as ms, coalesce(sum(calls), 0)::float8 as calls
     from pg_stat_user_functions where funcid = any($1::oid[])`,
    [functions],
  );
  return rows[0]!;
}
