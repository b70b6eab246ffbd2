import { describe, expect, it } from 'vitest';
import {
  readResult,
  recordCorrection,
  recordModelRequest,
  recordModelTurn,
  recordToolCall,
  recordToolResult,
  readRunBudget,
  ResultNotFoundError,
  RunHistoryError,
  RunNotFoundError,
  startRun,
  storeResult,
} from '../../src/run/index.ts';
import { createTestDatabase } from '../support/db.ts';
import { createConversation } from './support/fixtures.ts';

const db = await createTestDatabase();
const pool = db.pool;
const scope = 'tenant-a';

async function newRun(request = 'Compare the overlap and fees in my technology funds.') {
  const conversationId = await createConversation(pool, scope);
  const { runId } = await startRun({ pool, scope, conversationId, request, budget: { requests: 10, tokens: 100_000 } });
  return runId;
}

describe('the run history store', () => {
  it('records the request, corrections with revisions, model turns and tool units in order', async () => {
    const runId = await newRun();
    const c1 = await recordCorrection({ pool, runId, scope, text: 'Do not treat NAV values from a month ago as current.' });
    const t = await recordModelTurn({
      pool,
      runId,
      scope,
      text: 'Reading the prospectus.',
      toolCalls: [
        { id: 'tu_1', name: 'read', input: { doc: 'A' } },
        { id: 'tu_2', name: 'read', input: { doc: 'B' } },
      ],
    });
    const c2 = await recordCorrection({ pool, runId, scope, text: 'Also include fund C.' });
    expect(c1.revision).toBe(1);
    expect(c2.revision).toBe(2);
    expect(c1.seq).toBeLessThan(t.seq);
    expect(t.seq).toBeLessThan(c2.seq);
    const { rows } = await pool.query(
      `select proposal_id, position, status from sourcebound.run_tool_units where run_id = $1 order by position`,
      [runId],
    );
    expect(rows).toEqual([
      { proposal_id: 'tu_1', position: 0, status: 'proposed' },
      { proposal_id: 'tu_2', position: 1, status: 'proposed' },
    ]);
  });

  it('is idempotent for the same initial request and refuses a different one', async () => {
    const conversationId = await createConversation(pool, scope);
    const first = await startRun({ pool, scope, conversationId, request: 'hello' });
    const again = await startRun({ pool, scope, runId: first.runId, request: 'hello' });
    expect(again).toEqual(first);
    await expect(startRun({ pool, scope, runId: first.runId, request: 'other' })).rejects.toBeInstanceOf(RunHistoryError);
  });

  it('checks scope on every call', async () => {
    const runId = await newRun();
    await expect(recordCorrection({ pool, runId, scope: 'tenant-b', text: 'x' })).rejects.toBeInstanceOf(RunNotFoundError);
    await expect(recordModelTurn({ pool, runId, scope: 'tenant-b', text: 'x' })).rejects.toBeInstanceOf(RunNotFoundError);
    await expect(storeResult({ pool, runId, scope: 'tenant-b', content: 'x' })).rejects.toBeInstanceOf(RunNotFoundError);
    const stored = await storeResult({ pool, runId, scope, content: 'x' });
    await expect(readResult({ pool, runId, scope: 'tenant-b', resultId: stored.resultId, version: 1 })).rejects.toBeInstanceOf(
      ResultNotFoundError,
    );
    const conversationId = await createConversation(pool, 'tenant-b');
    await expect(startRun({ pool, scope, conversationId, request: 'x' })).rejects.toBeInstanceOf(RunNotFoundError);
  });

  it('keeps a tool call and its result in one unit that only moves forward', async () => {
    const runId = await newRun();
    await recordModelTurn({
      pool,
      runId,
      scope,
      text: 't',
      toolCalls: [
        { id: 'a', name: 'search', input: { q: 'x' } },
        { id: 'b', name: 'search', input: {} },
      ],
    });
    await recordToolCall({ pool, runId, scope, proposalId: 'a', dispatchId: 'd-a' });
    // Idempotent for the same dispatch, refused for another.
    await recordToolCall({ pool, runId, scope, proposalId: 'a', dispatchId: 'd-a' });
    await expect(recordToolCall({ pool, runId, scope, proposalId: 'a', dispatchId: 'd-other' })).rejects.toBeInstanceOf(RunHistoryError);
    const settled = await recordToolResult({ pool, runId, scope, proposalId: 'a', settlement: 'settled', content: 'result body' });
    expect(settled.result?.bytes).toBe(11);
    // A replay is a no-op; a different settlement is refused.
    expect((await recordToolResult({ pool, runId, scope, proposalId: 'a', settlement: 'settled', content: 'result body' })).replayed).toBe(
      true,
    );
    await expect(recordToolResult({ pool, runId, scope, proposalId: 'a', settlement: 'failed', error: 'x' })).rejects.toBeInstanceOf(
      RunHistoryError,
    );
    // No result for a call that was never proposed; a settled or unknown call needs its dispatch identity.
    await expect(recordToolResult({ pool, runId, scope, proposalId: 'nope', settlement: 'failed' })).rejects.toBeInstanceOf(
      RunHistoryError,
    );
    await expect(recordToolResult({ pool, runId, scope, proposalId: 'b', settlement: 'unknown' })).rejects.toBeInstanceOf(RunHistoryError);
    await expect(
      recordToolResult({ pool, runId, scope, proposalId: 'b', settlement: 'settled', dispatchId: 'd-b' }),
    ).rejects.toBeInstanceOf(RunHistoryError);
    await recordToolResult({ pool, runId, scope, proposalId: 'b', settlement: 'unknown', dispatchId: 'd-b', error: 'connection cut' });
    const { rows } = await pool.query(
      `select proposal_id, status, dispatch_id, result_id is not null as has_result from sourcebound.run_tool_units where run_id = $1 order by position`,
      [runId],
    );
    expect(rows).toEqual([
      { proposal_id: 'a', status: 'settled', dispatch_id: 'd-a', has_result: true },
      { proposal_id: 'b', status: 'unknown', dispatch_id: 'd-b', has_result: false },
    ]);
  });

  it('enforces the unit in the database: no result without its call, no second settlement, no going back', async () => {
    const runId = await newRun();
    const { seq } = await recordModelTurn({ pool, runId, scope, text: 't', toolCalls: [{ id: 'a', name: 's', input: {} }] });
    await recordToolResult({ pool, runId, scope, proposalId: 'a', settlement: 'unknown', dispatchId: 'd' });
    await expect(pool.query(`update sourcebound.run_tool_units set status = 'settled' where run_id = $1`, [runId])).rejects.toThrow(
      /immutable/,
    );
    await expect(pool.query(`delete from sourcebound.run_tool_units where run_id = $1`, [runId])).rejects.toThrow(/cannot be deleted/);
    // A unit must start as proposed, on a model turn of its own run.
    await expect(
      pool.query(
        `insert into sourcebound.run_tool_units (run_id, turn_seq, position, proposal_id, tool_name, input, status, dispatch_id, settled_at) values ($1, $2, 1, 'z', 's', '{}', 'unknown', 'd2', now())`,
        [runId, seq],
      ),
    ).rejects.toThrow(/must start as proposed/);
    const {
      rows: [request],
    } = await pool.query(`select seq from sourcebound.run_turns where run_id = $1 and kind = 'request'`, [runId]);
    await expect(
      pool.query(
        `insert into sourcebound.run_tool_units (run_id, turn_seq, position, proposal_id, tool_name, input) values ($1, $2, 0, 'y', 's', '{}')`,
        [runId, request.seq],
      ),
    ).rejects.toThrow(/model turn/);
    const other = await newRun();
    await expect(
      pool.query(
        `insert into sourcebound.run_tool_units (run_id, turn_seq, position, proposal_id, tool_name, input) values ($1, $2, 5, 'x', 's', '{}')`,
        [other, seq],
      ),
    ).rejects.toThrow(/model turn of its run/);
  });

  it('keeps history append-only: entries never change and go only with their run', async () => {
    const runId = await newRun();
    await recordCorrection({ pool, runId, scope, text: 'first correction' });
    await expect(pool.query(`update sourcebound.run_turns set text = 'rewritten' where run_id = $1`, [runId])).rejects.toThrow(/immutable/);
    await expect(pool.query(`delete from sourcebound.run_turns where run_id = $1`, [runId])).rejects.toThrow(/cannot be deleted/);
    // Corrections are numbered without gaps; a run's history starts with its request.
    await expect(
      pool.query(`insert into sourcebound.run_turns (run_id, kind, revision, text) values ($1, 'correction', 5, 'x')`, [runId]),
    ).rejects.toThrow(/revision 2/);
    const conversationId = await createConversation(pool, scope);
    const {
      rows: [bare],
    } = await pool.query(`insert into sourcebound.runs (conversation_id, status) values ($1, 'running') returning id`, [conversationId]);
    await expect(recordModelTurn({ pool, runId: bare.id, scope, text: 'x' })).rejects.toThrow(/no initial request/);
    await pool.query('delete from sourcebound.runs where id = $1', [runId]);
    const { rows } = await pool.query('select count(*)::int as n from sourcebound.run_turns where run_id = $1', [runId]);
    expect(rows[0].n).toBe(0);
  });

  it('serializes concurrent corrections into consecutive revisions', async () => {
    const runId = await newRun();
    const results = await Promise.all(
      Array.from({ length: 6 }, (_, i) => recordCorrection({ pool, runId, scope, text: `correction ${i}` })),
    );
    expect(results.map((r) => r.revision).sort()).toEqual([1, 2, 3, 4, 5, 6]);
  });

  it('records model request receipts once and charges the budget', async () => {
    const runId = await newRun();
    const first = await recordModelRequest({
      pool,
      runId,
      scope,
      requestKey: 'req-1',
      requestBytes: 3000,
      usage: { inputTokens: 900, outputTokens: 100 },
    });
    const replay = await recordModelRequest({
      pool,
      runId,
      scope,
      requestKey: 'req-1',
      requestBytes: 3000,
      usage: { inputTokens: 900, outputTokens: 100 },
    });
    expect(replay).toEqual({ id: first.id, charged: false });
    // Unknown usage is never free: bytes / 3.
    await recordModelRequest({ pool, runId, scope, requestKey: 'req-2', requestBytes: 3000 });
    await recordModelTurn({ pool, runId, scope, text: 'answer', modelRequestKey: 'req-2' });
    await expect(recordModelTurn({ pool, runId, scope, text: 'x', modelRequestKey: 'nope' })).rejects.toBeInstanceOf(RunHistoryError);
    const budget = await readRunBudget({ pool, runId, scope });
    expect(budget).toMatchObject({ requestsLimit: 10, tokensLimit: 100_000, requestsUsed: 2, tokensUsed: 2000, requestsReserved: 0 });
    await expect(pool.query(`update sourcebound.run_model_requests set request_bytes = 1 where run_id = $1`, [runId])).rejects.toThrow(
      /immutable/,
    );
  });
});

describe('the result store', () => {
  it('stores immutable versions with database-computed size, lines and sha256', async () => {
    const runId = await newRun();
    const v1 = await storeResult({ pool, runId, scope, content: 'line one\nline two — ü\nline three', label: 'holdings table' });
    const v2 = await storeResult({ pool, runId, scope, resultId: v1.resultId, content: 'replaced' });
    expect(v1).toMatchObject({
      version: 1,
      bytes: Buffer.byteLength('line one\nline two — ü\nline three'),
      lines: 3,
      label: 'holdings table',
    });
    expect(v1.sha256).toBe((await import('node:crypto')).createHash('sha256').update('line one\nline two — ü\nline three').digest('hex'));
    expect(v2.version).toBe(2);
    await expect(pool.query(`update sourcebound.run_results set content = 'x' where id = $1`, [v1.resultId])).rejects.toThrow(/immutable/);
    await expect(pool.query(`delete from sourcebound.run_results where id = $1`, [v1.resultId])).rejects.toThrow(/cannot be deleted/);
    // A version cannot skip, nor move to another run.
    await expect(
      pool.query(`insert into sourcebound.run_results (id, version, run_id, kind, content) values ($1, 5, $2, 'external', 'x')`, [
        v1.resultId,
        runId,
      ]),
    ).rejects.toThrow(/must follow version 4/);
    const other = await newRun();
    await expect(storeResult({ pool, runId: other, scope, resultId: v1.resultId, content: 'x' })).rejects.toBeInstanceOf(RunHistoryError);
  });

  it('rereads an exact version, a line range or a byte range cut to whole characters', async () => {
    const runId = await newRun();
    const content = 'alpha\nβeta\ngamma\n基金 delta';
    const v1 = await storeResult({ pool, runId, scope, content });
    await storeResult({ pool, runId, scope, resultId: v1.resultId, content: 'v2' });
    expect((await readResult({ pool, runId, scope, resultId: v1.resultId, version: 1 })).content).toBe(content);
    expect((await readResult({ pool, runId, scope, resultId: v1.resultId, version: 2 })).content).toBe('v2');
    const lines = await readResult({ pool, runId, scope, resultId: v1.resultId, version: 1, range: { lines: { from: 2, to: 3 } } });
    expect(lines.content).toBe('βeta\ngamma');
    expect(lines.range).toEqual({ kind: 'lines', from: 2, to: 3 });
    // Bytes 7..9 start inside 'β' (bytes 6-7): the slice is narrowed to whole characters.
    const bytes = await readResult({ pool, runId, scope, resultId: v1.resultId, version: 1, range: { bytes: { start: 7, end: 11 } } });
    expect(bytes.content).toBe('eta');
    expect(bytes.range).toEqual({ kind: 'bytes', start: 8, end: 11 });
    const cjk = Buffer.from(content).indexOf(Buffer.from('基'));
    expect(
      (await readResult({ pool, runId, scope, resultId: v1.resultId, version: 1, range: { bytes: { start: cjk, end: cjk + 4 } } })).content,
    ).toBe('基');
    await expect(readResult({ pool, runId, scope, resultId: v1.resultId, version: 3 })).rejects.toBeInstanceOf(ResultNotFoundError);
    await expect(readResult({ pool, runId, scope, resultId: 'not-a-uuid', version: 1 })).rejects.toBeInstanceOf(ResultNotFoundError);
  });

  it('settles a tool call with an externalized result by reference', async () => {
    const runId = await newRun();
    await recordModelTurn({ pool, runId, scope, text: 't', toolCalls: [{ id: 'a', name: 'fetch', input: {} }] });
    const stored = await storeResult({ pool, runId, scope, content: 'x'.repeat(5000), label: 'big' });
    const settled = await recordToolResult({
      pool,
      runId,
      scope,
      proposalId: 'a',
      dispatchId: 'd',
      settlement: 'settled',
      resultRef: stored,
    });
    expect(settled.result).toEqual(stored);
    await recordModelTurn({ pool, runId, scope, text: 't', toolCalls: [{ id: 'b', name: 'fetch', input: {} }] });
    await expect(
      recordToolResult({
        pool,
        runId,
        scope,
        proposalId: 'b',
        dispatchId: 'd2',
        settlement: 'settled',
        resultRef: { resultId: stored.resultId, version: 9 },
      }),
    ).rejects.toBeInstanceOf(ResultNotFoundError);
  });
});
