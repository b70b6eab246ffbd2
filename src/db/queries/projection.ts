/**
 * SQL of the read projection (src/projection/project.ts), named noun-first.
 * Every query checks the scope itself: nothing is read from a conversation of
 * another scope, even if the caller skipped the existence check. Reads are by
 * `pair_index` ranges through the pairs index, so their cost follows what the
 * layout reaches (src/projection/reader.ts), not the conversation's length. The reads made on every call
 * are PL/pgSQL functions (migrations/0005_projection_reads.sql): their plans are kept
 * per connection, where a statement sent as text is planned every time. A
 * call starts with projectionRead (projection_read()): what a call that keeps its layout
 * reads, in one statement.
 */
import type pg from 'pg';

import type { Queryable } from '../queryable.ts';
export type { Queryable };

/** What a query read, for callers that account for cost (tests, diagnostics). */
export interface ReadEvent {
  query: 'conversationPairCountRead' | 'pairsPageRead' | 'summariesForRangesRead' | 'projectionLayoutRead' | 'projectionLayoutNearRead';
  /** Set when the read was part of one projectionRead statement (every event of that statement carries it). */
  statement?: 'projectionRead';
  /** Rows returned. */
  rows: number;
  /** pairsPageRead: rows whose texts came back (the others were too big to fit). */
  textRows?: number;
  /** The pair or from_pair bounds asked for. */
  fromPair?: number;
  toPair?: number;
}

export type ReadObserver = (event: ReadEvent) => void;

export interface ProjectionPairRow {
  pairIndex: number;
  runId: string;
  userMessageId: string;
  assistantMessageId: string;
  /** Null when the pair was larger than the page's maxTextBytes. */
  userText: string | null;
  assistantText: string | null;
}

export interface ProjectionSummaryRow {
  id: string;
  fromPair: number;
  toPair: number;
  sourceMessageIds: string[];
  sourceHash: string;
  hashVersion: number;
  model: string;
  promptVersion: string;
  status: 'completed' | 'failed';
  summary: string | null;
  completedAt: Date | null;
  createdAt: Date;
  /** Facts of the summary its sources do not contain (`kind:text`), recorded under the `flag` grounding policy; null or empty when none. */
  ungrounded: string[] | null;
}

/**
 * The pair count of a conversation in a scope (max(pair_index) + 1: an index
 * lookup), or null when no conversation has this id in this scope.
 */
export async function conversationPairCountRead(
  db: Queryable,
  conversationId: string,
  scope: string,
  observe?: ReadObserver,
): Promise<number | null> {
  const { rows } = await db.query<{ pairCount: number | null }>('select sourcebound.projection_pair_count($1, $2) as "pairCount"', [
    conversationId,
    scope,
  ]);
  const pairCount = rows[0]?.pairCount ?? null;
  observe?.({ query: 'conversationPairCountRead', rows: pairCount === null ? 0 : 1 });
  return pairCount;
}

/**
 * Pairs fromPair..toPair of a conversation in a scope, oldest first. A
 * pair's texts come back only when the two together are at
 * most `maxTextBytes` UTF-8 bytes (null: always): a pair bigger than what is
 * left of the budget cannot fit (its JSON is at least that long), so its text
 * is not transferred.
 */
export async function pairsPageRead(
  db: Queryable,
  args: { conversationId: string; scope: string; fromPair: number; toPair: number; maxTextBytes: number | null },
  observe?: ReadObserver,
): Promise<ProjectionPairRow[]> {
  const { rows } = await db.query<ProjectionPairRow>('select * from sourcebound.projection_pairs_page($1, $2, $3, $4, $5)', [
    args.conversationId,
    args.scope,
    args.fromPair,
    args.toPair,
    args.maxTextBytes,
  ]);
  observe?.({
    query: 'pairsPageRead',
    rows: rows.length,
    textRows: rows.filter((r) => r.userText !== null).length,
    fromPair: args.fromPair,
    toPair: args.toPair,
  });
  return rows;
}

/**
 * Completed and failed summary records of a conversation in a scope whose
 * from_pair lies in fromPair..toPair (running, pending and stale records are
 * never projected). Ordered by from_pair, newest first within a range.
 */
export async function summariesForRangesRead(
  db: Queryable,
  args: { conversationId: string; scope: string; fromPair: number; toPair: number },
  observe?: ReadObserver,
): Promise<ProjectionSummaryRow[]> {
  const { rows } = await db.query<ProjectionSummaryRow>('select * from sourcebound.projection_summaries($1, $2, $3, $4)', [
    args.conversationId,
    args.scope,
    args.fromPair,
    args.toPair,
  ]);
  observe?.({ query: 'summariesForRangesRead', rows: rows.length, fromPair: args.fromPair, toPair: args.toPair });
  return rows;
}

/** What one projectionRead statement returns (sourcebound.projection_read()). */
export interface ProjectionRead {
  /** Eligible pairs now. */
  count: number;
  /** The stored layout at the budget, else the nearest within NEAR_BUDGET (`layoutBudget`: the budget it is stored under); null: none. */
  layout: ProjectionLayoutRow | null;
  layoutBudget: number | null;
  /** The pairs fromPair..count-1, as pairsPageRead returns them. */
  fromPair: number;
  pairs: ProjectionPairRow[];
  /** Ranges (pairs 10k..10k+9) whose records were read, and those records, as summariesForRangesRead returns them. */
  recordRanges: number[];
  records: ProjectionSummaryRow[];
  /** What keeps history out of every pair: messages with no run, replies still streaming, runs not settled after ten minutes. */
  withoutRun: number;
  streaming: number;
  unsettledRuns: number;
}

/**
 * In one statement (one snapshot): the pair count of a conversation in a
 * scope, its stored layout at `layoutBudget` (else the nearest one in
 * NEAR_BUDGET; null layoutBudget: none read), the pairs from that layout's
 * start (else the newest `firstPage`) with texts up to `maxTextBytes`, and
 * the summary records of the ranges the layout shows as summaries (else of
 * the ranges of the pairs read). Null when no conversation has this id in
 * this scope. Tells `observe` what it read as the reads it stands for.
 */
export async function projectionRead(
  db: Queryable,
  args: { conversationId: string; scope: string; layoutBudget: number | null; firstPage: number; maxTextBytes: number | null },
  observe?: ReadObserver,
): Promise<ProjectionRead | null> {
  const budget = args.layoutBudget !== null && args.layoutBudget <= MAX_LAYOUT_BUDGET ? args.layoutBudget : null;
  const { rows } = await db.query<ProjectionPairRow & { read: RawRead | null }>(
    'select * from sourcebound.projection_read($1, $2, $3, $4, $5, $6, $7)',
    [
      args.conversationId,
      args.scope,
      budget,
      budget === null ? null : Math.ceil(budget * NEAR_BUDGET),
      budget === null ? null : Math.min(MAX_LAYOUT_BUDGET, Math.floor(budget / NEAR_BUDGET)),
      args.firstPage,
      args.maxTextBytes,
    ],
  );
  // A first row with the rest as JSON, then the pairs as rows (projection_read()).
  const raw = rows[0]?.read ?? null;
  const statement = 'projectionRead' as const;
  observe?.({ query: 'conversationPairCountRead', rows: raw === null ? 0 : 1, statement });
  if (raw === null) return null;
  const pairs: ProjectionPairRow[] = rows.slice(1);
  const layout = raw.layout === null ? null : { ...raw.layout, usedAt: new Date(raw.layout.usedAt) };
  if (budget !== null) {
    observe?.({ query: 'projectionLayoutRead', rows: layout !== null && raw.layoutBudget === budget ? 1 : 0, statement });
    if (raw.layoutBudget !== budget) observe?.({ query: 'projectionLayoutNearRead', rows: layout === null ? 0 : 1, statement });
  }
  if (raw.fromPair < raw.count) {
    observe?.({
      query: 'pairsPageRead',
      rows: pairs.length,
      textRows: pairs.filter((r) => r.userText !== null).length,
      fromPair: raw.fromPair,
      toPair: raw.count - 1,
      statement,
    });
  }
  const records = raw.records.map((r) => ({
    ...r,
    completedAt: r.completedAt === null ? null : new Date(r.completedAt),
    createdAt: new Date(r.createdAt),
  }));
  if (raw.recordRanges.length > 0) {
    observe?.({
      query: 'summariesForRangesRead',
      rows: records.length,
      statement,
      fromPair: raw.recordRanges[0]! * 10,
      toPair: raw.recordRanges.at(-1)! * 10 + 9,
    });
  }
  return {
    count: raw.count,
    layout,
    layoutBudget: layout === null ? null : raw.layoutBudget,
    fromPair: raw.fromPair,
    pairs,
    recordRanges: raw.recordRanges,
    records,
    withoutRun: Number(raw.withoutRun),
    streaming: Number(raw.streaming),
    unsettledRuns: Number(raw.unsettledRuns),
  };
}

type RawRead = Omit<ProjectionRead, 'layout' | 'records' | 'pairs'> & {
  layout: (Omit<ProjectionLayoutRow, 'usedAt'> & { usedAt: string }) | null;
  records: (Omit<ProjectionSummaryRow, 'completedAt' | 'createdAt'> & { completedAt: string | null; createdAt: string })[];
};

/**
 * Starts a read-only REPEATABLE READ transaction on a checked-out client, so
 * every read of one projection sees the same snapshot (pair indexes shift when
 * an older pair stops being eligible; a torn read could mix two numberings).
 */
export async function snapshotBegin(db: Queryable): Promise<void> {
  await db.query('begin isolation level repeatable read read only');
}

/** Ends the snapshot transaction (read-only: nothing to commit). */
export async function snapshotEnd(db: Queryable): Promise<void> {
  await db.query('rollback');
}

/** The largest budget a layout is stored for (the column is an integer). */
export const MAX_LAYOUT_BUDGET = 2 ** 31 - 1;

/** A conversation's cache-stable layout at one budget (src/projection/layout.ts). */
export interface ProjectionLayoutRow {
  startPair: number;
  endPair: number;
  summaries: { fromPair: number; recordId: string }[];
  /** Spans left out between startPair and endPair: the gap after the summaries, and pairs left out alone as too large. */
  gaps: { fromPair: number; toPair: number; reason?: 'too_large' }[];
  prefixSha256: string;
  prefixBytes: number;
  /** SHA-256 of the summaries at its start alone (the head, cached up to its breakpoint); null without one. */
  headSha256: string | null;
  /** When a request last sent it (the app's clock). */
  usedAt: Date;
  /** The ledger (src/projection/cache.ts): saved against the whole history up to the request that made the layout, in uncached-byte prices. */
  savedCost: number;
  /** A lower bound on the bytes of the whole history the layout leaves out (each request that extends it saves reading them). */
  savesBytes: number;
}

/** The stored layout of a conversation in a scope at a budget, or null. */
export async function projectionLayoutRead(
  db: Queryable,
  args: { conversationId: string; scope: string; budgetBytes: number },
  observe?: ReadObserver,
): Promise<ProjectionLayoutRow | null> {
  // Layouts are kept for budgets a request can have (integer column); a larger budget is always laid out anew.
  if (args.budgetBytes > MAX_LAYOUT_BUDGET) return null;
  const { rows } = await db.query<ProjectionLayoutRow>('select * from sourcebound.projection_layout($1, $2, $3)', [
    args.conversationId,
    args.scope,
    args.budgetBytes,
  ]);
  observe?.({ query: 'projectionLayoutRead', rows: rows.length });
  return rows[0] ?? null;
}

/** A layout stored under a budget is also used for budgets down to NEAR_BUDGET of it (while it fits them). */
export const NEAR_BUDGET = 0.8;

/**
 * When no layout is stored at this very budget: the stored layout of the
 * conversation under the nearest larger budget, up to budgetBytes /
 * NEAR_BUDGET, else under the nearest smaller one, down to budgetBytes *
 * NEAR_BUDGET, with the budget it is stored under; or null. An app whose
 * budget is what its window leaves after the new message asks with a
 * different budget every turn, now above the one its layout is stored under,
 * now below: without this, each call laid the history out anew (no cache
 * read, everything written again) and stored one more row. A larger budget's
 * layout is kept while it fits this one; a smaller budget's always fits, and
 * is what the previous request sent. Read only when the exact read found
 * nothing (plain SQL: a call that keeps its layout never sends it).
 */
export async function projectionLayoutNearRead(
  db: Queryable,
  args: { conversationId: string; scope: string; budgetBytes: number },
  observe?: ReadObserver,
): Promise<(ProjectionLayoutRow & { budgetBytes: number }) | null> {
  if (args.budgetBytes > MAX_LAYOUT_BUDGET) return null;
  const { rows } = await db.query<ProjectionLayoutRow & { budgetBytes: number }>(
    `select l.budget_bytes as "budgetBytes", l.start_pair as "startPair", l.end_pair as "endPair", l.summaries, l.gaps,
            l.prefix_sha256 as "prefixSha256", l.prefix_bytes as "prefixBytes",
            l.saved_cost as "savedCost", l.saves_bytes::float8 as "savesBytes", l.head_sha256 as "headSha256", l.used_at as "usedAt"
     from sourcebound.projection_layouts l
     join sourcebound.conversations c on c.id = l.conversation_id and c.scope = $2
     where l.conversation_id = $1 and l.budget_bytes between $5 and $4 and l.budget_bytes <> $3
     order by l.budget_bytes < $3, abs(l.budget_bytes - $3)
     limit 1`,
    [
      args.conversationId,
      args.scope,
      args.budgetBytes,
      Math.min(MAX_LAYOUT_BUDGET, Math.floor(args.budgetBytes / NEAR_BUDGET)),
      Math.ceil(args.budgetBytes * NEAR_BUDGET),
    ],
  );
  observe?.({ query: 'projectionLayoutNearRead', rows: rows.length });
  return rows[0] ?? null;
}

/**
 * Stores the layout a rewrite made (one upsert), in place of the layout the
 * rewrite read (`replaces`; null: none was stored): a compare-and-swap, so a
 * call that read an older state never undoes a concurrent rewrite, whatever
 * either counted (a layout with fewer pairs replaces a larger one when pairs
 * became ineligible). Whether the row was written.
 */
export async function projectionLayoutWrite(
  db: Queryable,
  args: { conversationId: string; scope: string; budgetBytes: number; layout: ProjectionLayoutRow; replaces: ProjectionLayoutRow | null },
): Promise<boolean> {
  const { layout, replaces } = args;
  if (args.budgetBytes > MAX_LAYOUT_BUDGET) return false;
  const { rowCount } = await db.query(
    `insert into sourcebound.projection_layouts as l
       (conversation_id, budget_bytes, start_pair, end_pair, summaries, gaps, prefix_sha256, prefix_bytes, saved_cost, saves_bytes, head_sha256,
        used_at)
     select c.id, $3, $4, $5, $6::jsonb, $9::jsonb, $7, $8, $14, $15, $16, $17
     from sourcebound.conversations c where c.id = $1 and c.scope = $2
     on conflict (conversation_id, budget_bytes) do update
       set start_pair = excluded.start_pair, end_pair = excluded.end_pair, summaries = excluded.summaries, gaps = excluded.gaps,
           prefix_sha256 = excluded.prefix_sha256, prefix_bytes = excluded.prefix_bytes, head_sha256 = excluded.head_sha256,
           saved_cost = excluded.saved_cost, saves_bytes = excluded.saves_bytes, rewritten_at = now(), used_at = excluded.used_at
       where $10::boolean and l.start_pair = $11 and l.end_pair = $12 and l.prefix_sha256 = $13`,
    [
      args.conversationId,
      args.scope,
      args.budgetBytes,
      layout.startPair,
      layout.endPair,
      JSON.stringify(layout.summaries),
      layout.prefixSha256,
      layout.prefixBytes,
      JSON.stringify(layout.gaps),
      replaces !== null,
      replaces?.startPair ?? null,
      replaces?.endPair ?? null,
      replaces?.prefixSha256 ?? null,
      layout.savedCost,
      Math.round(layout.savesBytes),
      layout.headSha256,
      layout.usedAt,
    ],
  );
  return (rowCount ?? 0) > 0;
}

/**
 * Records that a request sent the stored layout at `usedAt` (a kept layout:
 * the prompt cache's lifetime starts again with each use). Only when the
 * layout is still the one read, and only forward in time.
 */
export async function projectionLayoutTouch(
  db: Queryable,
  args: { conversationId: string; scope: string; budgetBytes: number; prefixSha256: string; usedAt: Date },
): Promise<boolean> {
  if (args.budgetBytes > MAX_LAYOUT_BUDGET) return false;
  const { rowCount } = await db.query(
    `update sourcebound.projection_layouts l set used_at = $5
     from sourcebound.conversations c
     where l.conversation_id = $1 and l.budget_bytes = $3 and c.id = l.conversation_id and c.scope = $2
       and l.prefix_sha256 = $4 and l.used_at < $5`,
    [args.conversationId, args.scope, args.budgetBytes, args.prefixSha256, args.usedAt],
  );
  return (rowCount ?? 0) > 0;
}
