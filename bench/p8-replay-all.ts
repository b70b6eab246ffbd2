/**
 * P8's price check on many real threads: the longest `--threads` threads of
 * the shared data (default 50), each replayed turn by turn at every
 * `--budgets` budget in both layouts, the projection asked before every
 * request, a summary (the offline summarizer's, written as a completed
 * record) arriving `--lag` turns after its range becomes plannable, and every
 * request priced as prompt caching bills it (bench/lib/prompt-cache.ts)
 * against sending the whole history. Prints per budget the mean and worst
 * cost / whole and how many replays cost more than the whole history. The
 * README's figures for replays that cost more than sending everything come
 * from it. Not part of `npm run bench` (no goal; minutes of runtime).
 *
 *   DATABASE_URL=postgres://... node --import tsx bench/p8-replay-all.ts [--threads 50] [--budgets 32768,65536] [--lag 3]
 */
import { parseArgs } from 'node:util';
import pg from 'pg';
import { withDatabase } from '../src/db/database.ts';
import { migrateDatabase } from '../src/db/migrate.ts';
import { extractiveSummary } from '../src/gateway/offline.ts';
import { sourceHash, sourceMessageIds, type SourcePair } from '../src/hash.ts';
import { silentLogger } from '../src/logger.ts';
import { projectConversationHistory, toAnthropicMessages, type MessageParam, type PairItem } from '../src/projection/index.ts';
import { dataset } from './lib/data.ts';
import { PromptCache } from './lib/prompt-cache.ts';

const { values } = parseArgs({ options: { threads: { type: 'string', default: '50' }, budgets: { type: 'string', default: '8192,16384,32768,65536' }, lag: { type: 'string', default: '3' } } });
const url = process.env.DATABASE_URL;
if (!url) {
  process.stderr.write('p8-replay-all: set DATABASE_URL (a server where a scratch database may be created)\n');
  process.exit(2);
}
const budgets = values.budgets.split(',').map(Number);
const lag = Number(values.lag);
const name = 'sourcebound_p8_replay_all';

const admin = new pg.Client({ connectionString: url });
await admin.connect();
await admin.query(`drop database if exists ${name} with (force)`);
await admin.query(`create database ${name}`);
await migrateDatabase(withDatabase(url, name), silentLogger);
const pool = new pg.Pool({ connectionString: withDatabase(url, name), max: 4 });

const threads = [...dataset().threads].sort((a, b) => b.pairs.length - a.pairs.length || a.id.localeCompare(b.id)).slice(0, Number(values.threads));
const costs = new Map<string, number[]>();
try {
  for (const thread of threads) {
    const { rows: [conversation] } = await pool.query<{ id: string }>(`insert into sourcebound.conversations (scope) values ('p8') returning id`);
    const id = conversation!.id;
    const caches = new Map<string, { cache: PromptCache; cost: number }>();
    const whole = new PromptCache();
    let wholeCost = 0;
    const wholeItems: PairItem[] = [];
    let summarized = 0;
    for (let t = 0; t < thread.pairs.length; t++) {
      const next: MessageParam = { role: 'user', content: thread.pairs[t]!.user };
      wholeCost += whole.price([...toAnthropicMessages({ items: wholeItems, omitted: [] }), next]).cost;
      for (const budgetBytes of budgets) {
        for (const layout of ['stable', 'newest-first'] as const) {
          const key = `${budgetBytes} ${layout}`;
          const p = await projectConversationHistory({ pool, conversationId: id, scope: 'p8', budgetBytes, layout });
          const entry = caches.get(key) ?? { cache: new PromptCache(), cost: 0 };
          entry.cost += entry.cache.price([...toAnthropicMessages(p), next]).cost;
          caches.set(key, entry);
        }
      }
      await writePair(id, thread.pairs[t]!);
      wholeItems.push({ kind: 'pair', pairIndex: t, runId: '', userMessageId: '', assistantMessageId: '', userText: thread.pairs[t]!.user, assistantText: thread.pairs[t]!.assistant });
      // A range's summary arrives `lag` turns after it becomes plannable (its pairs older than the newest 20).
      while (summarized * 10 + 9 < t + 1 - 20 - lag) await summarize(id, (summarized++) * 10);
    }
    for (const [key, { cost }] of caches) costs.set(key, [...(costs.get(key) ?? []), cost / wholeCost]);
  }
} finally {
  await pool.end();
  await admin.query(`drop database if exists ${name} with (force)`);
  await admin.end();
}

process.stdout.write(`${threads.length} threads (${threads.at(-1)?.pairs.length}-${threads[0]?.pairs.length} pairs), summaries ${lag} turns after plannable; cost with caching / whole history, cached\n\n`);
process.stdout.write('| budget | layout | mean | worst | replays > 1 |\n|---|---|---:|---:|---:|\n');
for (const [key, list] of costs) {
  const [budget, layout] = key.split(' ');
  const mean = list.reduce((a, b) => a + b, 0) / list.length;
  process.stdout.write(`| ${budget} | ${layout} | ${mean.toFixed(3)} | ${Math.max(...list).toFixed(3)} | ${list.filter((c) => c > 1.0001).length} |\n`);
}

async function writePair(conversationId: string, pair: { user: string; assistant: string }): Promise<void> {
  const client = await pool.connect();
  try {
    await client.query('begin');
    const { rows: [run] } = await client.query<{ id: string }>(`insert into sourcebound.runs (conversation_id, status) values ($1, 'running') returning id`, [conversationId]);
    await client.query(`insert into sourcebound.messages (conversation_id, run_id, role, content, status) values ($1, $2, 'user', $3, 'completed')`, [conversationId, run!.id, pair.user]);
    await client.query(`insert into sourcebound.messages (conversation_id, run_id, role, content, status) values ($1, $2, 'assistant', $3, 'completed')`, [conversationId, run!.id, pair.assistant]);
    await client.query(`update sourcebound.runs set status = 'completed' where id = $1`, [run!.id]);
    await client.query('commit');
  } catch (error) {
    await client.query('rollback');
    throw error;
  } finally {
    client.release();
  }
}

/** A completed record for the ten pairs from `fromPair`: the offline summarizer's summary, bound to their ids and hash. */
async function summarize(conversationId: string, fromPair: number): Promise<void> {
  const { rows: source } = await pool.query<SourcePair>(
    `select user_message_id as "userMessageId", user_text as "userText", assistant_message_id as "assistantMessageId", assistant_text as "assistantText"
     from sourcebound.eligible_pairs where conversation_id = $1 and pair_index between $2 and $3 order by pair_index`, [conversationId, fromPair, fromPair + 9]);
  const summary = extractiveSummary(source.map((p) => ({ id: p.assistantMessageId, text: p.assistantText })), 6000) ?? 'summary';
  await pool.query(
    `insert into sourcebound.conversation_summaries (conversation_id, scope, from_pair, to_pair, source_message_ids, source_hash, hash_version, model, prompt_version, status, summary, completed_at)
     values ($1, 'p8', $2, $3, $4::uuid[], $5, 1, 'sourcebound/extractive@2', 'conversation-compaction@4', 'completed', $6, now())`,
    [conversationId, fromPair, fromPair + 9, sourceMessageIds(source), sourceHash(source), summary]);
}
