import type pg from 'pg';
import { compactConversation, type CompactionContext, type CompactionReport } from '../../src/conversation/compact.ts';
import { createGateway, createOfflineSummarizer } from '../../src/gateway/index.ts';
import { silentLogger } from '../../src/support/logger.ts';
import { conversationPairCountRead } from '../../src/db/queries/projection.ts';
import { projectConversationHistory } from '../../src/projection/index.ts';
import { ConversationReader } from '../../src/projection/reader.ts';
import type { ConversationProjection } from '../../src/projection/types.ts';

/**
 * Conversation-integrity helpers: compaction through the real code path
 * (claim, gateway, commit) with the offline summarizer, so no network is
 * involved and every run is deterministic.
 */
export function offlineContext(pool: pg.Pool, overrides: Partial<CompactionContext> = {}): CompactionContext {
  return {
    pool,
    summarizer: createGateway({ summarizer: createOfflineSummarizer({ maxChars: 6000 }), defaults: { maxChars: 6000, deadlineMs: 5000 } }),
    logger: silentLogger,
    workerId: 'integrity-test',
    leaseMs: 60_000,
    retryDelays: { deferMs: 0, afterSpentMs: 0 },
    ...overrides,
  };
}

export function compactOffline(pool: pg.Pool, conversationId: string): Promise<CompactionReport> {
  return compactConversation(offlineContext(pool), conversationId);
}

/**
 * Long, many-sentence replies: the offline digest of ten of them (capped at
 * 6,000 characters) is smaller than the ten raw pairs, so projection uses it.
 */
export const longText = (i: number) => ({
  user: `Question ${i}: what happened to fund F${i}?`,
  assistant: Array.from(
    { length: 12 },
    (_, s) =>
      `Fund F${i} sentence ${s} reports a NAV of ${100 + i}.${s}5 on 2026-0${(s % 9) + 1}-1${i % 10} with plenty of filler words around it.`,
  ).join(' '),
});

/** A projection with everything in budget, newest-first (no layout kept between calls). */
export function projectAll(
  pool: pg.Pool,
  conversationId: string,
  scope = 'tenant-a',
  budgetBytes = 10_000_000,
): Promise<ConversationProjection> {
  return projectConversationHistory({ pool, conversationId, scope, budgetBytes, layout: 'newest-first' });
}

/** Which ranges a projection shows as summaries (fromPair), and which pairs raw. */
export function shape(p: ConversationProjection): { summaries: number[]; raw: number[] } {
  return {
    summaries: p.items.flatMap((i) => (i.kind === 'summary' ? [i.fromPair] : [])),
    raw: p.items.flatMap((i) => (i.kind === 'pair' ? [i.pairIndex] : [])),
  };
}

/**
 * Per range, the projection's verdict on its summary now (binding, version, plannable, smaller than its
 * originals): which ranges may show one, and why each other may not. What a layout then shows of them
 * depends on the budget (a history that fits is sent raw).
 */
export async function summaryVerdicts(
  pool: pg.Pool,
  conversationId: string,
  scope = 'tenant-a',
): Promise<{ usable: number[]; reasons: Map<number, string> }> {
  const count = (await conversationPairCountRead(pool, conversationId, scope)) ?? 0;
  const reader = new ConversationReader(pool, { conversationId, scope, count, budgetBytes: 100_000_000, onRead: undefined });
  const usable: number[] = [];
  const reasons = new Map<number, string>();
  for (let k = 0; k * 10 < count; k++) {
    const v = await reader.summary(k);
    if (v === 'changed') throw new Error('pairs changed during the read');
    if (v.kind === 'usable') usable.push(k * 10);
    else reasons.set(k * 10, v.reason);
  }
  return { usable, reasons };
}
