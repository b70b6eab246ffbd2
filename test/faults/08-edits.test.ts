import { afterAll, describe, expect, it } from 'vitest';
import type pg from 'pg';
import { sourceHash } from '../../src/conversation/source-hash.ts';
import { projectConversationHistory } from '../../src/projection/index.ts';
import { createTestDatabase } from '../support/db.ts';
import { behaviours, startMessagesServer } from '../support/messages-server.ts';
import { Fleet, workerEnv } from './support/fleet.ts';
import { checkCoverage, HUGE_BUDGET } from './support/invariants.ts';
import {
  assistantMessageWithText,
  expectZeroFigures,
  finalChecks,
  harnessPool,
  quiesce,
  recordFigures,
  requestReplies,
  scopeCanaries,
  seedConversations,
  size,
  sleep,
} from './support/scenario.ts';

/**
 * Scenario 8, edits under way. While two workers compact against a slow
 * model, an editor changes messages: replies of the very range being
 * summarized (the commit must find the source changed and record it stale),
 * user and assistant messages of completed ranges (the summary stops binding
 * at once), runs failed and restored (pairs leave and return, indexes shift),
 * and edits reverted to the original text (the old record binds again, with
 * no new model call). A watcher projects conversations all along, each in one
 * REPEATABLE READ snapshot, and checks every summary it was given against the
 * sources in that same snapshot: a stale summary must never be projected.
 */

const CONVERSATIONS = size(8, 30);
const EDIT_MS = size(25_000, 90_000);
const REVERT_CONVERSATIONS = size(2, 6);

const db = await createTestDatabase();
const server = await startMessagesServer();
const pool = harnessPool(db.url, 10);
const fleet = new Fleet(2, workerEnv(db.url, server));
afterAll(async () => {
  await fleet.stop();
  await pool.end();
  await server.close();
});

interface Conv {
  id: string;
  scope: string;
}

/** Projects one conversation and checks each summary it used against the sources, in one snapshot. */
async function watchOnce(c: Conv): Promise<{ summaries: number; stale: number }> {
  const client = await pool.connect();
  try {
    await client.query('begin isolation level repeatable read read only');
    // Half the whole history: a history that fits is sent raw, so the budget must need summaries to show them.
    const whole = await projectConversationHistory({
      pool: client,
      conversationId: c.id,
      scope: c.scope,
      budgetBytes: HUGE_BUDGET,
      persistLayout: false,
    });
    const projection = await projectConversationHistory({
      pool: client,
      conversationId: c.id,
      scope: c.scope,
      budgetBytes: Math.floor(whole.bytes / 2),
      layout: 'newest-first',
    });
    let summaries = 0;
    let stale = 0;
    for (const item of projection.items) {
      if (item.kind !== 'summary') continue;
      summaries++;
      if (!(await bindsNow(client, c.id, item.recordId, item.fromPair))) stale++;
    }
    await client.query('rollback');
    return { summaries, stale };
  } finally {
    client.release();
  }
}

async function bindsNow(db: pg.PoolClient | pg.Pool, conversationId: string, recordId: string, fromPair: number): Promise<boolean> {
  const { rows: pairs } = await db.query<{ userMessageId: string; userText: string; assistantMessageId: string; assistantText: string }>(
    `select user_message_id as "userMessageId", user_text as "userText", assistant_message_id as "assistantMessageId", assistant_text as "assistantText"
     from sourcebound.eligible_pairs where conversation_id = $1 and pair_index between $2 and $2 + 9 order by pair_index`,
    [conversationId, fromPair],
  );
  const {
    rows: [r],
  } = await db.query<{ status: string; ids: string[]; hash: string; version: number }>(
    `select status, source_message_ids::text[] as ids, source_hash as hash, hash_version as version from sourcebound.conversation_summaries where id = $1`,
    [recordId],
  );
  if (!r || r.status !== 'completed' || pairs.length !== 10) return false;
  const ids = pairs.flatMap((p) => [p.userMessageId, p.assistantMessageId]);
  return JSON.stringify(ids) === JSON.stringify(r.ids) && sourceHash(pairs, r.version) === r.hash;
}

const pick = <T>(items: readonly T[]): T | undefined => items[Math.floor(Math.random() * items.length)];

describe('fault scenario 8: edits under way', () => {
  it('no stale summary is ever projected; edited ranges are summarized again; reverted ones reuse their record', async () => {
    const startedAt = Date.now();
    server.setDefault(behaviours.echo(1500));
    const canaries = scopeCanaries(['tenant-a', 'tenant-b']);
    const conversations: Conv[] = await seedConversations(pool, { count: CONVERSATIONS, pairs: 45, canaries });
    // Reverts happen in conversations no other edit touches, so "binds again" is exact.
    const revertSet = conversations.slice(0, REVERT_CONVERSATIONS).map((c) => c.id);
    const editable = conversations.slice(REVERT_CONVERSATIONS);
    await fleet.start();

    const watch = { projections: 0, summaries: 0, stale: 0 };
    let watching = true;
    const watcher = (async () => {
      while (watching) {
        const r = await watchOnce(pick(conversations)!);
        watch.projections++;
        watch.summaries += r.summaries;
        watch.stale += r.stale;
        await sleep(50);
      }
    })();

    const edits = { 'in flight': 0, 'after completion': 0, 'runs failed/restored': 0, reverted: 0, 'summary used right after its edit': 0 };
    const reverted: string[] = [];
    const failedRuns: string[] = [];
    const deadline = Date.now() + EDIT_MS;
    let seen = 0;
    for (let step = 0; Date.now() < deadline; step++) {
      await sleep(400);
      // 1. A reply of a range whose request just went out.
      const fresh = server.requests.slice(seen);
      seen = server.requests.length;
      const latest = fresh.at(-1);
      if (latest && server.inFlight > 0) {
        // Its replies are named by pair number: the message is found by the text it was sent with.
        const reply = pick(requestReplies(latest.body));
        const message = reply === undefined ? undefined : await assistantMessageWithText(pool, reply.text);
        const id = message?.id;
        const owner = message?.conversationId;
        if (id && owner && !revertSet.includes(owner)) {
          await pool.query(`update sourcebound.messages set content = content || ' [edited in flight]' where id = $1`, [id]);
          edits['in flight']++;
        }
      }
      // 2. A message of a completed range: user text on even steps, assistant text on odd ones.
      if (step % 3 === 0) {
        const {
          rows: [done],
        } = await pool.query<{ id: string; conversationId: string; ids: string[] }>(
          `select id, conversation_id as "conversationId", source_message_ids::text[] as ids from sourcebound.conversation_summaries
           where status = 'completed' and conversation_id <> all($1::uuid[]) order by random() limit 1`,
          [revertSet],
        );
        if (done) {
          const target = done.ids[Math.floor(Math.random() * 10) * 2 + (step % 2)]!;
          await pool.query(`update sourcebound.messages set content = content || ' [edited after]' where id = $1`, [target]);
          edits['after completion']++;
          const c = conversations.find((x) => x.id === done.conversationId)!;
          const whole = await projectConversationHistory({
            pool,
            conversationId: c.id,
            scope: c.scope,
            budgetBytes: HUGE_BUDGET,
            persistLayout: false,
          });
          const p = await projectConversationHistory({
            pool,
            conversationId: c.id,
            scope: c.scope,
            budgetBytes: Math.floor(whole.bytes / 2),
            layout: 'newest-first',
          });
          if (p.items.some((i) => i.kind === 'summary' && i.recordId === done.id)) edits['summary used right after its edit']++;
        }
      }
      // 3. A run fails (its pair leaves, later pairs shift), and a previously failed one comes back.
      if (step % 5 === 2) {
        const back = failedRuns.shift();
        if (back) await pool.query(`update sourcebound.runs set status = 'completed' where id = $1`, [back]);
        const c = pick(editable)!;
        const {
          rows: [run],
        } = await pool.query<{ runId: string }>(
          `select run_id as "runId" from sourcebound.pairs where conversation_id = $1 and pair_index = $2`,
          [c.id, Math.floor(Math.random() * 20)],
        );
        if (run) {
          await pool.query(`update sourcebound.runs set status = 'failed' where id = $1`, [run.runId]);
          failedRuns.push(run.runId);
          edits['runs failed/restored']++;
        }
      }
      // 4. An edit of a completed range, reverted a moment later to the exact original.
      if (step % 7 === 4) {
        const {
          rows: [done],
        } = await pool.query<{ id: string; ids: string[] }>(
          `select id, source_message_ids::text[] as ids from sourcebound.conversation_summaries s
           where status = 'completed' and conversation_id = any($1::uuid[])
           order by random() limit 1`,
          [revertSet],
        );
        const target = done?.ids[1];
        if (done && target) {
          const {
            rows: [m],
          } = await pool.query<{ content: string }>('select content from sourcebound.messages where id = $1', [target]);
          await pool.query(`update sourcebound.messages set content = 'temporarily different' where id = $1`, [target]);
          await sleep(300);
          await pool.query('update sourcebound.messages set content = $2 where id = $1', [target, m!.content]);
          edits.reverted++;
          reverted.push(done.id);
        }
      }
    }
    for (const run of failedRuns) await pool.query(`update sourcebound.runs set status = 'completed' where id = $1`, [run]);

    server.setDefault(behaviours.echo(200));
    await quiesce(pool, server, { timeoutMs: size(240_000, 600_000), what: 'edits' });
    watching = false;
    await watcher;
    // One more full pass of the watcher over every conversation, at rest.
    for (const c of conversations) {
      const r = await watchOnce(c);
      watch.projections++;
      watch.summaries += r.summaries;
      watch.stale += r.stale;
    }

    // A reverted range's original record binds again: the same identity, so no new summary was made for it.
    const coverage = await checkCoverage(pool);
    let reusedRecords = 0;
    for (const id of reverted) {
      const {
        rows: [r],
      } = await pool.query<{ conversationId: string; fromPair: number }>(
        `select conversation_id as "conversationId", from_pair as "fromPair" from sourcebound.conversation_summaries where id = $1`,
        [id],
      );
      if (r && (await bindsNow(pool, r.conversationId, id, r.fromPair))) reusedRecords++;
    }

    const checks = await finalChecks(pool, { canaries });
    // A stale summary projected counts its ten pairs as violations.
    checks.zero.invariantViolations += 10 * (watch.stale + edits['summary used right after its edit']);
    const figures = recordFigures({
      id: '8-edits',
      title: 'edits while ranges are in flight and after completion',
      startedAt,
      checks,
      server,
      fleet,
      faults: {
        'edits in flight': edits['in flight'],
        'edits after completion': edits['after completion'],
        'runs failed and restored': edits['runs failed/restored'],
        'edits reverted': edits.reverted,
        'stale commits recorded': checks.outcomes['stale'] ?? 0,
        'watched projections': watch.projections,
        'stale summaries projected': watch.stale + edits['summary used right after its edit'],
      },
      notes: [
        `watcher checked ${watch.summaries} projected summaries against their sources in the same snapshot`,
        `reverted edits whose original record binds again: ${reusedRecords} of ${reverted.length}; summarized ranges at the end: ${coverage.summarizedRanges}`,
      ],
    });

    expectZeroFigures(figures, checks);
    expect(watch.stale).toBe(0);
    expect(watch.summaries).toBeGreaterThan(0);
    expect(edits['summary used right after its edit']).toBe(0);
    expect(checks.outcomes['stale'] ?? 0).toBeGreaterThan(0);
    expect(reverted.length).toBeGreaterThan(0);
    expect(reusedRecords).toBe(reverted.length);
    expect(figures.completedRanges + figures.failedRanges).toBe(figures.ranges);
    expect(figures.unexpectedExits).toBe(0);
  });
});
