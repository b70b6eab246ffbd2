import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { expect } from 'vitest';
import type { MessagesServer } from '../../support/messages-server.ts';
import { addPairs, createConversation } from '../../support/fixtures.ts';
import type { Fleet } from './fleet.ts';
import { writeScenarioFigures, ZERO_KEYS, type ScenarioFigures, type ZeroKey } from './figures.ts';
import {
  checkCoverage,
  crossScopeRows,
  openRanges,
  openRangesByIds,
  tryMutations,
  zeroFigures,
  type CoverageReport,
} from './invariants.ts';

/** FAULTS_FULL=1 selects the full sizes; the default is the quick suite. */
export const FULL = process.env.FAULTS_FULL === '1';
export const size = <T>(quick: T, full: T): T => (FULL ? full : quick);

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** The harness's own pool, named so connection-fault scenarios can spare it. */
export const HARNESS_APP = 'faults-harness';

export function harnessPool(url: string, max = 6): pg.Pool {
  const pool = new pg.Pool({ connectionString: url, max, application_name: HARNESS_APP });
  // Connections die on purpose in some scenarios (server restart): idle or checked out, that is not the harness's error.
  pool.on('error', () => {});
  pool.on('connect', (client) => client.on('error', () => {}));
  return pool;
}

/** A canary per scope: written into that scope's assistant replies only. */
export function scopeCanaries(scopes: string[]): Record<string, string> {
  return Object.fromEntries(scopes.map((s) => [s, `CANARY-${s}-${randomBytes(6).toString('hex')}`]));
}

/**
 * The replies a Messages request carried, in order, each with its pair number
 * and its text as sent (conversation-compaction@5 names replies by pair
 * number, not message id).
 */
export function requestReplies(body: unknown): { pair: number; text: string }[] {
  const content = (body as { messages?: { content?: unknown }[] } | undefined)?.messages?.[0]?.content;
  if (typeof content !== 'string') return [];
  return [...content.matchAll(/<reply pair="(\d+)">\n([^]*?)\n<\/reply>/g)].map((m) => ({ pair: Number(m[1]), text: m[2]! }));
}

/**
 * The assistant message whose text is `text` now (the scenarios' replies are
 * unique: scope canary, conversation tag, pair number), or undefined (none,
 * or it was edited since).
 */
export async function assistantMessageWithText(pool: pg.Pool, text: string): Promise<{ id: string; conversationId: string } | undefined> {
  const {
    rows: [m],
  } = await pool.query<{ id: string; conversationId: string }>(
    `select id, conversation_id as "conversationId" from sourcebound.messages where role = 'assistant' and content = $1 limit 1`,
    [text],
  );
  return m;
}

/** Replies that carry their scope's canary at the start (so the echo summary repeats it: a positive control). */
export function scopedText(canary: string, tag: string) {
  return (i: number) => ({
    user: `${tag} question ${i}: what was fund ${i}'s NAV?`,
    assistant: `[${canary}] ${tag} fund ${i} had a NAV of ${100 + i}.25 on 2026-10-0${(i % 9) + 1}.`,
  });
}

/** Conversations spread over scopes, each with `pairs` completed pairs. */
export async function seedConversations(
  pool: pg.Pool,
  options: { count: number; pairs: number; canaries: Record<string, string> },
): Promise<{ id: string; scope: string }[]> {
  const scopes = Object.keys(options.canaries);
  const out: { id: string; scope: string }[] = [];
  for (let i = 0; i < options.count; i++) {
    const scope = scopes[i % scopes.length]!;
    const id = await createConversation(pool, scope);
    await addPairs(pool, id, options.pairs, scopedText(options.canaries[scope]!, `c${i}`));
    out.push({ id, scope });
  }
  return out;
}

/** Calls sourcebound.sweep_compaction() every `everyMs` (a SIGKILLed worker's job stays locked for hours). */
export function startSweeper(pool: pg.Pool, everyMs = 1000): { stop(): Promise<void>; sweeps: () => number } {
  let sweeps = 0;
  let running: Promise<unknown> = Promise.resolve();
  const timer = setInterval(() => {
    running = pool.query('select sourcebound.sweep_compaction()').then(
      () => {
        sweeps++;
      },
      () => {},
    );
  }, everyMs);
  return {
    async stop() {
      clearInterval(timer);
      await running;
    },
    sweeps: () => sweeps,
  };
}

/**
 * Waits until the system is quiet: every plannable range's current source is
 * completed or failed for good, no request is in flight, no compaction job is
 * runnable, and nothing changed for `stableMs`. Sweeps while it waits (what the
 * workers' crontab does every minute).
 */
export async function quiesce(
  pool: pg.Pool,
  server: MessagesServer,
  options: { timeoutMs: number; stableMs?: number; what?: string },
): Promise<void> {
  const deadline = Date.now() + options.timeoutMs;
  const stableMs = options.stableMs ?? 2000;
  let last = '';
  let since = Date.now();
  for (;;) {
    // The one-statement count first; the exact one (hashes over current texts) only when that says done.
    let open = await openRangesByIds(pool).catch(() => -1);
    if (open === 0) open = await openRanges(pool).catch(() => -1);
    const { rows } = await pool
      .query<{ runnable: number; changed: string; attempts: number }>(
        `select (select count(*)::int from graphile_worker._private_jobs j join graphile_worker._private_tasks t on t.id = j.task_id
               where t.identifier = 'compact_conversation' and j.locked_at is null and j.run_at <= now() + interval '1 second'
                 and j.attempts < j.max_attempts) as runnable,
              (select coalesce(max(updated_at), 'epoch')::text from sourcebound.conversation_summaries) as changed,
              (select count(*)::int from sourcebound.conversation_summary_attempts) as attempts`,
      )
      .catch(() => ({ rows: [{ runnable: -1, changed: '', attempts: -1 }] }));
    const r = rows[0]!;
    const quiet = open === 0 && server.inFlight === 0 && r.runnable === 0;
    const signature = JSON.stringify([server.count, r.changed, r.attempts]);
    if (!quiet || signature !== last) {
      last = quiet ? signature : '';
      since = Date.now();
    } else if (Date.now() - since >= stableMs) {
      return;
    }
    if (Date.now() > deadline) {
      throw new Error(
        `${options.what ?? 'scenario'}: not quiescent after ${options.timeoutMs} ms (${open} open ranges, ${server.inFlight} requests in flight, ${r.runnable} runnable jobs)`,
      );
    }
    if (open !== 0) await pool.query('select sourcebound.sweep_compaction()').catch(() => {});
    await sleep(500);
  }
}

export interface FinalChecks {
  coverage: CoverageReport;
  zero: Record<ZeroKey, number>;
  truncateAccepted: boolean;
  outcomes: Record<string, number>;
  attempts: number;
  spentAttempts: number;
  /** Summaries carrying their own scope's canary: the cross-scope probes' positive control. */
  ownCanarySummaries: number;
}

/**
 * Every end-of-scenario check: the coverage invariant through the projection,
 * the SQL figures, cross-scope probes, bad answers accepted (`acceptedBad`
 * is the scenario's own count; canary texts are counted here), and every
 * UPDATE/DELETE of settled rows.
 */
export async function finalChecks(
  pool: pg.Pool,
  options: { canaries: Record<string, string>; acceptedBad?: number; badCanary?: string },
): Promise<FinalChecks> {
  const coverage = await checkCoverage(pool, { project: true });
  const z = await zeroFigures(pool);
  const cross = await crossScopeRows(pool, options.canaries);
  const mutations = await tryMutations(pool);
  let acceptedBad = options.acceptedBad ?? 0;
  if (options.badCanary) {
    const { rows } = await pool.query<{ n: number }>(
      `select count(*)::int as n from sourcebound.conversation_summaries where status = 'completed' and strpos(summary, $1) > 0`,
      [options.badCanary],
    );
    acceptedBad += rows[0]!.n;
  }
  const { rows: outcomeRows } = await pool.query<{ outcome: string; spent: boolean; n: number }>(
    `select coalesce(outcome, 'open') as outcome, spent, count(*)::int as n from sourcebound.conversation_summary_attempts group by 1, 2 order by 1, 2`,
  );
  const outcomes: Record<string, number> = {};
  let attempts = 0;
  let spentAttempts = 0;
  for (const r of outcomeRows) {
    outcomes[r.outcome] = (outcomes[r.outcome] ?? 0) + r.n;
    attempts += r.n;
    if (r.spent) spentAttempts += r.n;
  }
  const zero: Record<ZeroKey, number> = {
    duplicateCompleted: z.duplicateCompleted,
    overTwoSpent: z.overTwoSpent,
    invariantViolations: coverage.violatingPairs,
    stuckClaims: z.stuckClaims,
    crossScopeRows: cross.leaked,
    acceptedBadSummaries: acceptedBad,
    completedRowMutations: mutations.completedRowMutations,
    settledRowMutations: mutations.settledRowMutations,
    completedWithoutOk: z.completedWithoutOk,
    ledgerMismatch: z.ledgerMismatch,
    openAttemptMismatch: z.openAttemptMismatch,
    foreignSources: z.foreignSources,
    pairsDrift: coverage.pairsDrift,
  };
  return {
    coverage,
    zero,
    truncateAccepted: mutations.truncateAccepted,
    outcomes,
    attempts,
    spentAttempts,
    ownCanarySummaries: cross.ownCanarySummaries,
  };
}

/** Builds, writes and returns a scenario's figures. */
export function recordFigures(args: {
  id: string;
  title: string;
  startedAt: number;
  checks: FinalChecks;
  server: MessagesServer;
  modelRequests?: number;
  fleet?: Fleet | Fleet[];
  faults: Record<string, number | string>;
  notes?: string[];
}): ScenarioFigures {
  const { checks } = args;
  const fleets = args.fleet === undefined ? [] : Array.isArray(args.fleet) ? args.fleet : [args.fleet];
  const figures: ScenarioFigures = {
    id: args.id,
    title: args.title,
    size: FULL ? 'full' : 'quick',
    wallSeconds: (Date.now() - args.startedAt) / 1000,
    conversations: checks.coverage.conversations,
    pairs: checks.coverage.pairs,
    ranges: checks.coverage.plannableRanges,
    completedRanges: checks.coverage.summarizedRanges,
    failedRanges: checks.coverage.failedRanges,
    modelRequests: args.modelRequests ?? args.server.count,
    attempts: checks.attempts,
    spentAttempts: checks.spentAttempts,
    outcomes: checks.outcomes,
    faults: args.faults,
    unexpectedExits: fleets.reduce((n, f) => n + f.unexpectedExits().length, 0),
    zero: checks.zero,
    truncateAccepted: checks.truncateAccepted,
    notes: [
      ...(args.notes ?? []),
      `cross-scope probes' positive control: ${checks.ownCanarySummaries} summaries carry their own scope's canary`,
      ...(checks.coverage.pendingRanges > 0 ? [`${checks.coverage.pendingRanges} ranges still pending at the end`] : []),
      ...(checks.coverage.violations.length > 0 ? [`violations: ${JSON.stringify(checks.coverage.violations.slice(0, 5))}`] : []),
    ],
  };
  writeScenarioFigures(figures);
  return figures;
}

/** The must-be-0 figures that are not 0. */
export function nonZero(figures: ScenarioFigures): Partial<Record<ZeroKey, number>> {
  return Object.fromEntries(ZERO_KEYS.filter((k) => figures.zero[k] !== 0).map((k) => [k, figures.zero[k]]));
}

/** The assertions every scenario ends with: all must-be-0 figures are 0, and the cross-scope probes could have seen a leak. */
export function expectZeroFigures(figures: ScenarioFigures, checks: FinalChecks): void {
  expect(nonZero(figures)).toEqual({});
  expect(checks.ownCanarySummaries).toBeGreaterThan(0);
}
