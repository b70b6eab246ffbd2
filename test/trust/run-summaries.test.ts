import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { evaluate, loadState } from '../../src/run/assemble.ts';
import { candidateOver } from '../../src/run/candidate.ts';
import { resolvePolicy } from '../../src/run/policy.ts';
import { recoverRunContext } from '../../src/run/index.ts';
import type { SummaryRequest } from '../../src/support/summary-contract.ts';
import { createTestDatabase } from '../support/db.ts';
import { createRuntimeRoles } from '../support/roles.ts';
import { buildRun, INPUT, ok, prepareChecked, recordingSummarizer, SMALL_POLICY } from '../run/support/fixtures.ts';

/**
 * System 2 (run compaction) as the runtime roles: a run summary becomes a
 * checkpoint only through sourcebound.run_checkpoint_commit(), which settles
 * its request `ok` with its grounding verdict in the same call. No runtime
 * role writes a settlement or a checkpoint directly.
 */
const db = await createTestDatabase();
const scope = 'tenant-a';
const other = 'tenant-b';
const NONE = '00000000-0000-4000-8000-000000000000';

const { names, poolAs } = await createRuntimeRoles(db, 's2');

let app: pg.Pool;
let worker: pg.Pool;
let reader: pg.Pool;

beforeAll(async () => {
  app = poolAs(names.app);
  worker = poolAs(names.worker);
  reader = poolAs(names.reader);
});

interface Refusal {
  code: string;
  message: string;
  constraint?: string;
}

/** Runs `sql` in a transaction that is rolled back; the error it raised. */
async function refusal(pool: pg.Pool, sql: string, params: unknown[] = []): Promise<Refusal> {
  const client = await pool.connect();
  try {
    await client.query('begin');
    await client.query(sql, params);
  } catch (error) {
    const e = error as Refusal;
    return { code: e.code, message: e.message, constraint: e.constraint };
  } finally {
    await client.query('rollback').catch(() => {});
    client.release();
  }
  throw new Error(`not refused: ${sql}`);
}

/** Runs `sql` in a transaction that is rolled back; its first row. */
async function rolledBack<T>(pool: pg.Pool, sql: string, params: unknown[]): Promise<T> {
  const client = await pool.connect();
  try {
    await client.query('begin');
    return (await client.query(sql, params)).rows[0] as T;
  } finally {
    await client.query('rollback').catch(() => {});
    client.release();
  }
}

const COMMIT = 'select sourcebound.run_checkpoint_commit($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) as committed';
const SETTLE = 'select sourcebound.run_summary_settle($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) as settled';

/** run_checkpoint_commit's arguments for `receipt`. */
function commitArgs(o: {
  scope: string;
  receiptId: string;
  hashes: string[];
  verdict: { checked: string[]; ungrounded: string[] } | null;
}) {
  const v = o.verdict;
  return [
    o.scope,
    o.receiptId,
    randomUUID(),
    'A forged summary.',
    'm',
    null,
    null,
    1,
    10,
    v?.checked ?? null,
    v?.ungrounded ?? null,
    o.hashes,
    0,
    'main',
  ];
}

async function receiptsOf(runId: string) {
  const { rows } = await db.pool.query(`select * from sourcebound.run_summary_requests where run_id = $1 order by dispatched_at, attempt`, [
    runId,
  ]);
  return rows;
}

const sameAnswer = (a: Refusal, b: Refusal, idA: string, idB: string) => {
  expect(a.code).toBe('P0002');
  expect(a.constraint).toBe(b.constraint);
  expect(a.message.replace(idA, 'ID')).toBe(b.message.replace(idB, 'ID'));
};

describe('run summaries as the app role: only the commit path makes a checkpoint', () => {
  it('the whole path works as sourcebound_app, and what it refuses while a request is in flight', async () => {
    const { runId } = await buildRun(app, { scope, groups: 12, turnBytes: 2500, resultBytes: 100 });
    const policy = resolvePolicy(SMALL_POLICY);
    const seen: Record<string, unknown> = {};
    const probe = async (request: SummaryRequest) => {
      const [receipt] = (await receiptsOf(runId)).filter((r) => r.status === 'dispatched');
      // The group hashes the product will give (the candidate over the receipt's turns).
      const state = (await loadState(db.pool, runId, scope, policy))!;
      const candidate = candidateOver(
        state,
        evaluate(state, INPUT, policy).projection,
        policy,
        receipt.model,
        receipt.compacted_seqs.map(Number),
      )!;
      const hashes = candidate.groupHashes;
      const verdict = { checked: ['number:42'], ungrounded: [] };
      // An ok without a grounding verdict is refused; the same call with one would commit.
      seen.noVerdict = await refusal(app, COMMIT, commitArgs({ scope, receiptId: receipt.id, hashes, verdict: null }));
      seen.withVerdict = await rolledBack(app, COMMIT, commitArgs({ scope, receiptId: receipt.id, hashes, verdict }));
      seen.forgedHashes = await refusal(
        app,
        COMMIT,
        commitArgs({ scope, receiptId: receipt.id, hashes: hashes.map(() => 'f'.repeat(64)), verdict }),
      );
      // Settled alone, an ok is a refused answer: it names its reason and carries its verdict.
      const settle = (s: string, reason: string | null, v: typeof verdict | null, id = receipt.id) => [
        s,
        id,
        'ok',
        reason,
        'text',
        'm',
        null,
        null,
        1,
        10,
        null,
        v?.checked ?? null,
        v?.ungrounded ?? null,
      ];
      seen.settleNoVerdict = await refusal(app, SETTLE, settle(scope, 'over_target', null));
      seen.settleAccepted = await refusal(app, SETTLE, settle(scope, null, verdict));
      // Another tenant's request reads exactly like one that does not exist.
      const otherCommit = await refusal(app, COMMIT, commitArgs({ scope: other, receiptId: receipt.id, hashes, verdict }));
      const noneCommit = await refusal(app, COMMIT, commitArgs({ scope: other, receiptId: NONE, hashes, verdict }));
      sameAnswer(otherCommit, noneCommit, receipt.id, NONE);
      const otherSettle = await refusal(app, SETTLE, settle(other, 'x', verdict));
      const noneSettle = await refusal(app, SETTLE, settle(other, 'x', verdict, NONE));
      sameAnswer(otherSettle, noneSettle, receipt.id, NONE);
      expect(otherSettle.message).toBe(otherCommit.message);
      const expired = await app.query('select sourcebound.run_summary_expire($1, $2, $3) as id', [
        other,
        runId,
        new Date(Date.now() + 864e5),
      ]);
      seen.otherExpire = expired.rows;
      // Direct writes of the settlement or a checkpoint: refused for every runtime role.
      for (const pool of [app, worker, reader]) {
        for (const sql of [
          `update sourcebound.run_summary_requests set status = 'ok', spent = true, settled_at = now(), summary = 'forged', grounding_checked = '{}', grounding_ungrounded = '{}' where id = '${receipt.id}'`,
          `update sourcebound.run_summary_requests set grounding_ungrounded = '{}' where id = '${receipt.id}'`,
          `insert into sourcebound.run_checkpoints (run_id, conversation_id, scope, segment, correction_revision, model_route, from_seq, to_seq, compacted_seqs, source_hashes, source_hash, hash_version, tool_result_refs, summary_request_id, summary_model, prompt_version, summary, summary_bytes)
           select run_id, conversation_id, scope, 1, 0, 'm', from_seq, to_seq, compacted_seqs, '{}', source_hash, 1, '[]', id, 'm', prompt_version, 'forged', 6 from sourcebound.run_summary_requests where id = '${receipt.id}'`,
          `delete from sourcebound.run_summary_requests where id = '${receipt.id}'`,
          `delete from sourcebound.run_checkpoints`,
          // A request is inserted as its identity only, never with a settlement.
          `insert into sourcebound.run_summary_requests (run_id, conversation_id, scope, identity_key, attempt, from_seq, to_seq, compacted_seqs, source_hash, hash_version, model, prompt_version, max_chars, input_bytes, reserved_requests, reserved_tokens, lease_expires_at, summary)
           select run_id, conversation_id, scope, identity_key, 9, from_seq, to_seq, compacted_seqs, source_hash, 1, model, prompt_version, 1, 1, 0, 0, now(), 'forged' from sourcebound.run_summary_requests where id = '${receipt.id}'`,
        ]) {
          expect((await refusal(pool, sql)).code, sql).toBe('42501');
        }
      }
      // The worker and the reader do not write runs: the commit path is not theirs either.
      for (const pool of [worker, reader]) {
        expect((await refusal(pool, COMMIT, commitArgs({ scope, receiptId: receipt.id, hashes, verdict }))).code).toBe('42501');
        expect((await refusal(pool, SETTLE, settle(scope, 'x', verdict))).code).toBe('42501');
        expect((await refusal(pool, 'select sourcebound.run_summary_expire($1, $2, now())', [scope, runId])).code).toBe('42501');
      }
      seen.stillDispatched = (await receiptsOf(runId)).map((r) => r.status);
      return ok(`Summary of ${request.items.length} items.`);
    };
    const summarizer = recordingSummarizer(probe);
    const prepared = await prepareChecked({ pool: app, runId, scope, ...INPUT, policy: SMALL_POLICY, summarizer });

    expect(seen.noVerdict).toMatchObject({ code: 'P0001', constraint: 'run_summary_ok_verdict' });
    expect(seen.withVerdict).toEqual({ committed: true });
    expect(seen.forgedHashes).toMatchObject({ code: 'P0001', constraint: 'run_checkpoint_source_hashes' });
    expect(seen.settleNoVerdict).toMatchObject({ code: 'P0001', constraint: 'run_summary_ok_verdict' });
    expect(seen.settleAccepted).toMatchObject({ code: 'P0001', constraint: 'run_summary_ok_refused_only' });
    expect(seen.otherExpire).toEqual([]);
    expect(seen.stillDispatched).toEqual(['dispatched']);

    // The product's own path, as the app role: the request settled ok with its verdict, and its checkpoint.
    expect(summarizer.calls).toHaveLength(1);
    expect(prepared.report.compaction.decision).toBe('committed');
    const [receipt] = await receiptsOf(runId);
    expect(receipt).toMatchObject({ status: 'ok', spent: true, reason: null, grounding_ungrounded: [] });
    expect(receipt.grounding_checked).not.toBeNull();
    const { rows: cps } = await db.pool.query(`select * from sourcebound.run_checkpoints where run_id = $1`, [runId]);
    expect(cps).toHaveLength(1);
    expect(cps[0]).toMatchObject({
      id: prepared.report.compaction.checkpointId,
      summary_request_id: receipt.id,
      segment: 1,
      summary: 'Summary of ' + summarizer.calls[0]!.items.length + ' items.',
      source_hash: receipt.source_hash,
    });
    // What the database derived for the checkpoint is what the product measured: recovery rebuilds the same request.
    const recovered = await recoverRunContext({ pool: app, runId, scope, ...INPUT, policy: SMALL_POLICY });
    expect(recovered.request).toEqual(prepared.request);
    expect(recovered.report.checkpointsUsed).toEqual([cps[0].id]);

    // Erasing the run (the app's right) takes its requests and checkpoints with it, by cascade.
    await app.query('delete from sourcebound.runs where id = $1', [runId]);
    expect(await receiptsOf(runId)).toEqual([]);
  });

  it('a request whose lease ran out is settled unknown by the app through run_summary_expire, in its own scope only', async () => {
    const { runId } = await buildRun(app, { scope, groups: 12, turnBytes: 2500, resultBytes: 100 });
    const summarizer = recordingSummarizer(() => ({ kind: 'unknown', reason: 'lost in test', requestId: null }));
    await prepareChecked({ pool: app, runId, scope, ...INPUT, policy: SMALL_POLICY, summarizer });
    const [settled] = await receiptsOf(runId);
    // A dispatched request, written as the app writes one (its identity columns), as if its sender died.
    const { rows } = await app.query(
      `insert into sourcebound.run_summary_requests (run_id, conversation_id, scope, identity_key, attempt, predecessor_id, from_seq, to_seq, compacted_seqs, source_hash, hash_version, model, prompt_version, max_chars, input_bytes, reserved_requests, reserved_tokens, lease_expires_at)
       select run_id, conversation_id, scope, identity_key, 2, predecessor_id, from_seq, to_seq, compacted_seqs, source_hash, hash_version, model, prompt_version, max_chars, input_bytes, 0, 0, now() - interval '1 minute'
       from sourcebound.run_summary_requests where id = $1 returning id, status`,
      [settled.id],
    );
    expect(rows[0].status).toBe('dispatched');
    // Its identity key is its columns': a made-up one (a third attempt under another key) is refused.
    const forged = await refusal(
      app,
      `insert into sourcebound.run_summary_requests (run_id, conversation_id, scope, identity_key, attempt, predecessor_id, from_seq, to_seq, compacted_seqs, source_hash, hash_version, model, prompt_version, max_chars, input_bytes, reserved_requests, reserved_tokens, lease_expires_at)
       select run_id, conversation_id, scope, repeat('e', 64), 1, predecessor_id, from_seq, to_seq, compacted_seqs, source_hash, hash_version, model, prompt_version, max_chars, input_bytes, 0, 0, now()
       from sourcebound.run_summary_requests where id = $1`,
      [settled.id],
    );
    expect(forged).toMatchObject({ code: 'P0001', constraint: 'run_summary_request_identity_key' });
    expect((await app.query('select sourcebound.run_summary_expire($1, $2, now()) as id', [other, runId])).rows).toEqual([]);
    const recovered = await recoverRunContext({ pool: app, runId, scope, ...INPUT, policy: SMALL_POLICY });
    expect(recovered.report.expiredReceipts).toEqual([rows[0].id]);
    expect((await receiptsOf(runId)).map((r) => [r.status, r.spent])).toEqual([
      ['unknown', true],
      ['unknown', true],
    ]);
  });
});
