import type pg from 'pg';
import type { Thread } from '../../src/cli/demo-threads.ts';
import {
  BREAKPOINT_BYTES,
  itemBytes,
  messagesBytes,
  projectConversationHistory,
  toAnthropicMessages,
  type MessageParam,
  type OmittedSpan,
  type PairItem,
  type ProjectionItem,
} from '../../src/projection/index.ts';
import { addRecall, emptyRecall, pairFacts, recallOf, type Recall } from './facts.ts';
import { PromptCache } from './prompt-cache.ts';
import { writeOfflineSummary, writePair } from './replay.ts';

/**
 * P12's replay: one real thread turn by turn in a new conversation, as
 * bench/lib/replay.ts does it. At turn t the history holds pairs 0..t-1; it
 * is projected at every budget in both layouts, and built two more ways: raw
 * newest-first truncation (the newest pairs raw, stopping at the first that
 * does not fit) and the whole history; then pair t is written, and the
 * summary of every range that became plannable (older than the newest 20
 * pairs) arrives at once, written as a completed record from the offline
 * summarizer. One more request follows the last pair: its history is the
 * whole conversation, and what it carries is the recall figure.
 *
 * Every request but that last one is priced with prompt caching
 * (prompt-cache.ts) beside the whole history. With `gaps`, time is simulated:
 * `turnMs` between turns and a pause of `gaps.ms` before every `gaps.every`-th
 * turn; the price model expires entries after `ttlSeconds`, and the
 * projection gets the same clock (`now`) and lifetime (`cacheTtlSeconds`).
 */

export type Strategy = 'stable' | 'newest-first' | 'truncation' | 'whole';
export const STRATEGIES: readonly Strategy[] = ['stable', 'newest-first', 'truncation', 'whole'];

export interface RecallReplayArgs {
  budgets: readonly number[];
  /** Simulated pauses (and a clock for the projection and the price model); null: no clock at all. */
  gaps: { every: number; ms: number } | null;
  turnMs: number;
  ttlSeconds: number;
  /** Recall is also taken every this many turns (requests whose history exceeds the budget), beside the last request's. */
  sampleEvery: number;
}

export interface Tally {
  /** The last request's (its history is the whole conversation). */
  final: Recall;
  /** Whether the whole conversation exceeds the budget at the last request (else every layout may carry it all). */
  finalOver: boolean;
  /** Pooled over the sampled requests whose history exceeds the budget. */
  sampled: Recall;
  /** History bytes / budget of every request whose whole history exceeds the budget. */
  fills: number[];
  cost: number;
  /** Requests that read the whole previous history from the cache, of `hitTurns` (turns after the first, not after a pause). */
  hits: number;
  hitTurns: number;
  /** Verbatim user messages in the last request's history (raw pairs and those beside summaries). */
  finalUserMessages: number;
  overBudget: number;
}

export interface RecallReplay {
  conversation: string;
  pairs: number;
  /** (pair, fact) entries of the conversation, and facts its own pair's text did not carry (left out). */
  facts: number;
  uncheckable: number;
  /** Per `${budget} ${strategy}` (`whole` is priced the same at every budget; its recall is sampled where the budget's others are). */
  tallies: Map<string, Tally>;
}

const newTally = (): Tally => ({
  final: emptyRecall(),
  finalOver: false,
  sampled: emptyRecall(),
  fills: [],
  cost: 0,
  hits: 0,
  hitTurns: 0,
  finalUserMessages: 0,
  overBudget: 0,
});

/** Simulated time starts here (any fixed instant: the replay must not depend on the wall clock). */
const EPOCH_MS = Date.UTC(2025, 0, 1);

export async function replayForRecall(pool: pg.Pool, thread: Thread, scope: string, args: RecallReplayArgs): Promise<RecallReplay> {
  const n = thread.pairs.length;
  const factsByPair = thread.pairs.map(pairFacts);
  const facts = factsByPair.map((f) => f.facts);
  const {
    rows: [conversation],
  } = await pool.query<{ id: string }>(`insert into sourcebound.conversations (scope) values ($1) returning id`, [scope]);
  const conversationId = conversation!.id;

  let clock = EPOCH_MS;
  const clocked = args.gaps === null ? {} : { now: () => clock, cacheTtlSeconds: args.ttlSeconds };
  const newCache = () => new PromptCache(args.gaps === null ? {} : { now: () => clock, ttlMs: args.ttlSeconds * 1000 });
  const tallies = new Map<string, Tally>();
  const caches = new Map<string, PromptCache>();
  for (const b of args.budgets) {
    for (const s of STRATEGIES) {
      tallies.set(`${b} ${s}`, newTally());
      caches.set(`${b} ${s}`, newCache());
    }
  }

  const wholeItems: PairItem[] = [];
  const wholeSizes: number[] = [];
  let summarized = 0;
  for (let t = 0; t <= n; t++) {
    let afterPause = false;
    if (t > 0) {
      clock += args.turnMs;
      if (args.gaps !== null && t % args.gaps.every === 0) {
        clock += args.gaps.ms;
        afterPause = true;
      }
    }
    const last = t === n;
    const next: MessageParam | null = last ? null : { role: 'user', content: thread.pairs[t]!.user };
    const wholeBytes = historyBytes(wholeSizes);
    const sampled = !last && t % args.sampleEvery === 0;
    const history = facts.slice(0, t);

    const account = (key: string, items: ProjectionItem[], omitted: OmittedSpan[], bytes: number, budget: number) => {
      const tally = tallies.get(key)!;
      if (bytes > budget) tally.overBudget += 1;
      if (wholeBytes > budget) tally.fills.push(bytes / budget);
      if (last) {
        tally.final = recallOf(history, items);
        tally.finalOver = wholeBytes > budget;
        tally.finalUserMessages = items.reduce((k, it) => k + (it.kind === 'pair' ? 1 : it.userMessages.length), 0);
      } else if (sampled && wholeBytes > budget) {
        addRecall(tally.sampled, recallOf(history, items));
      }
      if (next !== null) {
        const priced = caches.get(key)!.price([...toAnthropicMessages({ items, omitted }), next]);
        tally.cost += priced.cost;
        if (t > 0 && !afterPause) {
          tally.hitTurns += 1;
          tally.hits += priced.extendsPrevious ? 1 : 0;
        }
      }
    };

    for (const budget of args.budgets) {
      for (const layout of ['stable', 'newest-first'] as const) {
        const p = await projectConversationHistory({ pool, conversationId, scope, budgetBytes: budget, layout, ...clocked });
        account(`${budget} ${layout}`, p.items, p.omitted, p.bytes, budget);
      }
      const kept = truncation(wholeItems, wholeSizes, budget);
      account(`${budget} truncation`, kept.items, [], kept.bytes, budget);
      // The whole history is over every budget it exceeds (its overBudget and fill say by how much, not a fault).
      account(`${budget} whole`, wholeItems, [], wholeBytes, budget);
    }
    if (last) break;

    await writePair(pool, conversationId, thread.pairs[t]!);
    const item: PairItem = {
      kind: 'pair',
      pairIndex: t,
      runId: '',
      userMessageId: '',
      assistantMessageId: '',
      userText: thread.pairs[t]!.user,
      assistantText: thread.pairs[t]!.assistant,
    };
    wholeItems.push(item);
    wholeSizes.push(itemBytes(item));
    while (summarized * 10 + 9 < t + 1 - 20) await writeOfflineSummary(pool, conversationId, scope, summarized++ * 10);
  }
  // The byte arithmetic above is the adapter's (anthropic.ts): checked once on the whole conversation.
  const measured = messagesBytes(toAnthropicMessages({ items: wholeItems, omitted: [] }));
  if (measured !== historyBytes(wholeSizes))
    throw new Error(`P12: whole history measured ${measured} bytes, computed ${historyBytes(wholeSizes)}`);
  return {
    conversation: thread.id,
    pairs: n,
    facts: facts.reduce((k, f) => k + f.length, 0),
    uncheckable: factsByPair.reduce((k, f) => k + f.uncheckable, 0),
    tallies,
  };
}

/** Bytes of pairs raw as the adapter sends them: "[" + items + "]" and the end-of-history breakpoint; 0 for none. */
function historyBytes(sizes: readonly number[]): number {
  return sizes.length === 0 ? 0 : 1 + sizes.reduce((a, b) => a + b, 0) + BREAKPOINT_BYTES;
}

/** Raw newest-first truncation: the newest pairs, as many as fit, stopping at the first that does not (no note: an app that truncates says nothing). */
function truncation(items: readonly PairItem[], sizes: readonly number[], budget: number): { items: PairItem[]; bytes: number } {
  let from = items.length;
  let used = 0;
  while (from > 0 && 1 + used + sizes[from - 1]! + BREAKPOINT_BYTES <= budget) used += sizes[--from]!;
  const kept = items.slice(from);
  return { items: kept, bytes: historyBytes(sizes.slice(from)) };
}
