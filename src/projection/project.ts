import type pg from 'pg';
import {
  projectionLayoutTouch,
  projectionLayoutWrite,
  projectionRead,
  snapshotBegin,
  snapshotEnd,
  type ProjectionRead,
  type Queryable,
  type ReadObserver,
} from '../db/queries/projection.ts';
import { resolveBudget, type RequestReserve } from './budget.ts';
import { DEFAULT_CACHE_TTL_SECONDS } from './cache.ts';
import { ConversationNotFoundError } from './projection-errors.ts';
import { formatOf, historyBytes, type Format, type ProjectionFormat } from './format.ts';
import { planLayout } from './fidelity.ts';
import { stableProjection } from './layout.ts';
import { ConversationReader, FIRST_PAGE_PAIRS, itemSerial, memoFor, NO_FURTHER_READS, SnapshotNeeded } from './reader.ts';
import type { ConversationProjection, ProjectionCacheInfo, ProjectionProblem } from './types.ts';

export { MAX_PAGE_PAIRS } from './reader.ts';

/**
 * projectConversationHistory: the history for the next request, within a
 * byte budget (README "Projection").
 *
 * Fidelity first (fidelity.ts): the newest pairs raw, older material left out
 * first, summaries only for what raw pairs cannot reach, the budget used.
 * Two layouts:
 * - `stable` (default, layout.ts): the layout is kept between calls while the
 *   prompt cache holds it, so every request reads the previous one's history
 *   from the cache and only grows at its end; when it must change (the budget
 *   reached, a change, the cache expired) it is laid out anew.
 * - `newest-first`: laid out anew on every call, filling the whole budget.
 * Both never exceed the budget, never cut an item, report every omission and
 * use a summary only while its binding holds now.
 *
 * Reads see one snapshot (given a pool). A stable call first reads in one
 * statement (projection_read(): the count, the stored layout, the pairs
 * from its start and the records of its summaries; one statement sees one
 * snapshot, so no transaction): a call that keeps its layout needs nothing
 * more, one round trip. A call that must read further (a rewrite) is made
 * again inside one REPEATABLE READ READ ONLY transaction, as is every
 * newest-first call. A stable rewrite then stores its layout in one upsert
 * after the snapshot; a failed write (a read-only replica, a read-only
 * transaction of the caller) costs only the cache, and is reported as
 * `cache.layoutSaved: false`. What does not change between calls (the items
 * of pairs and summaries read again with the same content, their sizes, the
 * source hashes over them, the layout hash, the JSON check) is computed
 * once per pool (reader.ts ItemMemo): returned items are frozen.
 */

export interface ProjectArgs {
  /**
   * A pg.Pool: the reads run on one connection, in one statement or in one
   * REPEATABLE READ READ ONLY transaction, so they all see one snapshot. Anything else with
   * `query` (a checked-out client): the reads run on it as they are, in the
   * caller's transaction (use REPEATABLE READ for a consistent snapshot), and
   * a layout is written inside a savepoint when the client is in a transaction.
   */
  pool: Queryable | pg.Pool;
  conversationId: string;
  /** The tenant namespace: a conversation of another scope is not found. */
  scope: string;
  /**
   * UTF-8 bytes the request may take: the history as `format`'s adapter
   * makes it (`JSON.stringify` of its messages), plus `reserve`. Exactly one
   * of budgetBytes and budgetTokens.
   */
  budgetBytes?: number;
  /** The budget in tokens, as bytesPerToken (Default: BYTES_PER_TOKEN, 3, conservative for English-like text; see budget.ts) bytes each. */
  budgetTokens?: number;
  bytesPerToken?: number;
  /** What else the request carries (system prompt, tools, new message, bytes): its JSON bytes come off the budget first. */
  reserve?: RequestReserve;
  /**
   * The client whose JSON the budget measures: 'anthropic' (toAnthropicMessages),
   * 'openai' (toOpenAIMessages) or 'ai-sdk' (toModelMessages). (Default: 'anthropic')
   */
  format?: ProjectionFormat;
  /** `stable` keeps the history's prefix between calls for prompt caching; `newest-first` fills the budget anew (Default: 'stable'). */
  layout?: 'stable' | 'newest-first';
  /**
   * How long the model provider's prompt cache keeps a prefix after its last
   * use: a stored layout not sent for longer is laid out afresh for fidelity,
   * since its next request pays a write anyway. 3,600 for Anthropic's
   * one-hour cache. (Default: 300)
   */
  cacheTtlSeconds?: number;
  /** The clock, in milliseconds since the epoch (tests, replays). (Default: Date.now) */
  now?: () => number;
  /** Store the layout a stable rewrite makes (Default: true). Off: nothing is written (e.g. `sourcebound project`). */
  persistLayout?: boolean;
  /** Told what each query read (cost accounting in tests and diagnostics). */
  onRead?: ReadObserver;
  /**
   * Told when the projection met a stored inconsistency and degraded (one
   * `warn` per call, with the problems; they are in the result too). Any
   * pino-compatible logger. (Default: none)
   */
  logger?: { warn(details: object, message: string): void };
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * Builds the history for the next request of a conversation.
 * @throws ConversationNotFoundError when no conversation has this id in this scope.
 * @throws RangeError unless exactly one of budgetBytes and budgetTokens is a non-negative integer; when the
 *   reserve exceeds the budget, the format or layout is unknown, or cacheTtlSeconds is not positive.
 */
export async function projectConversationHistory(args: ProjectArgs): Promise<ConversationProjection> {
  const { scope } = args;
  const budget = resolveBudget(args);
  const budgetBytes = budget.historyBytes;
  const format = formatOf(args.format);
  const mode = args.layout ?? 'stable';
  if (mode !== 'stable' && mode !== 'newest-first') throw new RangeError(`layout must be 'stable' or 'newest-first', got ${String(mode)}`);
  const cacheTtlSeconds = args.cacheTtlSeconds ?? DEFAULT_CACHE_TTL_SECONDS;
  if (!(Number.isFinite(cacheTtlSeconds) && cacheTtlSeconds > 0)) {
    throw new RangeError(
      `cacheTtlSeconds must be a positive number of seconds (300, or 3600 for a one-hour cache), got ${String(cacheTtlSeconds)}`,
    );
  }
  if (!UUID.test(args.conversationId)) throw new ConversationNotFoundError(args.conversationId, scope);
  const conversationId = args.conversationId.toLowerCase();
  const persist = mode === 'stable' && (args.persistLayout ?? true);
  const now = (args.now ?? Date.now)();

  const memo = memoFor(args.pool);
  let after: ((db: Queryable) => Promise<boolean>) | null = null;
  let saved = false;
  // A newest-first call lays out anew every time: it reads in pages, in one snapshot from the start.
  const projection = await withSnapshot(
    args.pool,
    mode === 'stable',
    async (db, live) => {
      after = null;
      const read = await projectionRead(
        db,
        {
          conversationId,
          scope,
          layoutBudget: mode === 'stable' ? budgetBytes : null,
          firstPage: FIRST_PAGE_PAIRS,
          maxTextBytes: budgetBytes,
        },
        args.onRead,
      );
      if (read === null) throw new ConversationNotFoundError(conversationId, scope);
      const { count } = read;
      const reader = new ConversationReader(live ? db : NO_FURTHER_READS, {
        conversationId,
        scope,
        count,
        budgetBytes,
        onRead: args.onRead,
        format,
        prefetch: read,
        memo,
      });
      reader.problems.push(...hiddenExchanges(read));
      const at = {
        conversationId,
        scope,
        budgetBytes,
        count,
        format,
        requestBytes: budget.requestBytes,
        reservedBytes: budget.reservedBytes,
      };
      if (mode === 'newest-first') {
        const plan = await planLayout(reader, { budgetBytes, fillBytes: budgetBytes });
        return assemble({ ...plan, problems: reader.problems }, at, {
          mode,
          rewrite: 'first',
          lowWaterBytes: budgetBytes,
          layoutSaved: false,
        });
      }
      const stable = await stableProjection(
        db,
        reader,
        { conversationId, scope, count, budgetBytes, now, cacheTtlSeconds, onRead: args.onRead },
        {
          layout: read.layout,
          budgetBytes: read.layoutBudget,
        },
      );
      if (persist && stable.save !== null) {
        const write = { conversationId, scope, budgetBytes: stable.storedAt, layout: stable.save, replaces: stable.replaces };
        after = (db) => saveLayout(db, () => projectionLayoutWrite(db, write));
      } else if (persist && stable.touch && stable.replaces !== null) {
        const touch = {
          conversationId,
          scope,
          budgetBytes: stable.storedAt,
          prefixSha256: stable.replaces.prefixSha256,
          usedAt: new Date(now),
        };
        after = (db) => saveLayout(db, () => projectionLayoutTouch(db, touch));
      }
      return assemble({ ...stable.plan, problems: reader.problems }, at, {
        mode,
        rewrite: stable.rewrite,
        lowWaterBytes: stable.lowWater,
        layoutSaved: false,
      });
    },
    async (db) => {
      if (after !== null) saved = await after(db);
    },
  );
  // A kept layout is already stored: only a rewrite reports a save.
  projection.cache.layoutSaved = projection.cache.rewrite !== null && saved;
  if (projection.problems.length > 0) {
    args.logger?.warn(
      { conversationId, scope, problems: projection.problems },
      'projection: history left out of every request (see problems)',
    );
  }
  return projection;
}

function assemble(
  w: Pick<ConversationProjection, 'items' | 'omitted' | 'summaryNotUsed' | 'problems'>,
  at: {
    conversationId: string;
    scope: string;
    budgetBytes: number;
    count: number;
    format: Format;
    requestBytes: number;
    reservedBytes: number;
  },
  cache: ProjectionCacheInfo,
): ConversationProjection {
  const result: ConversationProjection = {
    conversationId: at.conversationId,
    scope: at.scope,
    items: w.items,
    omitted: w.omitted,
    summaryNotUsed: w.summaryNotUsed,
    bytes: 0,
    budgetBytes: at.budgetBytes,
    format: at.format.name,
    requestBudgetBytes: at.requestBytes,
    reservedBytes: at.reservedBytes,
    pairCount: at.count,
    cache,
    problems: w.problems,
  };
  // The planner sized every candidate with the format's arithmetic; the adapter's own JSON is the truth
  // (checked once for the same items and spans: reader.ts ItemMemo).
  // (Layouts of more than 2,000 items are checked every time: bounds the memo's keys.)
  const key =
    result.items.length > 2000
      ? null
      : `${at.format.name}|${result.items.map(itemSerial).join(',')}|${result.omitted.map((s) => `${s.fromPair}-${s.toPair}-${s.reason}`).join(',')}`;
  const checked = key === null ? undefined : checkedBytes.get(key);
  // A size is remembered only where the planner's equaled the JSON's: the same items and spans plan the same.
  const planned = checked ?? at.format.projectedBytes(result.items, result.omitted);
  result.bytes = checked ?? historyBytes(at.format.messages(result));
  if (key !== null && checked === undefined && result.bytes === planned) {
    if (checkedBytes.size >= MAX_CHECKED) checkedBytes.delete(checkedBytes.keys().next().value!);
    checkedBytes.set(key, result.bytes);
  }
  if (result.bytes !== planned) {
    throw new Error(`sourcebound: the ${at.format.name} history is ${result.bytes} bytes, its layout was sized at ${planned}`);
  }
  if (result.bytes > at.budgetBytes) {
    throw new Error(`sourcebound: projection of ${result.bytes} bytes exceeds its budget of ${at.budgetBytes}`);
  }
  return result;
}

/** Bytes of the adapter's JSON already checked against the planner's, by format, items and spans (items are immutable). */
const checkedBytes = new Map<string, number>();
const MAX_CHECKED = 1024;

/** Writes a layout (or its use); false when another call replaced the one read meanwhile, or the database refused (read-only); never throws for that. */
async function saveLayout(db: Queryable, write: () => Promise<boolean>): Promise<boolean> {
  let savepoint = false;
  try {
    await db.query('savepoint sourcebound_layout');
    savepoint = true;
  } catch {
    // Not in a transaction block (autocommit): nothing to protect.
  }
  try {
    const written = await write();
    if (savepoint) await db.query('release savepoint sourcebound_layout');
    return written;
  } catch {
    if (savepoint) await db.query('rollback to savepoint sourcebound_layout').catch(() => {});
    return false;
  }
}

function isPool(db: Queryable | pg.Pool): db is pg.Pool {
  const candidate = db as Partial<pg.Pool> & { release?: unknown };
  return typeof candidate.connect === 'function' && typeof candidate.release !== 'function' && 'totalCount' in db;
}

/**
 * Runs `fn` on one pooled connection, then `after` on the same connection; or
 * both directly on a caller's client (`live`: fn may read as it needs).
 * On a pool, `fn` first runs outside a transaction when `oneStatement`
 * (a call that keeps its layout reads once: one statement sees one
 * snapshot), with a reader that may not read further; if it must
 * (SnapshotNeeded), it runs again inside one read-only REPEATABLE READ
 * snapshot, where it reads as it needs.
 */
async function withSnapshot<T>(
  db: Queryable | pg.Pool,
  oneStatement: boolean,
  fn: (db: Queryable, live: boolean) => Promise<T>,
  after: (db: Queryable) => Promise<void>,
): Promise<T> {
  if (!isPool(db)) {
    const result = await fn(db, true);
    await after(db);
    return result;
  }
  const client = await db.connect();
  let broken: Error | undefined;
  try {
    if (oneStatement) {
      let result: T | undefined;
      try {
        result = await fn(client, false);
      } catch (error) {
        if (!(error instanceof SnapshotNeeded)) throw error;
      }
      if (result !== undefined) {
        await after(client);
        return result;
      }
    }
    await snapshotBegin(client);
    let result: T;
    try {
      result = await fn(client, true);
    } finally {
      await snapshotEnd(client).catch((error: unknown) => {
        broken = error instanceof Error ? error : new Error(String(error));
      });
    }
    if (broken === undefined) await after(client);
    return result;
  } finally {
    client.release(broken);
  }
}

/** The exchanges no pair can take, as problems: they would otherwise disappear from every request without a word. */
function hiddenExchanges(read: Pick<ProjectionRead, 'withoutRun' | 'streaming' | 'unsettledRuns'>): ProjectionProblem[] {
  const problems: ProjectionProblem[] = [];
  const n = (count: number, one: string, many: string) => `${count} ${count === 1 ? one : many}`;
  if (read.withoutRun > 0) {
    problems.push({
      kind: 'messages_without_run',
      atPair: null,
      count: read.withoutRun,
      message: `${n(read.withoutRun, 'message has', 'messages have')} no run, so no pair and no request carries ${read.withoutRun === 1 ? 'it' : 'them'}: write turns with beginTurn/completeTurn`,
    });
  }
  if (read.streaming > 0) {
    problems.push({
      kind: 'replies_streaming',
      atPair: null,
      count: read.streaming,
      message: `${n(read.streaming, 'reply is', 'replies are')} still streaming, so ${read.streaming === 1 ? 'its exchange is' : 'their exchanges are'} in no request yet: finishReply or failTurn`,
    });
  }
  if (read.unsettledRuns > 0) {
    problems.push({
      kind: 'runs_not_settled',
      atPair: null,
      count: read.unsettledRuns,
      message: `${n(read.unsettledRuns, 'run is', 'runs are')} still queued or running ten minutes after ${read.unsettledRuns === 1 ? 'it' : 'they'} began, so ${read.unsettledRuns === 1 ? 'its exchange is' : 'their exchanges are'} in no request: completeTurn or failTurn`,
    });
  }
  return problems;
}
