import type pg from 'pg';
import { pairsDriftRead, pairsRebuild, type PairDriftRow } from '../db/queries/pairs.ts';
import { conversationScopeRead } from '../db/queries/summaries.ts';
import { inTransaction } from '../db/transaction.ts';
import { ConversationNotFoundError } from '../projection/projection-errors.ts';

export interface RepairReport {
  conversationId: string;
  scope: string;
  /** What pairs_drift() reported before the rebuild (empty: the index was exact, nothing was written). */
  before: PairDriftRow[];
  /** What it reports after (always empty unless the rebuild itself is wrong). */
  after: PairDriftRow[];
}

/**
 * `sourcebound repair`: rebuilds a conversation's pair index from the one
 * definition of an eligible pair, in one transaction under the
 * conversation's pair lock (so no trigger interleaves). Summaries whose
 * source the rebuild changed no longer bind (projection re-checks every
 * binding) and their ranges are enqueued again. Safe to run at any time:
 * an exact index is left untouched.
 * @throws ConversationNotFoundError when no conversation has this id in this scope.
 */
export async function repairConversation(pool: pg.Pool, conversationId: string, scope: string): Promise<RepairReport> {
  return inTransaction(pool, async (client) => {
    const actual = await conversationScopeRead(client, conversationId);
    if (actual === null || actual !== scope) throw new ConversationNotFoundError(conversationId, scope);
    const before = await pairsDriftRead(client, conversationId);
    if (before.length > 0) await pairsRebuild(client, conversationId);
    const after = await pairsDriftRead(client, conversationId);
    return { conversationId, scope, before, after };
  });
}

/** "missing 1, wrong index 3": drift rows counted by kind, in a fixed order, for people. */
export function describeDrift(rows: readonly PairDriftRow[]): string {
  const kinds: PairDriftRow['problem'][] = ['missing', 'extra', 'wrong_index', 'wrong_messages'];
  return kinds
    .map((kind) => [kind.replace('_', ' '), rows.filter((r) => r.problem === kind).length] as const)
    .filter(([, n]) => n > 0)
    .map(([kind, n]) => `${kind} ${n}`)
    .join(', ');
}
