import { describe, expect, it } from 'vitest';
import {
  prepareRunRequest,
  readResult,
  readResultTool,
  readRunBudget,
  recordCorrection,
  recordModelRequest,
  recordModelTurn,
  recordToolCall,
  recordToolResult,
  recoverRunContext,
  ResultNotFoundError,
  RunHistoryError,
  RunNotFoundError,
  RunPolicyError,
  startRun,
  storeResult,
  type ThinkingBlock,
} from '../../src/run/index.ts';
import { createTestDatabase } from '../support/db.ts';
import { createConversation, INPUT, prepareChecked } from './support/fixtures.ts';

/**
 * Values at the edge of what the Run's columns hold (adversarial review of the
 * RUN API, defects 4-9): each is recorded faithfully, or refused with the
 * error the API documents, never a bare DatabaseError.
 */
const db = await createTestDatabase();
const pool = db.pool;
const scope = 'values';
/** The key of a stored input jsonb could not hold (src/run/stored.ts ESCAPED_JSON_KEY), spelled out: it is part of the stored format. */
const ESCAPED_JSON_KEY = 'sourcebound:escaped-json';

async function newRun(request = 'Find the cheapest fund.') {
  const { runId } = await startRun({ pool, scope, conversationId: await createConversation(pool, scope), request });
  return runId;
}

async function settle(runId: string, id: string) {
  await recordToolCall({ pool, runId, scope, proposalId: id, dispatchId: `d-${id}` });
  await recordToolResult({ pool, runId, scope, proposalId: id, settlement: 'settled', content: `result of ${id}` });
}

type Block = { type: string; id?: string; input?: unknown };
const blocksOf = (body: { messages: { content: unknown }[] }): Block[] =>
  body.messages.flatMap((m) => (Array.isArray(m.content) ? (m.content as Block[]) : []));

describe('a tool input or thinking block jsonb cannot hold (defect 4)', () => {
  it('records a NUL or a lone surrogate in a tool input and a thinking block, and sends them back exactly, prepared and recovered', async () => {
    const runId = await newRun();
    const nul = { q: 'a\u0000b', 'k\u0000ey': ['x', { deep: 'y\u0000' }], n: 1.5 };
    const lone = { z: 'first key', q: 'a\uD800b', tail: '\uDC00', pair: '📈' };
    // An input that reads like the escaped form is itself escaped, so it too comes back as it was.
    const lookalike = { [ESCAPED_JSON_KEY]: '{"q":"not this"}' };
    const plain = { b: 'x', a: 1 };
    const thinking: ThinkingBlock[] = [
      { type: 'thinking', thinking: 'weighing\u0000 the \uD83D options', signature: 'sig\u0000' },
      { type: 'redacted_thinking', data: 'opaque' },
    ];
    await recordModelTurn({
      pool,
      runId,
      scope,
      text: 'Searching.',
      thinking,
      toolCalls: [
        { id: 'nul', name: 'search', input: nul },
        { id: 'lone', name: 'search', input: lone },
        { id: 'look', name: 'search', input: lookalike },
        { id: 'plain', name: 'search', input: plain },
      ],
    });
    for (const id of ['nul', 'lone', 'look', 'plain']) await settle(runId, id);

    const prepared = await prepareChecked({ pool, runId, scope, ...INPUT });
    const inputs = Object.fromEntries(
      blocksOf(prepared.body!)
        .filter((b) => b.type === 'tool_use')
        .map((b) => [b.id, b.input]),
    );
    // Exactly, key order and every code unit included (JSON.stringify writes a lone surrogate as its escape).
    expect(JSON.stringify(inputs.nul)).toBe(JSON.stringify(nul));
    expect(JSON.stringify(inputs.lone)).toBe(JSON.stringify(lone));
    expect(JSON.stringify(inputs.look)).toBe(JSON.stringify(lookalike));
    expect(inputs.plain).toEqual(plain);
    expect(blocksOf(prepared.body!).filter((b) => b.type === 'thinking' || b.type === 'redacted_thinking')).toEqual(thinking);

    const recovered = await recoverRunContext({ pool, runId, scope, ...INPUT });
    expect(JSON.stringify(recovered.body)).toBe(JSON.stringify(prepared.body));
    expect(recovered.report.bytes).toBe(prepared.report.bytes);

    // Every other input is stored as it always was (records made before the escaping read the same).
    const { rows } = await pool.query(`select proposal_id, input from sourcebound.run_tool_units where run_id = $1 order by position`, [
      runId,
    ]);
    expect(rows.find((r) => r.proposal_id === 'plain')!.input).toEqual(plain);
    expect(rows.find((r) => r.proposal_id === 'nul')!.input).toEqual({ [ESCAPED_JSON_KEY]: JSON.stringify(nul) });
  });

  it('records and sends back an array nested thousands deep, which jsonb takes, in time linear in its size', async () => {
    // The escaping remade each element's JSON at every level (3000 deep: 3 s, then a stack overflow).
    const runId = await newRun();
    let deep: unknown = 'q';
    for (let i = 0; i < 3500; i++) deep = [deep];
    let withNul: unknown = 'a\u0000b';
    for (let i = 0; i < 500; i++) withNul = [withNul];
    // A tool input is a JSON object (the Messages API refuses any other): the arrays are its values.
    await recordModelTurn({
      pool,
      runId,
      scope,
      text: 'Nested.',
      toolCalls: [
        { id: 'deep', name: 'search', input: { q: deep } },
        { id: 'nul', name: 'search', input: { q: withNul } },
      ],
    });
    for (const id of ['deep', 'nul']) await settle(runId, id);
    const prepared = await prepareChecked({ pool, runId, scope, ...INPUT });
    const inputs = Object.fromEntries(
      blocksOf(prepared.body!)
        .filter((b) => b.type === 'tool_use')
        .map((b) => [b.id, b.input]),
    );
    expect(JSON.stringify(inputs.deep)).toBe(JSON.stringify({ q: deep }));
    expect(JSON.stringify(inputs.nul)).toBe(JSON.stringify({ q: withNul }));
  });

  it('refuses an input that is not JSON with a named error', async () => {
    const runId = await newRun();
    await expect(
      recordModelTurn({ pool, runId, scope, text: 't', toolCalls: [{ id: 'b', name: 'search', input: { n: 10n } }] }),
    ).rejects.toThrow(RunHistoryError);
  });
});

describe('a runId that is not a uuid (defect 5)', () => {
  it('is a Run that is not there: RunNotFoundError from every entry point', async () => {
    const runId = 'abc';
    const address = { pool, runId, scope };
    const calls: [string, () => Promise<unknown>][] = [
      ['startRun', () => startRun({ ...address, request: 'x' })],
      ['recordCorrection', () => recordCorrection({ ...address, text: 'x' })],
      ['readRunBudget', () => readRunBudget(address)],
      ['storeResult', () => storeResult({ ...address, content: 'x' })],
      ['prepareRunRequest', () => prepareRunRequest({ ...address, ...INPUT })],
      ['recordModelTurn', () => recordModelTurn({ ...address, text: 'x' })],
      ['recordModelRequest', () => recordModelRequest({ ...address, requestKey: 'k', requestBytes: 1 })],
      ['recordToolCall', () => recordToolCall({ ...address, proposalId: 'p', dispatchId: 'd' })],
      ['recordToolResult', () => recordToolResult({ ...address, proposalId: 'p', settlement: 'failed' })],
      ['recoverRunContext', () => recoverRunContext({ ...address, ...INPUT })],
      ['readResultTool', () => readResultTool({ ...address, input: { catalog: {} } })],
    ];
    for (const [name, call] of calls) await expect(call(), name).rejects.toBeInstanceOf(RunNotFoundError);
    await expect(startRun({ pool, scope, conversationId: 'abc', request: 'x' })).rejects.toBeInstanceOf(RunNotFoundError);
  });

  it('accepts every spelling PostgreSQL does, as the same Run', async () => {
    const runId = await newRun();
    const braced = `{${runId.toUpperCase()}}`;
    await recordCorrection({ pool, runId: braced, scope, text: 'Only fund C.' });
    expect((await startRun({ pool, scope, runId: runId.replaceAll('-', ''), request: 'Find the cheapest fund.' })).runId).toBe(runId);
    const prepared = await prepareChecked({ pool, runId: braced, scope, ...INPUT });
    expect(prepared.report.runId).toBe(runId);
    expect(prepared.request.messages.map((m) => m.kind)).toEqual(['user_request', 'correction']);
  });
});

describe('user text with a lone surrogate (defect 6)', () => {
  it('is stored well-formed (U+FFFD), and replaying the same request is idempotent', async () => {
    const conversationId = await createConversation(pool, scope);
    const request = 'compare \uD800 these';
    const first = await startRun({ pool, scope, conversationId, request });
    expect(await startRun({ pool, scope, runId: first.runId, request })).toEqual(first);
    await expect(startRun({ pool, scope, runId: first.runId, request: 'compare \uFFFD those' })).rejects.toBeInstanceOf(RunHistoryError);
    await recordCorrection({ pool, runId: first.runId, scope, text: 'fix \uDC00' });
    const { request: built } = await prepareChecked({ pool, runId: first.runId, scope, ...INPUT });
    expect(built.messages.map((m) => ('text' in m ? m.text : null))).toEqual(['compare \uFFFD these', 'fix \uFFFD']);
  });
});

describe('numbers past their columns (defect 7)', () => {
  it("are refused with the API's own errors, never a DatabaseError", async () => {
    const runId = await newRun();
    const stored = await storeResult({ pool, runId, scope, content: 'one\ntwo\nthree' });
    const read = { pool, runId, scope, resultId: stored.resultId };
    await expect(readResult({ ...read, version: 2 ** 40 })).rejects.toBeInstanceOf(ResultNotFoundError);
    await expect(readResult({ ...read, version: 1, range: { bytes: { start: 3e9 } } })).rejects.toBeInstanceOf(RangeError);
    // The largest start an integer holds is read as past the end (its `+ 1` in SQL overflowed).
    expect((await readResult({ ...read, version: 1, range: { bytes: { start: 2 ** 31 - 1 } } })).content).toBe('');
    expect(await readResultTool({ pool, runId, scope, input: { resultId: stored.resultId, version: 1, startByte: 2 ** 31 - 1 } })).toMatch(
      /bytes 13-13 of 13/,
    );
    await expect(readResult({ ...read, version: 1, range: { lines: { from: 2 ** 32, to: 2 ** 33 } } })).rejects.toBeInstanceOf(RangeError);
    // An end past the result still means its end.
    expect((await readResult({ ...read, version: 1, range: { lines: { from: 2, to: 2 ** 40 } } })).content).toBe('two\nthree');
    await expect(readResultTool({ pool, runId, scope, input: { checkpoint: 2 ** 40 } })).rejects.toBeInstanceOf(RunHistoryError);
    await expect(readResultTool({ pool, runId, scope, input: { resultId: stored.resultId, version: 2 ** 40 } })).rejects.toBeInstanceOf(
      RunHistoryError,
    );
    await expect(
      readResultTool({ pool, runId, scope, input: { resultId: stored.resultId, version: 1, startByte: 3e9 } }),
    ).rejects.toBeInstanceOf(RunHistoryError);
    await expect(
      readResultTool({ pool, runId, scope, input: { resultId: stored.resultId, version: 1, startByte: 5, endByte: 2 } }),
    ).rejects.toBeInstanceOf(RunHistoryError);
    expect(
      await readResultTool({ pool, runId, scope, input: { resultId: stored.resultId, version: 1, fromLine: 3, toLine: 2 ** 40 } }),
    ).toMatch(/\nthree$/);

    await recordModelTurn({ pool, runId, scope, text: 't', toolCalls: [{ id: 'a', name: 'fetch', input: {} }] });
    await expect(
      recordToolResult({
        pool,
        runId,
        scope,
        proposalId: 'a',
        dispatchId: 'd',
        settlement: 'settled',
        resultRef: { resultId: stored.resultId, version: 2 ** 40 },
      }),
    ).rejects.toBeInstanceOf(ResultNotFoundError);

    const conversationId = await createConversation(pool, scope);
    await expect(
      startRun({ pool, scope, conversationId, request: 'x', budget: { requests: Number.MAX_SAFE_INTEGER } }),
    ).rejects.toBeInstanceOf(RunHistoryError);
    // Tokens are a bigint column: any safe integer fits.
    const big = await startRun({
      pool,
      scope,
      conversationId,
      request: 'x',
      budget: { requests: 2 ** 31 - 1, tokens: Number.MAX_SAFE_INTEGER },
    });
    expect(await readRunBudget({ pool, runId: big.runId, scope })).toMatchObject({
      requestsLimit: 2 ** 31 - 1,
      tokensLimit: Number.MAX_SAFE_INTEGER,
    });
    await expect(recordModelRequest({ pool, runId, scope, requestKey: 'k', requestBytes: Number.MAX_SAFE_INTEGER })).rejects.toBeInstanceOf(
      RunHistoryError,
    );
    await expect(prepareRunRequest({ pool, runId, scope, ...INPUT, policy: { excerptBytes: 2 ** 40 } })).rejects.toBeInstanceOf(
      RunPolicyError,
    );
    await expect(prepareRunRequest({ pool, runId, scope, ...INPUT, budget: { finalizationRequests: 2 ** 40 } })).rejects.toBeInstanceOf(
      RunPolicyError,
    );
  });
});

describe('a line range cut by maxBytes (defect 8)', () => {
  it("goes on by bytes only to the end of the lines asked for, in readResult and in read_result's answer", async () => {
    const runId = await newRun();
    const lines = Array.from({ length: 10 }, (_, i) => `L${i + 1}:${String(i + 1).repeat(3000)}`);
    const stored = await storeResult({ pool, runId, scope, content: lines.join('\n') });
    const address = { pool, runId, scope, resultId: stored.resultId, version: 1 };

    let page = await readResult({ ...address, range: { lines: { from: 2, to: 2 } }, maxBytes: 1000 });
    let text = page.content;
    expect(page.truncated).toBe(true);
    const lineStart = Buffer.byteLength(`${lines[0]}\n`);
    expect(page.next).toEqual({ bytes: { start: lineStart + 1000, end: lineStart + Buffer.byteLength(lines[1]!) } });
    while (page.next) {
      page = await readResult({ ...address, range: page.next, maxBytes: 1000 });
      text += page.content;
    }
    expect(text).toBe(lines[1]);

    const answer = await readResultTool({
      pool,
      runId,
      scope,
      input: { resultId: stored.resultId, version: 1, fromLine: 2, toLine: 2 },
      maxBytes: 2000,
    });
    const goOn = JSON.parse(/go on with (\{.*\})\]$/.exec(answer)![1]!) as Record<string, unknown>;
    expect(goOn.endByte).toBe(lineStart + Buffer.byteLength(lines[1]!));
    const rest = await readResultTool({ pool, runId, scope, input: goOn, maxBytes: 32 * 1024 });
    expect(rest).not.toContain('L3:');
    expect(rest.endsWith('2'.repeat(100))).toBe(true);
  });
});

describe('inputs of the wrong type (defect 9)', () => {
  it('refuses usage that is not numbers, without charging the budget', async () => {
    const runId = await newRun();
    await expect(
      recordModelRequest({
        pool,
        runId,
        scope,
        requestKey: 'k',
        requestBytes: 100,
        usage: { inputTokens: '10' as unknown as number, outputTokens: 1 },
      }),
    ).rejects.toThrow(/usage\.inputTokens must be an integer/);
    expect(await readRunBudget({ pool, runId, scope })).toMatchObject({ requestsUsed: 0, tokensUsed: 0 });
    await recordModelRequest({ pool, runId, scope, requestKey: 'k', requestBytes: 100, usage: { inputTokens: 10, outputTokens: 1 } });
    expect(await readRunBudget({ pool, runId, scope })).toMatchObject({ requestsUsed: 1, tokensUsed: 11 });
  });

  it('refuses a tool call that is not an object, and an error that is not a string, by name', async () => {
    const runId = await newRun();
    await expect(recordModelTurn({ pool, runId, scope, text: 't', toolCalls: [null] as never })).rejects.toThrow(RunHistoryError);
    await expect(recordModelTurn({ pool, runId, scope, text: 't', toolCalls: 'abc' as never })).rejects.toThrow(
      /toolCalls must be an array/,
    );
    await recordModelTurn({ pool, runId, scope, text: 't', toolCalls: [{ id: 'a', name: 'fetch', input: {} }] });
    await expect(
      recordToolResult({ pool, runId, scope, proposalId: 'a', settlement: 'failed', error: { code: 1 } as unknown as string }),
    ).rejects.toThrow(/error must be a string/);
    expect((await recordToolResult({ pool, runId, scope, proposalId: 'a', settlement: 'failed', error: 'boom' })).status).toBe('failed');
  });

  it('refuses a policy key that is not one, naming it', async () => {
    const runId = await newRun();
    await expect(prepareRunRequest({ pool, runId, scope, ...INPUT, policy: { bogus: 1 } as never })).rejects.toThrow(RunPolicyError);
    await expect(prepareRunRequest({ pool, runId, scope, ...INPUT, policy: { thresholdByte: 1 } as never })).rejects.toThrow(
      /policy\.thresholdByte is not a policy key/,
    );
    await expect(recoverRunContext({ pool, runId, scope, ...INPUT, policy: { bogus: 1 } as never })).rejects.toThrow(/policy\.bogus/);
  });
});
