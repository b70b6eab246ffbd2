import { sourceHash, sourceMessageIds, type SourcePair } from '../src/conversation/source-hash.ts';
import { createOfflineSummarizer } from '../src/gateway/offline.ts';
import type { Outcome, Summarizer, SummaryRequest } from '../src/support/summary-contract.ts';
import {
  CACHE_PRICES,
  FILL_RATIO,
  projectConversationHistory,
  toAnthropicMessages,
  type ConversationProjection,
  type MessageParam,
  type PairItem,
} from '../src/projection/index.ts';
import type { Thread } from '../src/cli/demo-threads.ts';
import type { BenchContext } from './lib/context.ts';
import { dataset } from './lib/data.ts';
import { PromptCache } from './lib/prompt-cache.ts';
import type { BenchResult, Figure, Headline } from './lib/report.ts';
import { benchPool } from './lib/server.ts';
import { spread } from './lib/stats.ts';
import { startSourceboundSide } from './lib/workers.ts';

/**
 * P8 cache economics: what a conversation costs with prompt caching on when
 * its app calls the projection before every model request.
 *
 * Replays real conversations turn by turn, as an app would: at turn t the
 * history holds pairs 0..t-1; the app projects it, sends history + user
 * message t, and stores pair t when the reply is complete (then waits
 * TURN_MS, the time until the user's next message). A real sourcebound
 * worker (graphile-worker, in this process) summarizes ranges as the
 * crossings enqueue them, so summaries arrive when they would. Two
 * summarizers: the offline one (instant) and a stand-in model (MODEL_MS
 * latency, ~1,500-character summaries copied from the replies).
 *
 * Each request is priced by the prompt-cache model (bench/lib/prompt-cache.ts,
 * prices in src/projection/cache.ts) for three ways of building the history,
 * all in the same run: the whole history raw (the baseline, cached with a
 * breakpoint at its end), today's newest-first projection (the budget filled
 * anew each turn, same breakpoint) and the default cache-stable projection.
 * Conversations: the 3 longest real threads, and one ~150 pairs joined from
 * the next real threads in file order.
 */

const BUDGETS = [16 * 1024, 32 * 1024, 64 * 1024];
const MODEL_MS = 800;
const STANDIN_CHARS = 1500;

type Strategy = 'whole' | 'newest-first' | 'stable';
const STRATEGIES: Strategy[] = ['whole', 'newest-first', 'stable'];

interface Tally {
  turns: number;
  hits: number;
  bytes: number;
  cost: number;
  /** Verbatim user messages in the last request's history (raw pairs + users beside summaries). */
  lastUserMessages: number;
  /** The same, summed over every request (the last request falls anywhere in a rewrite cycle; this does not). */
  allUserMessages: number;
  summariesShown: number;
  /** Summary items whose binding did not hold when they were shown. */
  unbound: number;
  overBudget: number;
}

const newTally = (): Tally => ({
  turns: 0,
  hits: 0,
  bytes: 0,
  cost: 0,
  lastUserMessages: 0,
  allUserMessages: 0,
  summariesShown: 0,
  unbound: 0,
  overBudget: 0,
});

/** A stand-in model summarizer: waits like a model, returns about STANDIN_CHARS characters taken from the replies. */
function standInSummarizer(): Summarizer {
  const model = 'bench/stand-in-model';
  return {
    model,
    async summarize(request: SummaryRequest): Promise<Outcome> {
      await new Promise((r) => setTimeout(r, MODEL_MS));
      const per = Math.floor(STANDIN_CHARS / request.items.length);
      const text = request.items
        .map((it) => it.text.replace(/\s+/g, ' ').slice(0, per))
        .join(' ')
        .trim();
      return { kind: 'ok', text, model, usage: null, requestId: null };
    },
  };
}

/** The 3 longest real threads and one ~150 pairs joined from the next ones in order of length (P12 replays the same). */
export function conversations(): Thread[] {
  const { threads } = dataset();
  const byLength = [...threads].sort((a, b) => b.pairs.length - a.pairs.length || a.id.localeCompare(b.id));
  const longest = byLength.slice(0, 3);
  const joined: Thread = { id: 'joined-150', pairs: [] };
  for (const t of byLength.slice(3)) {
    if (joined.pairs.length >= 150) break;
    joined.pairs.push(...t.pairs.slice(0, 150 - joined.pairs.length));
  }
  return [...longest, joined];
}

export async function benchCache(ctx: BenchContext): Promise<BenchResult> {
  const turnMs = ctx.full ? 400 : 150;
  const threads = conversations();
  const result: BenchResult = {
    id: 'P8',
    title: 'cache economics (prompt caching on)',
    status: 'ok',
    seconds: 0,
    params: {
      budgets: BUDGETS,
      turnMs,
      standInModelMs: MODEL_MS,
      standInChars: STANDIN_CHARS,
      prices: CACHE_PRICES,
      fillRatio: FILL_RATIO,
      conversations: threads.map((t) => `${t.id} (${t.pairs.length} pairs)`),
    },
    figures: [],
    headlines: [],
    notes: [],
  };
  // tallies[summarizer][budget][conversation][strategy]
  const all: { summarizer: string; budget: number; conversation: string; strategy: Strategy; tally: Tally }[] = [];
  for (const [name, make] of [
    ['offline', () => createOfflineSummarizer({ maxChars: 6000 })],
    ['stand-in model', standInSummarizer],
  ] as const) {
    const url = await ctx.server.freshDatabase(`p8_${name}`);
    const pool = benchPool(url, 12);
    const worker = await startSourceboundSide(url, { concurrency: 4, poolSize: 6, pollIntervalMs: 500 }, make());
    try {
      const t0 = performance.now();
      await Promise.all(
        threads.map(async (thread) => {
          const tallies = await replay(pool, thread, turnMs);
          for (const [budget, byStrategy] of tallies) {
            for (const strategy of STRATEGIES)
              all.push({ summarizer: name, budget, conversation: thread.id, strategy, tally: byStrategy.get(strategy)! });
          }
        }),
      );
      ctx.log(`P8: ${name}: ${threads.length} conversations replayed in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
    } finally {
      await worker.stop();
      await pool.end();
    }
  }

  const sum = (rows: typeof all, f: (t: Tally) => number) => rows.reduce((n, r) => n + f(r.tally), 0);
  const pick = (budget: number, strategy: Strategy, conversation?: string) =>
    all.filter((r) => r.budget === budget && r.strategy === strategy && (conversation === undefined || r.conversation === conversation));
  const one = (x: number) => spread([x]);
  const goals: Record<number, number> = { [16 * 1024]: 0.4, [32 * 1024]: 0.55, [64 * 1024]: 1.0 };
  const reference = threads.at(-1)!.id;
  for (const budget of BUDGETS) {
    const kib = `${budget / 1024} KiB`;
    const figures: Figure[] = [];
    for (const strategy of STRATEGIES) {
      const rows = pick(budget, strategy);
      figures.push(
        {
          label: `${kib}, ${strategy}: cache-hit turns / turns`,
          unit: 'ratio',
          value: one(sum(rows, (t) => t.hits) / sum(rows, (t) => t.turns - 1)),
        },
        { label: `${kib}, ${strategy}: bytes sent`, unit: 'bytes', value: one(sum(rows, (t) => t.bytes)) },
        {
          label: `${kib}, ${strategy}: cost with caching / whole history, cached`,
          unit: 'ratio',
          value: one(sum(rows, (t) => t.cost) / sum(pick(budget, 'whole'), (t) => t.cost)),
        },
        {
          label: `${kib}, ${strategy}: verbatim user messages in the last request`,
          unit: 'messages',
          value: one(sum(rows, (t) => t.lastUserMessages)),
        },
      );
    }
    for (const thread of threads) {
      const whole = sum(pick(budget, 'whole', thread.id), (t) => t.cost);
      const stable = pick(budget, 'stable', thread.id);
      const newest = pick(budget, 'newest-first', thread.id);
      figures.push({
        label:
          `${kib}, ${thread.id}: stable cost / whole ${(sum(stable, (t) => t.cost) / whole).toFixed(3)}, newest-first ${(sum(newest, (t) => t.cost) / whole).toFixed(3)}; ` +
          `hits ${sum(stable, (t) => t.hits)}/${sum(stable, (t) => t.turns - 1)}; last-request user messages ${sum(stable, (t) => t.lastUserMessages)} vs ${sum(newest, (t) => t.lastUserMessages)}`,
        unit: 'ratio',
        value: one(sum(stable, (t) => t.cost) / whole),
      });
    }
    result.figures.push(...figures);
    const stable = pick(budget, 'stable');
    const newest = pick(budget, 'newest-first');
    const perReplay = stable.map(
      (r) => r.tally.cost / pick(budget, 'whole', r.conversation).find((w) => w.summarizer === r.summarizer)!.tally.cost,
    );
    const headlines: Headline[] = [
      {
        label: `P8 ${kib}: stable cost / whole history, cached (${reference})`,
        ratio: one(sum(pick(budget, 'stable', reference), (t) => t.cost) / sum(pick(budget, 'whole', reference), (t) => t.cost)),
        goal: { op: '<=', target: goals[budget]! },
      },
      {
        label: `P8 ${kib}: stable cost / whole history, all replays`,
        ratio: one(sum(stable, (t) => t.cost) / sum(pick(budget, 'whole'), (t) => t.cost)),
        goal: null,
      },
      {
        label: `P8 ${kib}: worst replay, stable cost / whole history`,
        ratio: one(Math.max(...perReplay)),
        goal: { op: '<=', target: 1.0 },
      },
      {
        label: `P8 ${kib}: today's newest-first cost / whole history (${reference})`,
        ratio: one(sum(pick(budget, 'newest-first', reference), (t) => t.cost) / sum(pick(budget, 'whole', reference), (t) => t.cost)),
        goal: null,
      },
      {
        label: `P8 ${kib}: stable cache-hit turns / turns, all replays`,
        ratio: one(sum(stable, (t) => t.hits) / sum(stable, (t) => t.turns - 1)),
        goal: { op: '>=', target: 0.85 },
      },
      // Printed, no goal: it counted user messages only, blind to the replies and to recency; P12 measures what a
      // request carries (facts, by age) instead.
      {
        label: `P8 ${kib}: verbatim user messages in the last request, stable / newest-first`,
        ratio: one(sum(stable, (t) => t.lastUserMessages) / sum(newest, (t) => t.lastUserMessages)),
        goal: null,
      },
      {
        label: `P8 ${kib}: verbatim user messages over all requests, stable / newest-first`,
        ratio: one(sum(stable, (t) => t.allUserMessages) / sum(newest, (t) => t.allUserMessages)),
        goal: null,
      },
      {
        label: `P8 ${kib}: summaries shown without a valid binding`,
        ratio: one(sum(stable, (t) => t.unbound) + sum(newest, (t) => t.unbound)),
        goal: { op: '<=', target: 0 },
      },
    ];
    result.headlines.push(...headlines);
    const over = sum([...stable, ...newest], (t) => t.overBudget);
    if (over > 0) throw new Error(`P8: ${over} projections exceeded their budget`);
  }
  result.notes.push(
    `Prices (src/projection/cache.ts): cache read ${CACHE_PRICES.read}x, cache write ${CACHE_PRICES.write}x, uncached ${CACHE_PRICES.uncached}x; sizes in UTF-8 bytes of each message's JSON. ` +
      'A request reads the longest prefix an earlier request wrote at a breakpoint; the adapter puts one breakpoint at the end of the history (all three ways).',
    `Turn pace ${turnMs} ms between a stored reply and the next request; stand-in model ${MODEL_MS} ms a summary. ` +
      `Figures sum both summarizers; the cost goal is held on ${reference} (the ~150-pair replay the issue priced), the other goals on all replays; the worst-replay headline takes the worst single replay.`,
  );
  return result;
}

/** One conversation, turn by turn: per budget and strategy, what the requests cost. */
async function replay(pool: import('pg').Pool, thread: Thread, turnMs: number): Promise<Map<number, Map<Strategy, Tally>>> {
  const {
    rows: [c],
  } = await pool.query<{ id: string }>(`insert into sourcebound.conversations (scope) values ('bench') returning id`);
  const conversationId = c!.id;
  const caches = new Map<string, PromptCache>();
  const tallies = new Map(BUDGETS.map((b) => [b, new Map(STRATEGIES.map((s) => [s, newTally()]))]));
  const wholeItems: PairItem[] = [];
  const wholeCache = new PromptCache();
  const wholeTally = newTally();
  for (let t = 0; t < thread.pairs.length; t++) {
    const next: MessageParam = { role: 'user', content: thread.pairs[t]!.user };
    // The whole history: every pair so far, raw.
    const whole = wholeCache.price([...toAnthropicMessages({ items: wholeItems, omitted: [] }), next]);
    account(wholeTally, whole, wholeItems.length, null, 0, Infinity);
    for (const budget of BUDGETS) {
      for (const strategy of ['newest-first', 'stable'] as const) {
        const p = await projectConversationHistory({ pool, conversationId, scope: 'bench', budgetBytes: budget, layout: strategy });
        const key = `${budget}:${strategy}`;
        if (!caches.has(key)) caches.set(key, new PromptCache());
        const priced = caches.get(key)!.price([...toAnthropicMessages(p), next]);
        account(tallies.get(budget)!.get(strategy)!, priced, userMessages(p), p, await unbound(pool, conversationId, p), budget);
      }
    }
    // The reply completes: the pair is stored as an app stores it.
    await writePair(pool, conversationId, thread.pairs[t]!);
    wholeItems.push({
      kind: 'pair',
      pairIndex: t,
      runId: '',
      userMessageId: '',
      assistantMessageId: '',
      userText: thread.pairs[t]!.user,
      assistantText: thread.pairs[t]!.assistant,
    });
    await new Promise((r) => setTimeout(r, turnMs));
  }
  for (const budget of BUDGETS) tallies.get(budget)!.set('whole', wholeTally);
  return tallies;
}

function account(
  tally: Tally,
  priced: ReturnType<PromptCache['price']>,
  users: number,
  p: ConversationProjection | null,
  unboundItems: number,
  budget: number,
): void {
  tally.turns += 1;
  tally.hits += priced.extendsPrevious ? 1 : 0;
  tally.bytes += priced.bytes;
  tally.cost += priced.cost;
  tally.lastUserMessages = users;
  tally.allUserMessages += users;
  tally.summariesShown += p === null ? 0 : p.items.filter((i) => i.kind === 'summary').length;
  tally.unbound += unboundItems;
  if (p !== null && p.bytes > budget) tally.overBudget += 1;
}

function userMessages(p: ConversationProjection): number {
  return p.items.reduce((n, i) => n + (i.kind === 'pair' ? 1 : i.userMessages.length), 0);
}

/** Summary items whose record's ids and hash do not match the pairs as they are now. */
async function unbound(pool: import('pg').Pool, conversationId: string, p: ConversationProjection): Promise<number> {
  let n = 0;
  for (const item of p.items) {
    if (item.kind !== 'summary') continue;
    const { rows: source } = await pool.query<SourcePair>(
      `select user_message_id as "userMessageId", user_text as "userText", assistant_message_id as "assistantMessageId", assistant_text as "assistantText"
       from sourcebound.eligible_pairs where conversation_id = $1 and pair_index between $2 and $3 order by pair_index`,
      [conversationId, item.fromPair, item.toPair],
    );
    const {
      rows: [record],
    } = await pool.query<{ ids: string[]; hash: string; status: string }>(
      'select source_message_ids::text[] as ids, source_hash as hash, status from sourcebound.conversation_summaries where id = $1',
      [item.recordId],
    );
    const holds =
      record !== undefined &&
      record.status === 'completed' &&
      source.length === 10 &&
      JSON.stringify(record.ids) === JSON.stringify(sourceMessageIds(source)) &&
      record.hash === sourceHash(source) &&
      item.toPair < p.pairCount - 20;
    if (!holds) n += 1;
  }
  return n;
}

async function writePair(pool: import('pg').Pool, conversationId: string, pair: { user: string; assistant: string }): Promise<void> {
  const client = await pool.connect();
  try {
    await client.query('begin');
    const {
      rows: [run],
    } = await client.query<{ id: string }>(`insert into sourcebound.runs (conversation_id, status) values ($1, 'running') returning id`, [
      conversationId,
    ]);
    await client.query(`insert into sourcebound.messages (conversation_id, run_id, role, content) values ($1, $2, 'user', $3)`, [
      conversationId,
      run!.id,
      pair.user,
    ]);
    await client.query(
      `insert into sourcebound.messages (conversation_id, run_id, role, content, status) values ($1, $2, 'assistant', $3, 'completed')`,
      [conversationId, run!.id, pair.assistant],
    );
    await client.query(`update sourcebound.runs set status = 'completed' where id = $1`, [run!.id]);
    await client.query('commit');
  } catch (error) {
    await client.query('rollback').catch(() => {});
    throw error;
  } finally {
    client.release();
  }
}
