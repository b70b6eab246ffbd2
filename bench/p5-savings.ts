import { compactConversation } from '../src/conversation/compact.ts';
import { writeThread } from '../src/cli/demo-threads.ts';
import { createOfflineSummarizer, OFFLINE_MODEL } from '../src/gateway/offline.ts';
import type { Summarizer } from '../src/support/summary-contract.ts';
import { silentLogger } from '../src/support/logger.ts';
import {
  messagesBytes,
  projectConversationHistory,
  toAnthropicMessages,
  type ConversationProjection,
  type PairItem,
} from '../src/projection/index.ts';
import type { BenchContext } from './lib/context.ts';
import { dataset } from './lib/data.ts';
import type { BenchResult } from './lib/report.ts';
import { benchPool } from './lib/server.ts';
import { spread } from './lib/stats.ts';

/**
 * P5 savings on real conversations (oasst1 threads): the bytes of the raw
 * history (every pair as Messages API messages, the adapter's own JSON) versus
 * the bytes of the projection at the default 64 KiB budget after compaction
 * with the offline summarizer (compactConversation run in-process until
 * settled), and what compaction cost: the bytes of assistant text sent to the
 * summarizer for completed ranges, and the summaries it returned. Beside it,
 * the floor: the same projection with every summary empty (one character,
 * its label kept), so the table shows how much of the possible saving the
 * offline summaries take.
 * Deterministic (the offline summarizer has no randomness), so one repetition.
 */
const BUDGET = 64 * 1024;
const SUMMARY_MAX_CHARS = 6000; // SOURCEBOUND_SUMMARY_MAX_CHARS default

export async function benchSavings(ctx: BenchContext): Promise<BenchResult> {
  const { threads, source } = dataset();
  const url = await ctx.server.freshDatabase('p5_savings');
  const pool = benchPool(url, 4);
  const result: BenchResult = {
    id: 'P5',
    title: 'savings on real conversations',
    status: 'ok',
    seconds: 0,
    params: { budgetBytes: BUDGET, summarizer: `offline (${OFFLINE_MODEL})`, summaryMaxChars: SUMMARY_MAX_CHARS, threads: threads.length },
    figures: [],
    headlines: [],
    notes: [`Data: ${source}.`],
  };
  const utf8 = (s: string) => Buffer.byteLength(s, 'utf8');
  try {
    const t0 = performance.now();
    const written: { id: string; pairs: number; raw: number }[] = [];
    for (const thread of threads) {
      const { conversationId } = await writeThread(pool, thread, 'bench');
      written.push({ id: conversationId, pairs: thread.pairs.length, raw: rawBytes(thread.pairs) });
    }
    // No worker runs here: the jobs the triggers added are not needed.
    await pool.query('delete from graphile_worker._private_jobs');
    ctx.log(`P5: ${threads.length} threads written in ${((performance.now() - t0) / 1000).toFixed(1)} s`);

    const offline = createOfflineSummarizer({ maxChars: SUMMARY_MAX_CHARS });
    const calls: { inputBytes: number; outputBytes: number; ok: boolean }[] = [];
    const counting: Summarizer = {
      model: offline.model,
      async summarize(request) {
        const outcome = await offline.summarize(request);
        calls.push({
          inputBytes: request.items.reduce((n, it) => n + utf8(it.text), 0),
          outputBytes: outcome.kind === 'ok' ? utf8(outcome.text) : 0,
          ok: outcome.kind === 'ok',
        });
        return outcome;
      },
    };
    const compaction = { pool, summarizer: counting, logger: silentLogger, workerId: 'bench-p5', leaseMs: 60_000 };
    const t1 = performance.now();
    let completed = 0;
    let unsettled = 0;
    for (const c of written) {
      // Until settled: a pass that completes nothing new has nothing left to do (bounded: 5 passes).
      for (let pass = 0; pass < 5; pass++) {
        const report = await compactConversation(compaction, c.id);
        const done = report.ranges.filter((r) => r.result === 'completed').length;
        completed += done;
        if (done === 0) {
          unsettled += report.ranges.filter((r) => r.result !== 'already_completed').length;
          break;
        }
      }
    }
    const compactSeconds = (performance.now() - t1) / 1000;

    const projections: (ConversationProjection & { raw: number })[] = [];
    for (const c of written) {
      projections.push({
        ...(await projectConversationHistory({ pool, conversationId: c.id, scope: 'bench', budgetBytes: BUDGET })),
        raw: c.raw,
      });
    }
    // The floor: every range summarized by an empty summary (one character: a record's text cannot
    // be empty), projected the same way. A job visits only marked ranges, and compaction cleared
    // every mark, so a second summarizer would make nothing (the floor then equalled the
    // projection): each completed record gets a twin with the same identity, from another model,
    // completed later, which the projection prefers (binding.ts byPreference). The stored layouts
    // are hints that only cause a rewrite when gone.
    await pool.query('delete from sourcebound.projection_layouts');
    const { rowCount: twins } = await pool.query(
      `insert into sourcebound.conversation_summaries
         (conversation_id, scope, from_pair, to_pair, source_message_ids, source_hash, hash_version, model, prompt_version,
          status, summary, attempts_spent, completed_at)
       select conversation_id, scope, from_pair, to_pair, source_message_ids, source_hash, hash_version, 'bench/empty-summary', prompt_version,
              'completed', '.', 1, completed_at + interval '1 second'
       from sourcebound.conversation_summaries where status = 'completed'`,
    );
    if (twins !== completed) throw new Error(`P5: ${twins} empty twins for ${completed} completed ranges`);
    const floors = new Map<string, number>();
    for (const c of written) {
      floors.set(c.id, (await projectConversationHistory({ pool, conversationId: c.id, scope: 'bench', budgetBytes: BUDGET })).bytes);
    }

    const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
    const long = projections.filter((p) => p.pairCount >= 30);
    const floorLong = sum(long.map((p) => floors.get(p.conversationId)!));
    const okCalls = calls.filter((c) => c.ok);
    const one = (x: number) => spread([x]);

    result.figures.push(
      {
        label: `raw history, all ${projections.length} conversations (${sum(projections.map((p) => p.pairCount))} pairs)`,
        unit: 'bytes',
        value: one(sum(projections.map((p) => p.raw))),
      },
      { label: 'projection at 64 KiB, all conversations', unit: 'bytes', value: one(sum(projections.map((p) => p.bytes))) },
      {
        label: `raw history, ${long.length} conversations with >= 30 pairs (${sum(long.map((p) => p.pairCount))} pairs)`,
        unit: 'bytes',
        value: one(sum(long.map((p) => p.raw))),
      },
      { label: 'projection at 64 KiB, conversations with >= 30 pairs', unit: 'bytes', value: one(sum(long.map((p) => p.bytes))) },
      {
        label: 'projected / raw per conversation with >= 30 pairs (n = conversations)',
        unit: 'ratio',
        value: spread(long.map((p) => p.bytes / p.raw)),
      },
      {
        label: `summarizer input, ${okCalls.length} completed ranges (assistant text)`,
        unit: 'bytes',
        value: one(sum(okCalls.map((c) => c.inputBytes))),
      },
      { label: 'summaries returned for those ranges', unit: 'bytes', value: one(sum(okCalls.map((c) => c.outputBytes))) },
      { label: 'floor: projection at 64 KiB with empty summaries, conversations with >= 30 pairs', unit: 'bytes', value: one(floorLong) },
      { label: 'compaction, in-process, offline summarizer', unit: 's', value: one(compactSeconds) },
    );
    result.headlines.push(
      {
        label: 'P5 projected / raw, conversations with >= 30 pairs',
        ratio: one(sum(long.map((p) => p.bytes)) / sum(long.map((p) => p.raw))),
        goal: null,
      },
      {
        label: 'P5 projected / raw, all conversations',
        ratio: one(sum(projections.map((p) => p.bytes)) / sum(projections.map((p) => p.raw))),
        goal: null,
      },
      {
        label: 'P5 floor (empty summaries) / raw, conversations with >= 30 pairs',
        ratio: one(floorLong / sum(long.map((p) => p.raw))),
        goal: null,
      },
      {
        label: 'P5 saving taken / possible saving (raw - projected) / (raw - floor), >= 30 pairs',
        ratio: one((sum(long.map((p) => p.raw)) - sum(long.map((p) => p.bytes))) / (sum(long.map((p) => p.raw)) - floorLong)),
        goal: null,
      },
      {
        label: 'P5 offline summaries / their input bytes',
        ratio: one(sum(okCalls.map((c) => c.outputBytes)) / sum(okCalls.map((c) => c.inputBytes))),
        goal: { op: '<=', target: 0.3 },
      },
    );
    const summaryItems = sum(projections.map((p) => p.items.filter((i) => i.kind === 'summary').length));
    const omitted = sum(projections.map((p) => p.omitted.reduce((n, s) => n + s.toPair - s.fromPair + 1, 0)));
    const overBudget = projections.filter((p) => p.raw > BUDGET).length;
    const saved = sum(long.map((p) => p.raw - p.bytes));
    result.notes.push(
      `Ranges completed: ${completed} (summarizer calls ${calls.length}, ${okCalls.length} ok); ranges left unsettled: ${unsettled}. ` +
        `The projections use ${summaryItems} summarized ranges; pairs left out for the budget: ${omitted}; raw histories over the 64 KiB budget: ${overBudget}.`,
      `Conversations with >= 30 pairs: ${saved.toLocaleString('en-US')} bytes saved per request, for ${sum(okCalls.map((c) => c.inputBytes)).toLocaleString('en-US')} bytes sent once to the summarizer. ` +
        'Conversations below 30 pairs are projected raw (nothing is planned), so their ratio is 1 unless a history exceeds the budget.',
      "The offline summarizer is extractive: it aims at a quarter of the ten replies' bytes (at least 400, at most 6,000), whole sentences by TextRank. " +
        'The floor is what the projection would be if every summary were empty: the user messages and the labels remain.',
    );
  } finally {
    await pool.end();
  }
  return result;
}

/** The raw history as the adapter would send it: every pair as a user and an assistant message. */
function rawBytes(pairs: readonly { user: string; assistant: string }[]): number {
  const items: PairItem[] = pairs.map((p, i) => ({
    kind: 'pair',
    pairIndex: i,
    runId: '',
    userMessageId: '',
    assistantMessageId: '',
    userText: p.user,
    assistantText: p.assistant,
  }));
  return messagesBytes(toAnthropicMessages({ items, omitted: [] }));
}
