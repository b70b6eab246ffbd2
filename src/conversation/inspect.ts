import type pg from 'pg';
import { sourceHash, sourceMessageIds } from './source-hash.ts';
import { plannableRanges, type PairRange } from './plan.ts';
import { isProjectable } from '../gateway/prompts.ts';
import * as q from '../db/queries/summaries.ts';
import { pairsDriftRead, type PairDriftRow } from '../db/queries/pairs.ts';
import { describeDrift } from './repair.ts';
import { ConversationNotFoundError } from '../projection/projection-errors.ts';

export interface InspectedRecord {
  id: string;
  fromPair: number;
  toPair: number;
  status: q.SummaryRow['status'];
  model: string;
  promptVersion: string;
  projectableVersion: boolean;
  attemptsSpent: number;
  /** Whether the record's ids and hash still match the pairs as they are now. */
  bindingHolds: boolean;
  leaseOwner: string | null;
  leaseExpiresAt: Date | null;
  notBefore: Date | null;
  failureReason: string | null;
  summaryChars: number | null;
  createdAt: Date;
  completedAt: Date | null;
  attempts: {
    outcome: string | null;
    spent: boolean | null;
    reason: string | null;
    workerId: string;
    startedAt: Date;
    finishedAt: Date | null;
    requestId: string | null;
    /** The grounding check of the answer (src/grounding/index.ts): facts checked and those not in the sources (`kind:text`); null when no answer was checked. */
    grounding: { checked: string[]; ungrounded: string[] } | null;
  }[];
}

/** A stored inconsistency, what it means and the command that repairs it. */
export interface InspectionProblem {
  kind: 'pair_index_drift';
  /** The rows where the pair index differs from the definition (sourcebound.pairs_drift). */
  rows: PairDriftRow[];
  message: string;
  repair: string;
}

export interface Inspection {
  conversationId: string;
  scope: string;
  pairCount: number;
  plannedRanges: PairRange[];
  records: InspectedRecord[];
  /** Empty when the stored state is consistent. */
  problems: InspectionProblem[];
}

/**
 * The operator's view of a conversation: its pairs, planned ranges, and every
 * summary record with its attempts and whether its binding still holds. Reads
 * the whole conversation: for people, not for hot paths.
 * @throws ConversationNotFoundError when the conversation is not in `scope`.
 */
export async function inspectConversation(pool: pg.Pool, conversationId: string, scope: string): Promise<Inspection> {
  const actualScope = await q.conversationScopeRead(pool, conversationId);
  if (actualScope === null || actualScope !== scope) throw new ConversationNotFoundError(conversationId, scope);
  const pairCount = await q.pairCountRead(pool, conversationId);
  const summaries = await q.summariesOfConversationRead(pool, conversationId);
  const attempts = await q.attemptsOfConversationRead(pool, conversationId);
  const rangeCache = new Map<number, q.PairRow[]>();
  const records: InspectedRecord[] = [];
  for (const s of summaries) {
    let pairs = rangeCache.get(s.fromPair);
    if (!pairs) {
      pairs = await q.pairsRangeRead(pool, conversationId, s.fromPair, s.toPair);
      rangeCache.set(s.fromPair, pairs);
    }
    let bindingHolds = false;
    try {
      bindingHolds =
        pairs.length === 10 &&
        sourceMessageIds(pairs).join() === s.sourceMessageIds.join() &&
        sourceHash(pairs, s.hashVersion) === s.sourceHash;
    } catch {
      bindingHolds = false; // a hash version this build cannot compute
    }
    records.push({
      id: s.id,
      fromPair: s.fromPair,
      toPair: s.toPair,
      status: s.status,
      model: s.model,
      promptVersion: s.promptVersion,
      projectableVersion: isProjectable(s.promptVersion),
      attemptsSpent: s.attemptsSpent,
      bindingHolds,
      leaseOwner: s.leaseOwner,
      leaseExpiresAt: s.leaseExpiresAt,
      notBefore: s.notBefore,
      failureReason: s.failureReason,
      summaryChars: s.summary === null ? null : s.summary.length,
      createdAt: s.createdAt,
      completedAt: s.completedAt,
      attempts: attempts
        .filter((a) => a.summaryId === s.id)
        .map((a) => ({
          outcome: a.outcome,
          spent: a.spent,
          reason: a.reason,
          workerId: a.workerId,
          startedAt: a.startedAt,
          finishedAt: a.finishedAt,
          requestId: a.requestId,
          grounding: a.groundingChecked === null ? null : { checked: a.groundingChecked, ungrounded: a.groundingUngrounded ?? [] },
        })),
    });
  }
  const problems: InspectionProblem[] = [];
  const drift = await pairsDriftRead(pool, conversationId);
  if (drift.length > 0) {
    const repair = `sourcebound repair ${conversationId} --scope ${scope}`;
    problems.push({
      kind: 'pair_index_drift',
      rows: drift,
      repair,
      message:
        `the pair index differs from the definition of an eligible pair in ${drift.length} row(s) (${describeDrift(drift)}), ` +
        `from pair ${Math.min(...drift.map((d) => Math.min(d.expectedIndex ?? Infinity, d.actualIndex ?? Infinity)))} on; ` +
        'projection shows only what it can prove there and claims of those ranges stop. ' +
        `Rebuild the index from the definition with \`${repair}\``,
    });
  }
  return { conversationId, scope, pairCount, plannedRanges: plannableRanges(pairCount), records, problems };
}
