import type pg from 'pg';
import { projectConversationHistory, type ConversationProjection } from '../src/projection/index.ts';
import { extractiveSummary } from '../src/gateway/offline.ts';
import { CONVERSATION_PROMPT_VERSION } from '../src/gateway/prompts.ts';
import { SOURCE_HASH_VERSION, sourceHash, sourceMessageIds } from '../src/conversation/source-hash.ts';
import { plannableRanges } from '../src/conversation/plan.ts';
import { pairsRangeRead } from '../src/db/queries/summaries.ts';
import { APP_GOAL, appRole, type AppRole } from './lib/app-role.ts';
import type { BenchContext } from './lib/context.ts';
import type { BenchResult } from './lib/report.ts';
import { benchPool } from './lib/server.ts';
import { p50p99, rotated, roundRatios, spread } from './lib/stats.ts';
import { bulkPairs, createConversations } from './lib/writes.ts';

/**
 * P2 projection: latency of projectConversationHistory (64 KiB budget) on
 * conversations of 100, 1,000 and 10,000 pairs (and 100,000 with --full),
 * every plannable range carrying a completed, source-bound summary. The
 * design says cost grows with the budget, not the length: the headline is
 * p50(10,000) / p50(100), measured in the same rounds, sizes interleaved.
 *
 * Fixtures: pairs are written set-based (one statement per chunk; the pair
 * triggers still index them); summary records are inserted directly with the
 * ids and source hash computed by src/conversation/source-hash.ts, and an extractive digest of
 * about 1,200 characters as their text (a realistic weight in the budget; the
 * offline summarizer's output, cut shorter).
 *
 * Every call is made twice, interleaved: as the owner (as before the roles
 * existed), and through a pool whose sessions are `sourcebound_app` with row
 * security on and `sourcebound.scope` naming the conversations' scope
 * (lib/app-role.ts). Headlines beside the goal: p50 as the app / p50 as the
 * owner at each size, round by round.
 */
export const BUDGET = 64 * 1024;
const SCOPE = 'bench';
type Who = 'owner' | 'app';
const WHO: Who[] = ['owner', 'app'];
const AS: Record<Who, string> = { owner: 'as the owner', app: 'as the app role with row security' };
const SUMMARY_CHARS = 1200;
const CHUNK = 5000;

export async function benchProjection(ctx: BenchContext): Promise<BenchResult> {
  const sizes = ctx.full ? [100, 1000, 10_000, 100_000] : [100, 1000, 10_000];
  const rounds = ctx.full ? 9 : 5;
  const perRound = ctx.full ? 200 : 40;
  const url = await ctx.server.freshDatabase('p2_projection');
  const pool = benchPool(url, 4);
  const result: BenchResult = {
    id: 'P2',
    title: 'projection latency versus conversation length',
    status: 'ok',
    seconds: 0,
    params: {
      budgetBytes: BUDGET,
      sizes,
      rounds,
      callsPerRoundSizeAndRole: perRound,
      summaryChars: SUMMARY_CHARS,
      app: `sourcebound_app, row security on, scope '${SCOPE}'`,
    },
    figures: [],
    headlines: [],
    notes: [],
  };
  let app: AppRole | undefined;
  const measuring: pg.Pool[] = [];
  try {
    const conversations = await createConversations(pool, sizes.length, SCOPE);
    let offset = 0;
    for (const [i, size] of sizes.entries()) {
      const t0 = performance.now();
      for (let done = 0; done < size; done += CHUNK) {
        await bulkPairs(pool, [conversations[i]!], Math.min(CHUNK, size - done), offset);
        offset += Math.min(CHUNK, size - done);
      }
      const ranges = await summarizeAll(pool, conversations[i]!, size);
      ctx.log(`P2: ${size} pairs and ${ranges} summaries written in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
    }
    // Nothing waits on the jobs the triggers added; keep the tables the reads see tidy.
    await pool.query('delete from graphile_worker._private_jobs');
    await pool.query('vacuum analyze');
    app = await appRole(url, SCOPE);
    // Each role measured on a fresh pool: interleaved, the pool that wrote a layout projected it
    // faster than another pool of the same role (P2b: 1.2-1.3 times at 100 and 1,000 pairs).
    const pools: Record<Who, pg.Pool> = { owner: benchPool(url, 4), app: benchPool(app.url, 4) };
    measuring.push(pools.owner, pools.app);

    const project = async (conversationId: string, who: Who = 'owner'): Promise<{ ms: number; projection: ConversationProjection }> => {
      const t0 = performance.now();
      const projection = await projectConversationHistory({ pool: pools[who], conversationId, scope: SCOPE, budgetBytes: BUDGET });
      return { ms: performance.now() - t0, projection };
    };

    for (const [i, size] of sizes.entries()) {
      // The first call lays the history out and stores its layout; the measured ones read it.
      await projectConversationHistory({ pool, conversationId: conversations[i]!, scope: SCOPE, budgetBytes: BUDGET });
      const { projection: p } = await project(conversations[i]!);
      const seen = (await project(conversations[i]!, 'app')).projection;
      if (JSON.stringify(seen.items) !== JSON.stringify(p.items))
        throw new Error(`P2: at ${size} pairs the app role's projection differs from the owner's`);
      const summaries = p.items.filter((it) => it.kind === 'summary').length;
      const raw = p.items.filter((it) => it.kind === 'pair').length;
      const unusable = p.summaryNotUsed.filter(
        (s) =>
          s.reason !== 'does_not_fit' && s.reason !== 'incomplete_range' && !(s.reason === 'not_yet_summarized' && s.fromPair >= size - 20),
      );
      const covers = p.omitted.length === 0 ? 'all pairs' : `pairs ${p.omitted[0]!.toPair + 1}..${p.pairCount - 1}`;
      result.notes.push(
        `${size} pairs: the projection (${p.bytes} bytes) holds ${summaries} summarized ranges and ${raw} raw pairs, covering ${covers}; summaries unusable for a reason other than the budget: ${unusable.length}.`,
      );
      for (let w = 0; w < 10; w++) for (const who of WHO) await project(conversations[i]!, who);
    }

    const p50 = { owner: sizes.map(() => [] as number[]), app: sizes.map(() => [] as number[]) };
    const p99 = { owner: sizes.map(() => [] as number[]), app: sizes.map(() => [] as number[]) };
    for (let r = 0; r < rounds; r++) {
      const samples = { owner: sizes.map(() => [] as number[]), app: sizes.map(() => [] as number[]) };
      for (let j = 0; j < perRound; j++) {
        // Rotate which size and which role go first, so none always follows the same one.
        for (let s = 0; s < sizes.length; s++) {
          const k = (s + j) % sizes.length;
          for (const who of rotated(j + r, WHO)) samples[who][k]!.push((await project(conversations[k]!, who)).ms);
        }
      }
      for (const who of WHO) {
        samples[who].forEach((x, k) => {
          const q = p50p99(x);
          p50[who][k]!.push(q.p50);
          p99[who][k]!.push(q.p99);
        });
      }
      ctx.log(
        `P2 round ${r + 1}/${rounds}: p50 owner / app ${sizes.map((s, k) => `${s}: ${p50.owner[k]!.at(-1)!.toFixed(2)} / ${p50.app[k]!.at(-1)!.toFixed(2)} ms`).join(', ')}`,
      );
    }
    for (const who of WHO) {
      for (const [k, size] of sizes.entries()) {
        const tag = who === 'owner' ? '' : `, ${AS.app}`;
        result.figures.push({ label: `p50 at ${size.toLocaleString('en-US')} pairs${tag}`, unit: 'ms', value: spread(p50[who][k]!) });
        result.figures.push({ label: `p99 at ${size.toLocaleString('en-US')} pairs${tag}`, unit: 'ms', value: spread(p99[who][k]!) });
      }
    }
    const at = (n: number) => sizes.indexOf(n);
    result.headlines.push({
      label: 'P2 p50(10,000 pairs) / p50(100 pairs)',
      ratio: spread(roundRatios(p50.owner[at(10_000)]!, p50.owner[at(100)]!)),
      goal: { op: '<=', target: 1.5 },
    });
    result.headlines.push({
      label: `P2 p50(10,000 pairs) / p50(100 pairs), ${AS.app}`,
      ratio: spread(roundRatios(p50.app[at(10_000)]!, p50.app[at(100)]!)),
      goal: null,
    });
    if (sizes.includes(100_000)) {
      result.headlines.push({
        label: 'P2 p50(100,000 pairs) / p50(100 pairs)',
        ratio: spread(roundRatios(p50.owner[at(100_000)]!, p50.owner[at(100)]!)),
        goal: null,
      });
    }
    for (const [k, size] of sizes.entries()) {
      result.headlines.push({
        label: `P2 p50 at ${size.toLocaleString('en-US')} pairs, ${AS.app} / ${AS.owner}`,
        ratio: spread(roundRatios(p50.app[k]!, p50.owner[k]!)),
        goal: { op: '<=', target: APP_GOAL },
        floor: `owner ${spread(p50.owner[k]!).median.toFixed(2)} ms, app ${spread(p50.app[k]!).median.toFixed(2)} ms`,
      });
    }
  } finally {
    for (const p of measuring) await p.end();
    await app?.close();
    await pool.end();
  }
  return result;
}

/** A completed summary record for every plannable range, bound to the range's current ids and hash. Returns how many. */
export async function summarizeAll(pool: pg.Pool, conversationId: string, pairCount: number): Promise<number> {
  const records: { from_pair: number; to_pair: number; ids: string[]; hash: string; summary: string }[] = [];
  for (const range of plannableRanges(pairCount)) {
    const pairs = await pairsRangeRead(pool, conversationId, range.fromPair, range.toPair);
    records.push({
      from_pair: range.fromPair,
      to_pair: range.toPair,
      ids: sourceMessageIds(pairs),
      hash: sourceHash(pairs, SOURCE_HASH_VERSION),
      summary:
        extractiveSummary(
          pairs.map((p) => ({ id: p.assistantMessageId, text: p.assistantText })),
          SUMMARY_CHARS,
        ) ?? 'summary',
    });
  }
  for (let i = 0; i < records.length; i += 1000) {
    await pool.query(
      `insert into sourcebound.conversation_summaries
         (conversation_id, scope, from_pair, to_pair, source_message_ids, source_hash, hash_version, model, prompt_version,
          status, summary, attempts_spent, completed_at)
       select $1, c.scope, x.from_pair, x.to_pair, x.ids, x.hash, $3, 'bench/direct', $4, 'completed', x.summary, 1, now()
       from sourcebound.conversations c,
            json_to_recordset($2::json) as x(from_pair int, to_pair int, ids uuid[], hash text, summary text)
       where c.id = $1`,
      [conversationId, JSON.stringify(records.slice(i, i + 1000)), SOURCE_HASH_VERSION, CONVERSATION_PROMPT_VERSION],
    );
  }
  return records.length;
}
