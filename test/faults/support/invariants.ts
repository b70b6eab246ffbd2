import pg from 'pg';
import { isProjectable } from '../../../src/gateway/prompts.ts';
import { sourceHash, sourceMessageIds, type SourcePair } from '../../../src/conversation/source-hash.ts';
import { plannableRangeCount, RANGE_SIZE } from '../../../src/conversation/plan.ts';
import { ConversationNotFoundError, projectConversationHistory, type ConversationProjection } from '../../../src/projection/index.ts';
import { ConversationReader } from '../../../src/projection/reader.ts';

/**
 * The checks every fault scenario ends with. All of them read the database
 * (and the read projection) directly; none trusts a worker's logs.
 *
 * Coverage invariant: every eligible pair of every conversation is
 * - in exactly one completed, binding-valid summary (its 20 ids and its source
 *   hash, recomputed with src/conversation/source-hash.ts over the current texts, match), and the
 *   projection's verdict for its range is that summary (a history that fits is
 *   sent raw, so the whole projection under a huge budget is checked raw, and
 *   what it would show in place of each range is the reader's verdict); or
 * - raw and projected raw, in a plannable range that still has a live or
 *   retriable job (an unlocked job, a live lease, or a range the sweep
 *   re-enqueues); or
 * - raw and projected raw, in a range whose current source has a recorded
 *   final failure; or
 * - raw and projected raw, outside every plannable range (the newest pairs).
 * Anything else is a violation, counted per pair.
 */

/** A budget no test conversation reaches: the projection then shows everything. */
export const HUGE_BUDGET = 2 ** 40;

export type Queryable = Pick<pg.ClientBase, 'query'>;

interface PairRow extends SourcePair {
  pairIndex: number;
}

interface RecordRow {
  id: string;
  fromPair: number;
  toPair: number;
  sourceMessageIds: string[];
  sourceHash: string;
  hashVersion: number;
  promptVersion: string;
  status: string;
  summary: string | null;
  leaseLive: boolean;
}

export interface Violation {
  conversationId: string;
  pairIndex: number;
  problem: string;
}

export interface CoverageReport {
  conversations: number;
  pairs: number;
  plannableRanges: number;
  summarizedRanges: number;
  failedRanges: number;
  pendingRanges: number;
  /** Full ranges beyond the plannable ones that still carry a valid summary (pairs removed after it was made). */
  summarizedUnplannableRanges: number;
  /** Pairs that break the invariant. */
  violatingPairs: number;
  violations: Violation[];
  /** Rows where sourcebound.pairs differs from the eligibility definition. */
  pairsDrift: number;
}

/** Reads pairs and records of a conversation and classifies every range, with or without the projection. */
export async function checkCoverage(
  pool: pg.Pool,
  options: { project?: boolean; conversationIds?: string[] } = {},
): Promise<CoverageReport> {
  const report: CoverageReport = {
    conversations: 0,
    pairs: 0,
    plannableRanges: 0,
    summarizedRanges: 0,
    failedRanges: 0,
    pendingRanges: 0,
    summarizedUnplannableRanges: 0,
    violatingPairs: 0,
    violations: [],
    pairsDrift: 0,
  };
  const client = await pool.connect();
  try {
    // One snapshot for the reads and the projection, so a late commit cannot tear the picture.
    await client.query('begin isolation level repeatable read read only');
    const conversations = (
      await client.query<{ id: string; scope: string }>(
        'select id, scope from sourcebound.conversations where $1::uuid[] is null or id = any($1::uuid[]) order by id',
        [options.conversationIds ?? null],
      )
    ).rows;
    for (const c of conversations) await checkConversation(client, c, options.project ?? true, report);
    await client.query('rollback');
  } finally {
    client.release();
  }
  report.violatingPairs = new Set(report.violations.map((v) => `${v.conversationId}:${v.pairIndex}`)).size;
  return report;
}

async function checkConversation(db: Queryable, c: { id: string; scope: string }, project: boolean, report: CoverageReport): Promise<void> {
  report.conversations++;
  const pairs = (
    await db.query<PairRow>(
      `select pair_index as "pairIndex", user_message_id as "userMessageId", user_text as "userText",
            assistant_message_id as "assistantMessageId", assistant_text as "assistantText"
     from sourcebound.eligible_pairs where conversation_id = $1 order by pair_index`,
      [c.id],
    )
  ).rows;
  const records = (
    await db.query<RecordRow>(
      `select id, from_pair as "fromPair", to_pair as "toPair", source_message_ids::text[] as "sourceMessageIds",
            source_hash as "sourceHash", hash_version as "hashVersion", prompt_version as "promptVersion", status, summary,
            coalesce(lease_expires_at > now(), false) as "leaseLive"
     from sourcebound.conversation_summaries where conversation_id = $1`,
      [c.id],
    )
  ).rows;
  const unlockedJobs = (
    await db.query<{ n: number }>(
      `select count(*)::int as n from graphile_worker._private_jobs j join graphile_worker._private_tasks t on t.id = j.task_id
     where t.identifier = 'compact_conversation' and j.locked_at is null and j.payload->>'conversationId' = $1`,
      [c.id],
    )
  ).rows[0]!.n;
  report.pairsDrift += (await db.query('select 1 from sourcebound.pairs_drift($1)', [c.id])).rowCount ?? 0;

  const violate = (pairIndex: number, problem: string) => report.violations.push({ conversationId: c.id, pairIndex, problem });
  const n = pairs.length;
  report.pairs += n;
  pairs.forEach((p, i) => {
    if (p.pairIndex !== i) violate(i, `pair indexes not dense (found ${p.pairIndex})`);
  });
  const plannable = plannableRangeCount(n);
  report.plannableRanges += plannable;

  // What the projection shows for each pair: raw, or a summary record.
  const shown: { kind: 'pair' | 'summary'; recordId?: string }[][] = Array.from({ length: n }, () => []);
  // Ranges the projection showed raw, and why their summary was not used.
  const shownRaw = new Map<number, string>();
  if (project) {
    let projection: ConversationProjection;
    try {
      projection = await projectConversationHistory({
        pool: db,
        conversationId: c.id,
        scope: c.scope,
        budgetBytes: HUGE_BUDGET,
        layout: 'newest-first',
      });
    } catch (error) {
      for (let i = 0; i < n; i++) violate(i, `projection failed: ${(error as Error).message}`);
      return;
    }
    // A history that fits is sent whole and raw: every pair, byte for byte as stored.
    if (projection.omitted.length > 0) violate(projection.omitted[0]!.fromPair, 'projection omitted pairs under a huge budget');
    for (const item of projection.items) {
      const p = item.kind === 'pair' ? pairs[item.pairIndex] : undefined;
      if (
        item.kind !== 'pair' ||
        !p ||
        p.userMessageId !== item.userMessageId ||
        p.assistantMessageId !== item.assistantMessageId ||
        p.userText !== item.userText ||
        p.assistantText !== item.assistantText
      ) {
        violate(item.kind === 'pair' ? item.pairIndex : item.fromPair, 'a whole history that fits was not projected raw as stored');
      }
    }
    // What the projection would show in place of each range when the budget needs it: its verdict (binding.ts).
    const reader = new ConversationReader(db, {
      conversationId: c.id,
      scope: c.scope,
      count: n,
      budgetBytes: HUGE_BUDGET,
      onRead: undefined,
    });
    for (let from = 0; from < n; from += RANGE_SIZE) {
      const verdict = await reader.summary(from / RANGE_SIZE);
      if (verdict === 'changed') {
        violate(from, 'the pairs changed while the verdict read them');
        continue;
      }
      if (verdict.kind === 'usable') {
        const item = verdict.item;
        item.userMessages.forEach((m) => {
          const p = pairs[m.pairIndex];
          if (!p || p.userMessageId !== m.messageId || p.userText !== m.text)
            violate(m.pairIndex, 'summarized user message differs from the stored one');
        });
        for (let i = item.fromPair; i <= item.toPair && i < n; i++) shown[i]!.push({ kind: 'summary', recordId: item.recordId });
      } else {
        shownRaw.set(from, verdict.reason);
        for (let i = from; i < Math.min(from + RANGE_SIZE, n); i++) shown[i]!.push({ kind: 'pair' });
      }
    }
  }

  const fullRanges = Math.floor(n / RANGE_SIZE);
  for (let k = 0; k < fullRanges; k++) {
    const from = k * RANGE_SIZE;
    const rangePairs = pairs.slice(from, from + RANGE_SIZE);
    const ids = sourceMessageIds(rangePairs);
    const binds = (r: RecordRow) =>
      r.fromPair === from &&
      r.toPair === from + RANGE_SIZE - 1 &&
      r.sourceMessageIds.length === ids.length &&
      r.sourceMessageIds.every((id, i) => id.toLowerCase() === ids[i]) &&
      hashMatches(r, rangePairs);
    const valid = records.filter((r) => r.status === 'completed' && isProjectable(r.promptVersion) && binds(r));
    const expectRaw = () => {
      for (let i = from; i < from + RANGE_SIZE; i++) {
        const s = shown[i]!;
        if (project && (s.length !== 1 || s[0]!.kind !== 'pair')) violate(i, `expected raw exactly once, projected ${JSON.stringify(s)}`);
      }
    };
    if (valid.length > 1) {
      for (let i = from; i < from + RANGE_SIZE; i++) violate(i, `${valid.length} completed binding-valid summaries`);
      continue;
    }
    // A valid summary is shown unless it may not be: inside the newest 20, or not smaller than its originals.
    const withheld = shownRaw.get(from);
    if (valid.length === 1 && withheld !== undefined && ['larger_than_original', 'not_plannable'].includes(withheld)) {
      report.summarizedUnplannableRanges += withheld === 'not_plannable' ? 1 : 0;
      expectRaw();
      continue;
    }
    if (valid.length === 1) {
      if (k < plannable) report.summarizedRanges++;
      else report.summarizedUnplannableRanges++;
      for (let i = from; i < from + RANGE_SIZE; i++) {
        const s = shown[i]!;
        if (project && (s.length !== 1 || s[0]!.kind !== 'summary' || s[0]!.recordId !== valid[0]!.id)) {
          violate(i, `expected summary ${valid[0]!.id} exactly once, projected ${JSON.stringify(s)}`);
        }
      }
      continue;
    }
    expectRaw();
    if (k >= plannable) continue;
    if (records.some((r) => r.status === 'failed' && binds(r))) {
      report.failedRanges++;
      continue;
    }
    const liveClaim = records.some((r) => r.status === 'running' && r.leaseLive && binds(r));
    const sweepable = (await db.query<{ ok: boolean }>('select sourcebound.range_needs_work($1, $2) as ok', [c.id, from])).rows[0]!.ok;
    if (unlockedJobs > 0 || liveClaim || sweepable) report.pendingRanges++;
    else for (let i = from; i < from + RANGE_SIZE; i++) violate(i, 'raw, not failed, and no live or retriable job');
  }
  for (let i = fullRanges * RANGE_SIZE; i < n; i++) {
    const s = shown[i]!;
    if (project && (s.length !== 1 || s[0]!.kind !== 'pair'))
      violate(i, `tail pair: expected raw exactly once, projected ${JSON.stringify(s)}`);
  }
}

function hashMatches(r: RecordRow, pairs: SourcePair[]): boolean {
  try {
    return sourceHash(pairs, r.hashVersion) === r.sourceHash.toLowerCase();
  } catch {
    return false;
  }
}

/**
 * Plannable ranges with no completed or failed record for their current ids:
 * one SQL statement, blind to text edits that keep the ids (openRanges sees those).
 */
export async function openRangesByIds(db: Queryable): Promise<number> {
  const { rows } = await db.query<{ n: number }>(
    `with pc as (select conversation_id, (max(pair_index) + 1)::int as n from sourcebound.pairs group by conversation_id),
          r as (select pc.conversation_id, 10 * k as from_pair
                from pc cross join generate_series(0, sourcebound.plannable_range_count(pc.n) - 1) k)
     select count(*)::int as n from r
     where not exists (
       select 1 from sourcebound.conversation_summaries s
       where s.conversation_id = r.conversation_id and s.from_pair = r.from_pair and s.status in ('completed', 'failed')
         and s.source_message_ids = array(
           select ids.id from sourcebound.pairs p
           cross join lateral unnest(array[p.user_message_id, p.assistant_message_id]) with ordinality as ids(id, n)
           where p.conversation_id = r.conversation_id and p.pair_index between r.from_pair and r.from_pair + 9
           order by p.pair_index, ids.n))`,
  );
  return rows[0]!.n;
}

/** Plannable ranges whose current source has no completed or failed record yet (ids and hash; no projection). */
export async function openRanges(pool: pg.Pool): Promise<number> {
  const report = await checkCoverage(pool, { project: false });
  return report.pendingRanges + report.violations.length;
}

export interface ZeroFigures {
  /** Completed records sharing one identity (conversation, range, hash, model, prompt version). */
  duplicateCompleted: number;
  /** Identities with more than two spent attempt rows. */
  overTwoSpent: number;
  /** Records whose attempts_spent differs from their spent attempt rows. */
  ledgerMismatch: number;
  /** Completed records without exactly one `ok` attempt (a partial commit, or a result nobody's attempt made). */
  completedWithoutOk: number;
  /** Attempts still open although their record is not running, or running records without exactly one open attempt. */
  openAttemptMismatch: number;
  /** Running records whose lease has expired and which no unlocked job will take over. */
  stuckClaims: number;
  /** Summaries binding a message of another conversation. */
  foreignSources: number;
}

/** The SQL figures that must be 0 after quiescence. */
export async function zeroFigures(db: Queryable): Promise<ZeroFigures> {
  const one = async (sql: string) => (await db.query<{ n: number }>(sql)).rows[0]!.n;
  return {
    duplicateCompleted: await one(`select count(*)::int as n from (
        select 1 from sourcebound.conversation_summaries where status = 'completed'
        group by conversation_id, from_pair, to_pair, source_hash, model, prompt_version having count(*) > 1) d`),
    overTwoSpent: await one(`select count(*)::int as n from (
        select 1 from sourcebound.conversation_summary_attempts where spent group by summary_id having count(*) > 2) d`),
    ledgerMismatch: await one(`select count(*)::int as n from sourcebound.conversation_summaries s
        where s.attempts_spent <> (select count(*) from sourcebound.conversation_summary_attempts a where a.summary_id = s.id and a.spent)`),
    completedWithoutOk: await one(`select count(*)::int as n from sourcebound.conversation_summaries s
        where s.status = 'completed' and (select count(*) from sourcebound.conversation_summary_attempts a
          where a.summary_id = s.id and a.outcome = 'ok' and a.spent) <> 1`),
    openAttemptMismatch: await one(`select count(*)::int as n from sourcebound.conversation_summaries s
        where (select count(*) from sourcebound.conversation_summary_attempts a where a.summary_id = s.id and a.outcome is null)
              <> (case when s.status = 'running' then 1 else 0 end)`),
    stuckClaims: await one(`select count(*)::int as n from sourcebound.conversation_summaries s
        where s.status = 'running' and s.lease_expires_at <= now()
          and not exists (select 1 from graphile_worker._private_jobs j join graphile_worker._private_tasks t on t.id = j.task_id
                          where t.identifier = 'compact_conversation' and j.locked_at is null
                            and j.payload->>'conversationId' = s.conversation_id::text)`),
    foreignSources: await one(`select count(*)::int as n from sourcebound.conversation_summaries s
        where exists (select 1 from unnest(s.source_message_ids) as src(id)
                      join sourcebound.messages m on m.id = src.id where m.conversation_id <> s.conversation_id)`),
  };
}

export interface MutationFigures {
  /** UPDATE/DELETE statements on completed records that changed a row (must be 0). */
  completedRowMutations: number;
  /** The same on failed records and on settled attempts (must be 0). */
  settledRowMutations: number;
  /** Statements tried. */
  tried: number;
  /** Whether `TRUNCATE ... CASCADE` of the summaries table went through (rolled back at once). */
  truncateAccepted: boolean;
}

/**
 * Tries every UPDATE and DELETE we can think of on every completed record,
 * every failed record and every settled attempt, each in its own
 * subtransaction that is then rolled back, and counts the ones that changed a
 * row. Nothing is left changed.
 */
export async function tryMutations(pool: pg.Pool): Promise<MutationFigures> {
  const client = await pool.connect();
  try {
    await client.query(`create or replace function pg_temp.sb_try(stmt text, id uuid) returns int language plpgsql as $$
      declare n int := 0;
      begin
        begin
          execute stmt using id;
          get diagnostics n = row_count;
          raise exception using errcode = 'SBUND', message = 'undo';
        exception when others then
          -- The guard's refusal or our own undo: either way nothing stays changed; n says whether it went through.
          null;
        end;
        return n;
      end $$`);
    await client.query(`create or replace function pg_temp.sb_try_attempt(stmt text, id bigint) returns int language plpgsql as $$
      declare n int := 0;
      begin
        begin
          execute stmt using id;
          get diagnostics n = row_count;
          raise exception using errcode = 'SBUND', message = 'undo';
        exception when others then null;
        end;
        return n;
      end $$`);
    const onSummaries = [
      `update sourcebound.conversation_summaries set summary = summary || ' (tampered)' where id = $1`,
      `update sourcebound.conversation_summaries set status = 'pending' where id = $1`,
      `update sourcebound.conversation_summaries set source_hash = repeat('0', 64) where id = $1`,
      `update sourcebound.conversation_summaries set attempts_spent = 0 where id = $1`,
      `update sourcebound.conversation_summaries set completed_at = now(), failure_reason = 'x' where id = $1`,
      `delete from sourcebound.conversation_summaries where id = $1`,
    ];
    const onAttempts = [
      `update sourcebound.conversation_summary_attempts set spent = not spent where id = $1`,
      `update sourcebound.conversation_summary_attempts set outcome = null, finished_at = null, spent = null where id = $1`,
      `delete from sourcebound.conversation_summary_attempts where id = $1`,
    ];
    let completedRowMutations = 0;
    let settledRowMutations = 0;
    let tried = 0;
    for (const stmt of onSummaries) {
      const { rows } = await client.query<{ status: string; n: number; tried: number }>(
        `select status, coalesce(sum(pg_temp.sb_try($1, id)), 0)::int as n, count(*)::int as tried
         from sourcebound.conversation_summaries where status in ('completed', 'failed') group by status`,
        [stmt],
      );
      for (const r of rows) {
        tried += r.tried;
        if (r.status === 'completed') completedRowMutations += r.n;
        else settledRowMutations += r.n;
      }
    }
    for (const stmt of onAttempts) {
      const { rows } = await client.query<{ n: number; tried: number }>(
        `select coalesce(sum(pg_temp.sb_try_attempt($1, id)), 0)::int as n, count(*)::int as tried
         from sourcebound.conversation_summary_attempts where outcome is not null`,
        [stmt],
      );
      tried += rows[0]!.tried;
      settledRowMutations += rows[0]!.n;
    }
    let truncateAccepted = false;
    await client.query('begin');
    try {
      await client.query('truncate sourcebound.conversation_summaries cascade');
      truncateAccepted = true;
    } catch {
      truncateAccepted = false;
    } finally {
      await client.query('rollback');
    }
    return { completedRowMutations, settledRowMutations, tried, truncateAccepted };
  } finally {
    client.release();
  }
}

/**
 * Cross-scope probes: every conversation projected under every other scope
 * must be "not found"; no summary or projection of a scope may contain
 * another scope's canary. Returns the rows that leaked (must be 0), and how
 * many summaries carry their own scope's canary (the positive control).
 */
export async function crossScopeRows(
  pool: pg.Pool,
  canaries: Record<string, string>,
): Promise<{ leaked: number; ownCanarySummaries: number }> {
  let leaked = 0;
  const scopes = Object.keys(canaries);
  const conversations = (await pool.query<{ id: string; scope: string }>('select id, scope from sourcebound.conversations')).rows;
  for (const c of conversations) {
    for (const other of scopes) {
      if (other === c.scope) continue;
      try {
        const p = await projectConversationHistory({ pool, conversationId: c.id, scope: other, budgetBytes: HUGE_BUDGET });
        leaked += Math.max(1, p.items.length);
      } catch (error) {
        if (!(error instanceof ConversationNotFoundError)) throw error;
      }
    }
    const own = await projectConversationHistory({ pool, conversationId: c.id, scope: c.scope, budgetBytes: HUGE_BUDGET });
    const text = JSON.stringify(own.items);
    for (const [scope, canary] of Object.entries(canaries)) if (scope !== c.scope && text.includes(canary)) leaked++;
  }
  for (const [scope, canary] of Object.entries(canaries)) {
    const { rows } = await pool.query<{ n: number }>(
      `select count(*)::int as n from sourcebound.conversation_summaries where scope <> $1 and strpos(coalesce(summary, ''), $2) > 0`,
      [scope, canary],
    );
    leaked += rows[0]!.n;
  }
  // Positive control: each scope's own summaries do carry its canary, so the probes above can see a leak.
  let ownCanarySummaries = 0;
  for (const [scope, canary] of Object.entries(canaries)) {
    const { rows } = await pool.query<{ n: number }>(
      `select count(*)::int as n from sourcebound.conversation_summaries where scope = $1 and strpos(coalesce(summary, ''), $2) > 0`,
      [scope, canary],
    );
    ownCanarySummaries += rows[0]!.n;
  }
  return { leaked, ownCanarySummaries };
}
