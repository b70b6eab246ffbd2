import { createHash } from 'node:crypto';
import { run } from 'graphile-worker';
import { claimRange } from '../src/conversation/claim.ts';
import { commitOutcome, DEFAULT_RETRY_DELAYS } from '../src/conversation/commit.ts';
import { graphileLogger } from '../src/db/migrate.ts';
import { conversationIdFor, writeThread } from '../src/cli/demo-threads.ts';
import { conversationMaterial } from '../src/conversation/material.ts';
import { extractiveSummary, OFFLINE_MODEL } from '../src/gateway/offline.ts';
import { CONVERSATION_PROMPT_VERSION, promptEntry } from '../src/gateway/prompts.ts';
import type { MaterialItem, Outcome } from '../src/support/summary-contract.ts';
import { extractFacts, groundOutcome, groundSummary, normalizeText, type Fact } from '../src/grounding/index.ts';
import { silentLogger } from '../src/support/logger.ts';
import { plannableRanges } from '../src/conversation/plan.ts';
import type { BenchContext } from './lib/context.ts';
import { dataset } from './lib/data.ts';
import type { BenchResult } from './lib/report.ts';
import { benchPool } from './lib/server.ts';
import { spread, until } from './lib/stats.ts';

/**
 * P9 grounding on the real ranges: every plannable range (ten assistant
 * replies) of the shared threads, summarized three ways, each checked by
 * src/grounding/index.ts against its replies:
 * (a) a stand-in model that copies every fact faithfully but reformats it
 *     (thousands separators added, percent and units spaced, ISO dates
 *     written out and written dates made ISO, times in 12-hour form,
 *     identifiers, URLs and e-mails upper-cased, identifiers without their
 *     hyphens, a currency symbol moved to the other side of its amount, a
 *     version's `v` dropped):
 *     every flag is a false flag;
 * (b) the same stand-in changing one figure, date or identifier per summary
 *     (or inventing one when the summary has none) to a value its replies do
 *     not contain: every summary must be flagged;
 * (c) the offline summarizer (OFFLINE_MODEL): no flag expected.
 * Then the check's cost against the worker's database work for the same
 * range, as a worker does it: a graphile-worker runner (concurrency 1, the
 * pool's statements prepared, as on a direct connection) picks up one job
 * per range; the pickup is its get_job, from `worker:getJob:start` to
 * `job:start`; in the task the range is claimed and, once the summary is in
 * hand, checked (groundOutcome) and committed (commitOutcome), the claim and
 * the commit sent as the worker sends them on a direct connection (named
 * prepared statements). Headline: p50(check) / p50(pickup + claim + commit)
 * over the ranges, goal <= 0.10, the parts printed beside it; on the offline
 * summaries, and beside it (no goal) on the stand-in's reformatted ones,
 * where no fact is found as written and the check normalizes the replies
 * (the slow path a model's summaries can take). The goal's other half, that
 * no input makes the check grow faster than its length, is held by
 * bench/hostile-text.ts and test/grounding.test.ts, not timed here.
 */
export async function benchGrounding(ctx: BenchContext): Promise<BenchResult> {
  const { threads, source } = dataset();
  const ranges = realRanges();
  const result: BenchResult = {
    id: 'P9',
    title: 'grounding check on real ranges',
    status: 'ok',
    seconds: 0,
    params: { ranges: ranges.length, summarizer: `${OFFLINE_MODEL} and a reformatting / tampering stand-in`, summaryMaxChars: 6000 },
    figures: [],
    headlines: [],
    notes: [`Data: ${source}.`],
  };

  let offlineFlagged = 0;
  let faithfulFlagged = 0;
  let tamperedFlagged = 0;
  let reformatted = 0;
  let invented = 0;
  let checkedFacts = 0;
  const falseFlags: string[] = [];
  for (const r of ranges) {
    const offline = offlineSummary(r.items);
    const c = groundSummary(offline, r.items);
    checkedFacts += c.checked.length;
    if (c.ungrounded.length > 0) offlineFlagged++;

    const faithful = reformatFaithfully(offline);
    reformatted += faithful.changed;
    const a = groundSummary(faithful.text, r.items);
    if (a.ungrounded.length > 0) {
      faithfulFlagged++;
      falseFlags.push(...a.ungrounded.slice(0, 2));
    }

    // On the normalized faithful text, so every fact stands as the extractor reads it.
    const tampered = tamper(normalizeText(faithful.text), r.items);
    if (tampered.invented) invented++;
    const b = groundSummary(tampered.text, r.items);
    if (b.ungrounded.length > 0) tamperedFlagged++;
  }
  const n = ranges.length;
  const one = (x: number) => spread([x]);
  result.figures.push(
    { label: `ranges checked (real threads, ten assistant replies each)`, unit: 'ranges', value: one(n) },
    { label: 'facts checked in the offline summaries', unit: 'facts', value: one(checkedFacts) },
    { label: '(a) faithful, reformatted stand-in: summaries flagged (false flags)', unit: 'summaries', value: one(faithfulFlagged) },
    { label: '(b) one figure/date/identifier changed or invented: summaries flagged', unit: 'summaries', value: one(tamperedFlagged) },
    {
      label: `(c) offline summarizer ${OFFLINE_MODEL.replace('sourcebound/', '')}: summaries flagged`,
      unit: 'summaries',
      value: one(offlineFlagged),
    },
  );
  result.headlines.push(
    { label: 'P9 (a) false flags / faithful reformatted summaries', ratio: one(faithfulFlagged / n), goal: { op: '<=', target: 0 } },
    { label: 'P9 (b) flagged / tampered summaries', ratio: one(tamperedFlagged / n), goal: { op: '>=', target: 1 } },
    { label: 'P9 (c) flagged / offline summaries', ratio: one(offlineFlagged / n), goal: { op: '<=', target: 0 } },
  );
  result.notes.push(
    `The faithful stand-in reformatted ${reformatted} facts in ${n} summaries; the tampering one changed a fact in ${n - invented} and invented one in ${invented} (summaries without a figure, date or identifier).`,
    ...(falseFlags.length > 0 ? [`False flags, first ones: ${falseFlags.slice(0, 6).join(' | ')}`] : []),
  );

  // The check's cost beside the worker's database work for the range, in a real database.
  const url = await ctx.server.freshDatabase('p9_grounding');
  const pool = benchPool(url, 4);
  let runner: Awaited<ReturnType<typeof run>> | undefined;
  try {
    const wanted = new Set(ranges.map((r) => r.threadId));
    for (const thread of threads.filter((t) => wanted.has(t.id))) await writeThread(pool, thread, 'bench');
    await pool.query('delete from graphile_worker._private_jobs');
    await pool.query('analyze');
    // One job per range, run by a bare graphile-worker runner: the pickup is the worker's own get_job.
    let task: (() => Promise<void>) | null = null;
    let getJobAt = NaN;
    let pickup = NaN;
    let completed = 0;
    runner = await run({
      pgPool: pool,
      concurrency: 1,
      pollInterval: 60_000,
      noHandleSignals: true,
      logger: graphileLogger(silentLogger),
      crontab: '',
      taskList: { p9_range: async () => task!() },
      // The settings startWorker uses (src/worker/supervisor.ts).
      preset: { worker: { completeJobBatchDelay: 0, failJobBatchDelay: 0 } },
    });
    runner.events.on('worker:getJob:start', () => {
      getJobAt = performance.now();
    });
    runner.events.on('job:start', () => {
      pickup = performance.now() - getJobAt;
    });
    runner.events.on('job:complete', () => {
      completed++;
    });
    const prepared = { prepared: true };
    type Times = { pickup: number[]; claim: number[]; check: number[]; commit: number[] };
    // Each range claimed, then its summary checked and committed, timed apart. Twice: the offline
    // summaries (the headline), then the faithful stand-in's, which reformats every fact as a model
    // may (most facts are then not in the replies as written: the check normalizes the replies).
    const timed = async (summaryOf: (items: MaterialItem[]) => string, model: string, policy?: 'flag'): Promise<Times> => {
      const t: Times = { pickup: [], claim: [], check: [], commit: [] };
      const repetitions = ctx.full ? 3 : 1;
      for (let rep = 0; rep < repetitions; rep++) {
        for (const r of ranges) {
          const conversationId = conversationIdFor(r.threadId);
          let failure: unknown;
          task = async () => {
            try {
              const t0 = performance.now();
              const claim = await claimRange(
                pool,
                {
                  conversationId,
                  range: { fromPair: r.fromPair, toPair: r.fromPair + 9 },
                  model: `${model}@${rep}`,
                  promptVersion: CONVERSATION_PROMPT_VERSION,
                  workerId: 'bench-p9',
                  leaseMs: 60_000,
                },
                prepared,
              );
              const t1 = performance.now();
              if (claim.kind !== 'claimed') throw new Error(`P9: range ${r.threadId}:${r.fromPair} not claimable (${claim.kind})`);
              const items = conversationMaterial(claim.replies, r.fromPair, CONVERSATION_PROMPT_VERSION);
              const answer: Outcome = { kind: 'ok', text: summaryOf(items), model: 'bench', usage: null, requestId: null };
              const t2 = performance.now();
              const outcome = groundOutcome(answer, items, policy);
              const t3 = performance.now();
              const committed = await commitOutcome(
                pool,
                { record: claim.record, attemptId: claim.attemptId, workerId: 'bench-p9' },
                outcome,
                DEFAULT_RETRY_DELAYS,
                prepared,
              );
              const t4 = performance.now();
              if (committed.kind !== 'completed') throw new Error(`P9: commit ${committed.kind}`);
              t.pickup.push(pickup);
              t.claim.push(t1 - t0);
              t.check.push(t3 - t2);
              t.commit.push(t4 - t3);
            } catch (error) {
              failure ??= error;
            }
          };
          const before = completed;
          await pool.query(`select graphile_worker.add_job('p9_range', '{}'::json)`);
          await until(() => completed > before, 30_000, "P9: the range's job to complete", 1);
          if (failure !== undefined) throw failure;
        }
      }
      return t;
    };
    const offline = await timed(offlineSummary, 'bench/p9');
    // Under `flag`, so that an answer the check got wrong would still commit as completed (and show in (a)).
    const modelLike = await timed((items) => reformatFaithfully(offlineSummary(items)).text, 'bench/p9-reformatted', 'flag');
    const p50 = (xs: number[]) => spread(xs).median;
    const database = (t: Times) => t.pickup.map((x, i) => x + t.claim[i]! + t.commit[i]!);
    const o = offline;
    const parts = `pickup ${p50(o.pickup).toFixed(2)} + claim ${p50(o.claim).toFixed(2)} + commit ${p50(o.commit).toFixed(2)} ms (p50s); check ${p50(o.check).toFixed(3)} ms`;
    result.figures.push(
      { label: 'grounding check per range (groundOutcome), p50 over ranges', unit: 'ms', value: one(p50(o.check)) },
      {
        label: 'pickup per range (graphile-worker get_job: worker:getJob:start to job:start), p50 over ranges',
        unit: 'ms',
        value: one(p50(o.pickup)),
      },
      {
        label: 'claim per range (claimRange, prepared: locks, reads and hashes the ten pairs, inserts record and attempt), p50 over ranges',
        unit: 'ms',
        value: one(p50(o.claim)),
      },
      {
        label: 'commit per range (commitOutcome, prepared: one statement that locks, re-reads, re-hashes and settles), p50 over ranges',
        unit: 'ms',
        value: one(p50(o.commit)),
      },
      { label: "the worker's database work per range, pickup + claim + commit, p50 over ranges", unit: 'ms', value: one(p50(database(o))) },
      { label: 'check / commit, p50 (no goal; the goal of rounds 1-2, 0.05)', unit: 'ratio', value: one(p50(o.check) / p50(o.commit)) },
      {
        label: "grounding check of the reformatting stand-in's summaries (facts not as written in the replies), p50 over ranges",
        unit: 'ms',
        value: one(p50(modelLike.check)),
      },
      {
        label: "check / database work with the reformatting stand-in's summaries, p50 (no goal: what a model's summaries may cost)",
        unit: 'ratio',
        value: one(p50(modelLike.check) / p50(database(modelLike))),
      },
    );
    result.headlines.push({
      label: "P9 grounding check / the worker's database work for the range (pickup + claim + commit), p50",
      ratio: one(p50(o.check) / p50(database(o))),
      goal: { op: '<=', target: 0.1 },
      floor: parts,
    });
  } finally {
    await runner?.stop().catch(() => {});
    await pool.end();
  }
  return result;
}

/** Every plannable range (ten assistant replies) of the shared threads, as compaction gives them to the current prompt version. */
export function realRanges(): { threadId: string; fromPair: number; items: MaterialItem[] }[] {
  const ranges: { threadId: string; fromPair: number; items: MaterialItem[] }[] = [];
  for (const thread of dataset().threads) {
    for (const range of plannableRanges(thread.pairs.length)) {
      const replies = thread.pairs
        .slice(range.fromPair, range.toPair + 1)
        .map((p) => ({ assistantMessageId: '', assistantText: p.assistant }));
      ranges.push({
        threadId: thread.id,
        fromPair: range.fromPair,
        items: conversationMaterial(replies, range.fromPair, CONVERSATION_PROMPT_VERSION),
      });
    }
  }
  return ranges;
}

/** The offline summarizer's summary of a range's material for the current prompt version (tags as that version names replies). */
export function offlineSummary(items: readonly MaterialItem[]): string {
  return extractiveSummary(items, 6000, promptEntry(CONVERSATION_PROMPT_VERSION)!.itemKey)!;
}

const MONTH_NAMES = [
  'January',
  'February',
  'March',
  'April',
  'May',
  'June',
  'July',
  'August',
  'September',
  'October',
  'November',
  'December',
];

/**
 * The summary with every fact rewritten in another faithful form. Starts from
 * the normalized text (so separators the source had are gone), then rewrites
 * each fact where it stands.
 */
export function reformatFaithfully(summary: string): { text: string; changed: number } {
  let text = normalizeText(summary);
  let changed = 0;
  let from = 0;
  for (const fact of extractFacts(text)) {
    const at = text.indexOf(fact.text, from);
    if (at < 0) continue;
    const next = fact.truncated ? fact.text : rewrite(fact);
    if (next !== fact.text) changed++;
    text = text.slice(0, at) + next + text.slice(at + fact.text.length);
    from = at + next.length;
  }
  return { text, changed };
}

function rewrite(fact: Fact): string {
  const t = fact.text;
  switch (fact.kind) {
    case 'number':
    case 'money': {
      // Separators in a whole part of four or more digits (never after a point, never with a leading zero).
      const grouped = t
        .replace(/(?<![\d.,])[1-9]\d{3,}(?!\d)/, (d) => Number(d).toLocaleString('en-US'))
        .replace(/(\d)%/, '$1 %')
        .replace(/(\d)(kg|km|mb|gb|ms|cm|mm)\b/i, '$1 $2');
      // A currency symbol moved to the other side of its amount (`150$` -> `$150`, `€50` -> `50 €`).
      const after = /^([\d.,]+)\s?([$€£¥₹])$/.exec(grouped);
      if (after) return `${after[2]}${after[1]}`;
      const before = /^([€£])\s?([\d.,]+)$/.exec(grouped);
      return before ? `${before[2]} ${before[1]}` : grouped;
    }
    case 'date': {
      const iso = /^(\d{4})-(\d{2})-(\d{2})$/.exec(t);
      if (iso) return `${MONTH_NAMES[Number(iso[2]) - 1]} ${Number(iso[3])}, ${iso[1]}`;
      return /^\d{4}-\d{2}-\d{2}$/.test(fact.key) ? fact.key : t;
    }
    case 'time': {
      const m = /^(\d{1,2}):(\d{2})$/.exec(t);
      if (!m || Number(m[1]) > 23) return t;
      const h = Number(m[1]);
      return `${h % 12 === 0 ? 12 : h % 12}:${m[2]} ${h < 12 ? 'am' : 'pm'}`;
    }
    case 'identifier': {
      // Case swapped, and hyphens dropped (`INV-2231` -> `inv2231`).
      const swapped = t.toUpperCase() === t ? t.toLowerCase() : t.toUpperCase();
      return swapped.replace(/-/g, '');
    }
    case 'url':
    case 'email':
      return t.toUpperCase() === t ? t.toLowerCase() : t.toUpperCase();
    case 'version':
      return /^v/i.test(t) ? t.slice(1) : `v${t}`;
    default:
      return t; // paths and quoted code are copied exactly: their case matters
  }
}

/**
 * The summary with one figure, date or identifier changed to a value the
 * material does not contain, or, when it has none, with an invented figure.
 */
function tamper(summary: string, items: readonly MaterialItem[]): { text: string; invented: boolean } {
  const material = normalizeText(items.map((i) => `${i.id}\n${i.text}`).join('\n')).toLowerCase();
  const absent = (s: string) => !material.includes(normalizeText(s).toLowerCase());
  for (const fact of extractFacts(summary)) {
    if (fact.truncated || !['number', 'money', 'date', 'identifier', 'time'].includes(fact.kind)) continue;
    const at = summary.indexOf(fact.text);
    // Not a reply's tag ([3f2a1b4c], [pair 123]): the change goes into what the summary says.
    if (at < 0 || summary[at - 1] === '[' || summary.slice(Math.max(0, at - 6), at) === '[pair ') continue;
    // Change the fact's last digit, trying each other digit until the result is not in the material.
    const last = fact.text.search(/\d(?=\D*$)/);
    for (let bump = 1; bump <= 9; bump++) {
      const digit = String((Number(fact.text[last]) + bump) % 10);
      const changed = fact.text.slice(0, last) + digit + fact.text.slice(last + 1);
      const check = extractFacts(changed)[0];
      if (check === undefined || !absent(changed)) continue;
      return { text: summary.slice(0, at) + changed + summary.slice(at + fact.text.length), invented: false };
    }
  }
  for (const figure of ['0.93%', '4,817 kg', '$7,306.25', 'INV-58213']) {
    if (absent(figure)) return { text: `${summary}\nThe total came to ${figure}.`, invented: true };
  }
  throw new Error('P9: no absent figure to invent');
}
