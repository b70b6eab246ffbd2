import type pg from 'pg';
import type { Thread } from '../../src/cli/demo-threads.ts';
import { conversationMaterial } from '../../src/conversation/material.ts';
import { createOfflineSummarizer, OFFLINE_MODEL } from '../../src/gateway/offline.ts';
import { CONVERSATION_PROMPT_VERSION } from '../../src/gateway/prompts.ts';
import { SUMMARY_CHAR_CEILING } from '../../src/support/summary-contract.ts';
import { SOURCE_HASH_VERSION, sourceHash, sourceMessageIds, type SourcePair } from '../../src/conversation/source-hash.ts';
import { projectConversationHistory, toAnthropicMessages, type MessageParam, type PairItem } from '../../src/projection/index.ts';
import { PromptCache } from './prompt-cache.ts';

export type ReplayLayout = 'stable' | 'newest-first';

/**
 * One real thread replayed turn by turn in a new conversation (scope `p8`),
 * as an app that asks the projection before every request: at turn t the
 * history holds pairs 0..t-1, the request is the projection at each budget
 * and layout plus user message t, then pair t is written. A range's summary
 * (the offline summarizer's, written as a completed record) arrives `lag`
 * turns after the range becomes plannable (older than the newest 20 pairs).
 * With `moving`, each request's budget is what a window of that size leaves
 * after the new user message (it moves every turn, as many apps ask).
 * Every request is priced as prompt caching bills it (prompt-cache.ts), and
 * so is sending the whole history (a breakpoint at its end). With `edits`,
 * before the request of each listed turn the user message of the listed pair
 * gets ` (edited)` appended, in the database and in the whole history alike
 * (an app correcting its history in place). Returns, per
 * `${budget} ${layout}`, the replay's cost over the whole history's.
 */
export async function replayThread(
  pool: pg.Pool,
  thread: Thread,
  args: {
    budgets: readonly number[];
    layouts: readonly ReplayLayout[];
    lag: number;
    moving?: boolean;
    edits?: readonly { turn: number; pair: number }[];
  },
): Promise<Map<string, number>> {
  const {
    rows: [conversation],
  } = await pool.query<{ id: string }>(`insert into sourcebound.conversations (scope) values ('p8') returning id`);
  const id = conversation!.id;
  const caches = new Map<string, { cache: PromptCache; cost: number }>();
  const whole = new PromptCache();
  let wholeCost = 0;
  const wholeItems: PairItem[] = [];
  let summarized = 0;
  for (let t = 0; t < thread.pairs.length; t++) {
    for (const { pair } of (args.edits ?? []).filter((e) => e.turn === t && e.pair < t)) {
      await pool.query(
        `update sourcebound.messages set content = content || ' (edited)'
         where id = (select user_message_id from sourcebound.pairs where conversation_id = $1 and pair_index = $2)`,
        [id, pair],
      );
      wholeItems[pair] = { ...wholeItems[pair]!, userText: `${wholeItems[pair]!.userText} (edited)` };
    }
    const next: MessageParam = { role: 'user', content: thread.pairs[t]!.user };
    wholeCost += whole.price([...toAnthropicMessages({ items: wholeItems, omitted: [] }), next]).cost;
    for (const budgetBytes of args.budgets) {
      for (const layout of args.layouts) {
        const key = `${budgetBytes} ${layout}`;
        // `moving`: the budget is what a window of budgetBytes leaves after the new message, as many apps ask.
        const budget = args.moving ? Math.max(0, budgetBytes - Buffer.byteLength(JSON.stringify(next), 'utf8')) : budgetBytes;
        const p = await projectConversationHistory({ pool, conversationId: id, scope: 'p8', budgetBytes: budget, layout });
        const entry = caches.get(key) ?? { cache: new PromptCache(), cost: 0 };
        entry.cost += entry.cache.price([...toAnthropicMessages(p), next]).cost;
        caches.set(key, entry);
      }
    }
    await writePair(pool, id, thread.pairs[t]!);
    wholeItems.push({
      kind: 'pair',
      pairIndex: t,
      runId: '',
      userMessageId: '',
      assistantMessageId: '',
      userText: thread.pairs[t]!.user,
      assistantText: thread.pairs[t]!.assistant,
    });
    while (summarized * 10 + 9 < t + 1 - 20 - args.lag) await writeOfflineSummary(pool, id, 'p8', summarized++ * 10);
  }
  return new Map([...caches].map(([key, { cost }]) => [key, cost / wholeCost]));
}

/** Stores one completed pair as an app does: its run, user message and reply in one transaction. */
export async function writePair(pool: pg.Pool, conversationId: string, pair: { user: string; assistant: string }): Promise<void> {
  const client = await pool.connect();
  try {
    await client.query('begin');
    const {
      rows: [run],
    } = await client.query<{ id: string }>(`insert into sourcebound.runs (conversation_id, status) values ($1, 'running') returning id`, [
      conversationId,
    ]);
    await client.query(
      `insert into sourcebound.messages (conversation_id, run_id, role, content, status) values ($1, $2, 'user', $3, 'completed')`,
      [conversationId, run!.id, pair.user],
    );
    await client.query(
      `insert into sourcebound.messages (conversation_id, run_id, role, content, status) values ($1, $2, 'assistant', $3, 'completed')`,
      [conversationId, run!.id, pair.assistant],
    );
    await client.query(`update sourcebound.runs set status = 'completed' where id = $1`, [run!.id]);
    await client.query('commit');
  } catch (error) {
    await client.query('rollback');
    throw error;
  } finally {
    client.release();
  }
}

const offline = createOfflineSummarizer({ maxChars: SUMMARY_CHAR_CEILING });

/**
 * A completed record for the ten pairs from `fromPair`: the offline
 * summarizer's summary, bound to their ids and hash, with the model, prompt
 * and hash versions of this build (never written out here: they change).
 */
export async function writeOfflineSummary(pool: pg.Pool, conversationId: string, scope: string, fromPair: number): Promise<void> {
  const { rows: source } = await pool.query<SourcePair>(
    `select user_message_id as "userMessageId", user_text as "userText", assistant_message_id as "assistantMessageId", assistant_text as "assistantText"
     from sourcebound.eligible_pairs where conversation_id = $1 and pair_index between $2 and $3 order by pair_index`,
    [conversationId, fromPair, fromPair + 9],
  );
  // The material as the worker sends it (replies named by pair number under the current prompt).
  const items = conversationMaterial(source, fromPair, CONVERSATION_PROMPT_VERSION);
  const outcome = await offline.summarize({ promptVersion: CONVERSATION_PROMPT_VERSION, items });
  if (outcome.kind !== 'ok')
    throw new Error(`offline summary of pairs ${fromPair}-${fromPair + 9}: ${outcome.kind} ${'reason' in outcome ? outcome.reason : ''}`);
  await pool.query(
    `insert into sourcebound.conversation_summaries (conversation_id, scope, from_pair, to_pair, source_message_ids, source_hash, hash_version, model, prompt_version, status, summary, completed_at)
     values ($1, $2, $3, $4, $5::uuid[], $6, $7, $8, $9, 'completed', $10, now())`,
    [
      conversationId,
      scope,
      fromPair,
      fromPair + 9,
      sourceMessageIds(source),
      sourceHash(source),
      SOURCE_HASH_VERSION,
      OFFLINE_MODEL,
      CONVERSATION_PROMPT_VERSION,
      outcome.text,
    ],
  );
}
