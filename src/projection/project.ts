import type pg from 'pg';
import {
  conversationPairCountRead, projectionLayoutWrite, snapshotBegin, snapshotEnd,
  type ProjectionLayoutRow, type Queryable, type ReadObserver,
} from '../db/queries/projection.ts';
import { messagesBytes, toAnthropicMessages } from './anthropic.ts';
import { lowWaterBytes } from './cache.ts';
import { ConversationNotFoundError } from './errors.ts';
import { stableProjection } from './layout.ts';
import type { ConversationProjection, ProjectionCacheInfo } from './types.ts';
import { walk, type WalkResult } from './walk.ts';

export { MAX_PAGE_RANGES } from './walk.ts';

/**
 * projectConversationHistory: the history for the next request, within a
 * byte budget (DESIGN.md "Projection (the read module)").
 *
 * Two layouts, one walk (walk.ts):
 * - `stable` (default, layout.ts): the history keeps its start and its
 *   summaries between calls and only grows at its end, so every request
 *   reads the previous one's history from the prompt cache; when it must
 *   change it is rewritten at once, down to a low-water mark.
 * - `newest-first`: the walk fills the whole budget anew on every call.
 * Both never exceed the budget, never cut an item, report every omission and
 * use a summary only while its binding holds now.
 *
 * Reads run in one REPEATABLE READ READ ONLY snapshot (given a pool). A stable
 * rewrite then stores its layout in one upsert after the snapshot; a failed
 * write (a read-only replica, a read-only transaction of the caller) costs
 * only the cache, and is reported as `cache.layoutSaved: false`.
 */

export interface ProjectArgs {
  /**
   * A pg.Pool: the reads run on one connection in one REPEATABLE READ READ
   * ONLY transaction, so they all see one snapshot. Anything else with
   * `query` (a checked-out client): the reads run on it as they are, in the
   * caller's transaction (use REPEATABLE READ for a consistent snapshot), and
   * a layout is written inside a savepoint when the client is in a transaction.
   */
  pool: Queryable | pg.Pool;
  conversationId: string;
  /** The tenant namespace: a conversation of another scope is not found. */
  scope: string;
  /** UTF-8 bytes the history may take, as messagesBytes(toAnthropicMessages(result)) measures them. */
  budgetBytes: number;
  /** `stable` keeps the history's prefix between calls for prompt caching; `newest-first` fills the budget anew (Default: 'stable'). */
  layout?: 'stable' | 'newest-first';
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
 * @throws RangeError when budgetBytes is not a non-negative safe integer, or layout is unknown.
 */
export async function projectConversationHistory(args: ProjectArgs): Promise<ConversationProjection> {
  const { budgetBytes, scope } = args;
  if (!Number.isSafeInteger(budgetBytes) || budgetBytes < 0) {
    throw new RangeError(`budgetBytes must be a non-negative integer, got ${budgetBytes}`);
  }
  const mode = args.layout ?? 'stable';
  if (mode !== 'stable' && mode !== 'newest-first') throw new RangeError(`layout must be 'stable' or 'newest-first', got ${String(mode)}`);
  if (!UUID.test(args.conversationId)) throw new ConversationNotFoundError(args.conversationId, scope);
  const conversationId = args.conversationId.toLowerCase();
  const persist = mode === 'stable' && (args.persistLayout ?? true);

  let save: { layout: ProjectionLayoutRow; replaces: ProjectionLayoutRow | null; storedAt: number } | null = null;
  let saved = false;
  const projection = await withSnapshot(args.pool, async (db) => {
    const count = await conversationPairCountRead(db, conversationId, scope, args.onRead);
    if (count === null) throw new ConversationNotFoundError(conversationId, scope);
    const base = { conversationId, scope, count, budgetBytes, onRead: args.onRead };
    let result: WalkResult;
    let rewrite: ProjectionCacheInfo['rewrite'] = 'first';
    let low = lowWaterBytes(budgetBytes);
    if (mode === 'stable') {
      const stable = await stableProjection(db, { ...base, persist });
      result = stable.walk;
      rewrite = stable.rewrite;
      if (stable.save !== null) save = { layout: stable.save, replaces: stable.replaces, storedAt: stable.storedAt };
      low = stable.lowWater ?? low;
    } else {
      result = await walk(db, { ...base, fillTo: budgetBytes });
    }
    return assemble(result, { conversationId, scope, budgetBytes, count }, {
      mode, rewrite: mode === 'stable' ? rewrite : 'first', lowWaterBytes: mode === 'stable' ? low : budgetBytes, layoutSaved: false,
    });
  }, async (db) => {
    if (!persist || save === null) return;
    // In place of the layout read, under the budget it is stored under (a near budget's, or this one).
    const { storedAt, ...write } = save;
    saved = await saveLayout(db, { conversationId, scope, budgetBytes: storedAt, ...write });
  });
  projection.cache.layoutSaved = saved;
  if (projection.problems.length > 0) {
    args.logger?.warn({ conversationId, scope, problems: projection.problems }, 'projection degraded: the stored pair index is inconsistent');
  }
  return projection;
}

function assemble(
  w: WalkResult, at: { conversationId: string; scope: string; budgetBytes: number; count: number }, cache: ProjectionCacheInfo,
): ConversationProjection {
  const result: ConversationProjection = {
    conversationId: at.conversationId,
    scope: at.scope,
    items: w.items,
    omitted: w.omitted,
    summaryNotUsed: w.summaryNotUsed,
    bytes: 0,
    budgetBytes: at.budgetBytes,
    pairCount: at.count,
    cache,
    problems: w.problems,
  };
  result.bytes = messagesBytes(toAnthropicMessages(result));
  if (result.bytes > at.budgetBytes) {
    throw new Error(`sourcebound: projection of ${result.bytes} bytes exceeds its budget of ${at.budgetBytes}`);
  }
  return result;
}

/** Writes a layout; false when another call replaced the one read meanwhile, or the database refused (read-only); never throws for that. */
async function saveLayout(db: Queryable, args: Parameters<typeof projectionLayoutWrite>[1]): Promise<boolean> {
  let savepoint = false;
  try {
    await db.query('savepoint sourcebound_layout');
    savepoint = true;
  } catch {
    // Not in a transaction block (autocommit): nothing to protect.
  }
  try {
    const written = await projectionLayoutWrite(db, args);
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
 * Runs `fn` on one pooled connection inside one read-only snapshot, then
 * `after` on the same connection outside it; or both directly on a caller's client.
 */
async function withSnapshot<T>(db: Queryable | pg.Pool, fn: (db: Queryable) => Promise<T>, after: (db: Queryable) => Promise<void>): Promise<T> {
  if (!isPool(db)) {
    const result = await fn(db);
    await after(db);
    return result;
  }
  const client = await db.connect();
  let broken: Error | undefined;
  try {
    await snapshotBegin(client);
    let result: T;
    try {
      result = await fn(client);
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
