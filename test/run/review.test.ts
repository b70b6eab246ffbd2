import Anthropic from '@anthropic-ai/sdk';
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { step } from '../../examples/run-agent-loop.ts';
import type { Outcome, Summarizer } from '../../src/support/summary-contract.ts';
import {
  readResult,
  readResultTool,
  recordCorrection,
  recordModelRequest,
  recordModelTurn,
  recordToolCall,
  recordToolResult,
  recoverRunContext,
  RunHistoryError,
  startRun,
  storeResult,
  type AnthropicRunRequest,
} from '../../src/run/index.ts';
import { createTestDatabase } from '../support/db.ts';
import { behaviours, startMessagesServer } from '../support/messages-server.ts';
import { buildRun, createConversation, INPUT, prepareChecked, SMALL_POLICY } from './support/fixtures.ts';

/**
 * Found by driving a long agent loop as an application would (the adversarial
 * review of run compaction): each defect here stopped a Run or made every
 * later request one the Messages API refuses.
 */
const db = await createTestDatabase();
const pool = db.pool;
const scope = 'review';

async function newRun(request = 'Find the cheapest fund.') {
  const { runId } = await startRun({ pool, scope, conversationId: await createConversation(pool, scope), request });
  return runId;
}

const toolUses = (body: AnthropicRunRequest) =>
  body.messages.flatMap((m) => m.content).filter((b) => b.type === 'tool_use') as { id: string; input: unknown }[];

describe('a tool call the Messages API refuses in every later request', () => {
  it('is refused when recorded: an id outside [a-zA-Z0-9_-] (the API answers 400 "String should match pattern")', async () => {
    const runId = await newRun();
    for (const id of ['call:1', 'fn.search', 'a b', 'toolu_01/2', 'ü']) {
      await expect(recordModelTurn({ pool, runId, scope, text: 't', toolCalls: [{ id, name: 'search', input: {} }] }), id).rejects.toThrow(
        /not one the Messages API accepts/,
      );
    }
    // Nothing was recorded: the request has no turn, and a valid id goes in.
    await recordModelTurn({ pool, runId, scope, text: 't', toolCalls: [{ id: 'toolu_01-A_b', name: 'search', input: {} }] });
    const prepared = await prepareChecked({ pool, runId, scope, ...INPUT });
    expect(toolUses(prepared.body!).map((b) => b.id)).toEqual(['toolu_01-A_b']);
  });

  it('is refused when recorded: an input that is not a JSON object (tool_use.input must be one); a missing input is sent as {}', async () => {
    const runId = await newRun();
    for (const input of ['text', 42, true, [1, 2], new Date(0), { toJSON: () => 'x' }]) {
      await expect(
        recordModelTurn({ pool, runId, scope, text: 't', toolCalls: [{ id: 'a', name: 'search', input }] }),
        JSON.stringify(input),
      ).rejects.toThrow(/must be a JSON object/);
    }
    // An object with a NUL is stored escaped and is still an object.
    await recordModelTurn({
      pool,
      runId,
      scope,
      text: 't',
      toolCalls: [
        { id: 'none', name: 'search', input: undefined },
        { id: 'nil', name: 'search', input: null },
        { id: 'nul', name: 'search', input: { q: 'a\u0000b' } },
      ],
    });
    const prepared = await prepareChecked({ pool, runId, scope, ...INPUT });
    expect(toolUses(prepared.body!).map((b) => b.input)).toEqual([{}, {}, { q: 'a\u0000b' }]);
  });
});

describe('text a PostgreSQL text column cannot hold (a NUL)', () => {
  it('is stored with U+FFFD for the NUL, so the Run goes on: a binary tool output, an error, a model turn, user text, a stored result and a label', async () => {
    // Each of these was RunHistoryError 22021: a tool that read a binary file left its call dispatched for good.
    const binary = `PK\u0003\u0004\u0000\u0000 header\u0000\ud800 end`;
    const runId = await newRun('Read the archive\u0000.');
    await recordCorrection({ pool, runId, scope, text: 'Only the \u0000 header.' });
    await recordModelTurn({
      pool,
      runId,
      scope,
      text: 'Reading\u0000 it.',
      toolCalls: [
        { id: 'read', name: 'cat', input: {} },
        { id: 'bad', name: 'cat', input: {} },
      ],
    });
    await recordToolCall({ pool, runId, scope, proposalId: 'read', dispatchId: 'd-read' });
    const { result } = await recordToolResult({
      pool,
      runId,
      scope,
      proposalId: 'read',
      settlement: 'settled',
      content: binary,
      label: 'zip\u0000',
    });
    await recordToolResult({ pool, runId, scope, proposalId: 'bad', settlement: 'failed', error: 'EISDIR\u0000' });
    const stored = await storeResult({ pool, runId, scope, content: `a\u0000b`, label: 'l\u0000' });

    const expected = binary.replace(/\u0000|\ud800/g, '\uFFFD');
    expect(result).toMatchObject({
      bytes: Buffer.byteLength(expected),
      sha256: createHash('sha256').update(expected).digest('hex'),
      label: 'zip\uFFFD',
    });
    expect((await readResult({ pool, runId, scope, resultId: result!.resultId, version: 1 })).content).toBe(expected);
    expect(stored).toMatchObject({ bytes: 5, label: 'l\uFFFD' });
    expect((await readResult({ pool, runId, scope, resultId: stored.resultId, version: 1 })).content).toBe('a\uFFFDb');

    const prepared = await prepareChecked({ pool, runId, scope, ...INPUT });
    const items = prepared.request.messages;
    expect(items.map((m) => ('text' in m ? m.text : m.kind === 'tool_result' ? (m.body ?? m.error) : null))).toEqual([
      'Read the archive\uFFFD.',
      'Only the \uFFFD header.',
      'Reading\uFFFD it.',
      expected,
      'EISDIR\uFFFD',
    ]);
    // Replaying the request is idempotent in its stored form.
    expect((await startRun({ pool, scope, runId, request: 'Read the archive\u0000.' })).runId).toBe(runId);
    const recovered = await recoverRunContext({ pool, runId, scope, ...INPUT });
    expect(JSON.stringify(recovered.body)).toBe(JSON.stringify(prepared.body));
  });

  it('through the README loop, the real SDK and the local Messages server: a binary output is the settled result the model sees next', async () => {
    // Before, the loop's recordToolResult threw 22021 and its catch recorded the call as failed: the output was lost.
    const server = await startMessagesServer();
    try {
      const runId = await newRun('Read the archive.');
      const loop = {
        pool,
        scope,
        runId,
        client: new Anthropic({ apiKey: server.apiKey, baseURL: server.url, maxRetries: 0 }),
        model: 'claude-test',
        system: 'You read files.',
        tools: [{ name: 'cat', input_schema: { type: 'object' } }],
        runTool: async () => 'PK\u0003\u0004\u0000\u0000 central directory',
      };
      server.enqueue(behaviours.blocks([{ type: 'tool_use', id: 'toolu_cat', name: 'cat', input: { path: 'a.zip' } }], 'tool_use'));
      expect((await step(loop)).kind).toBe('tool_calls');
      server.enqueue(behaviours.text('It is a zip archive.'));
      expect(await step(loop)).toMatchObject({ kind: 'answered' });
      const sent = server.requests.at(-1)!.body as { messages: { content: { type: string; content?: string; is_error?: boolean }[] }[] };
      const result = sent.messages.flatMap((m) => m.content).find((b) => b.type === 'tool_result')!;
      expect(result).toEqual({ type: 'tool_result', tool_use_id: 'toolu_cat', content: 'PK\u0003\u0004\uFFFD\uFFFD central directory' });
    } finally {
      await server.close();
    }
  });

  it('still refuses a content that is not a string', async () => {
    const runId = await newRun();
    await expect(storeResult({ pool, runId, scope, content: 'x', label: 5 as unknown as string })).rejects.toBeInstanceOf(RunHistoryError);
    await recordModelTurn({ pool, runId, scope, text: 't', toolCalls: [{ id: 'a', name: 'cat', input: {} }] });
    await expect(
      recordToolResult({ pool, runId, scope, proposalId: 'a', settlement: 'failed', label: {} as unknown as string }),
    ).rejects.toBeInstanceOf(RunHistoryError);
  });
});

describe('newest groups whose excerpts alone are over the threshold (many parallel calls with large results)', () => {
  it('show their results by reference, oldest first, only as far as the threshold: the Run can go on', async () => {
    // Three turns of 40 parallel fetches of 40 KB pages: their excerpts and references took 285,549 bytes, the
    // request 302,138: cannot_fit for good, since no request could be sent to make the group that lets them age.
    const runId = await newRun('Fetch every page of the catalogue.');
    const ids: string[] = [];
    for (let g = 0; g < 3; g++) {
      const calls = Array.from({ length: 40 }, (_, i) => `toolu_${g}_${i}`);
      ids.push(...calls);
      await recordModelTurn({
        pool,
        runId,
        scope,
        text: `Fetching batch ${g}.`,
        toolCalls: calls.map((id) => ({ id, name: 'fetch', input: { url: `https://example.com/${id}` } })),
      });
      for (const id of calls) {
        await recordToolCall({ pool, runId, scope, proposalId: id, dispatchId: `d-${id}` });
        await recordToolResult({ pool, runId, scope, proposalId: id, settlement: 'settled', content: `page ${id} `.repeat(4000) });
      }
    }
    const prepared = await prepareChecked({ pool, runId, scope, ...INPUT });
    expect(prepared.ok).toBe(true);
    const { report } = prepared;
    // Bodies over the inline limit are shown by excerpt and reference already: the only step is the last one.
    expect(report.steps.map((s) => s.step)).toEqual(['measure', 'reference_recent']);
    expect(report.steps[0]!.bytesAfter).toBeGreaterThan(report.thresholdBytes);
    expect(report.bytes).toBeLessThanOrEqual(report.thresholdBytes);
    // Only as many as needed, oldest first; the rest keep their excerpt.
    const byReference = report.references.filter((r) => r.form === 'reference').map((r) => r.proposalId);
    expect(byReference).toEqual(ids.slice(0, byReference.length));
    expect(byReference.length).toBeGreaterThan(0);
    expect(byReference.length).toBeLessThan(ids.length / 2);
    expect(report.references).toHaveLength(byReference.length);
    const last = prepared.request.messages.find((m) => m.kind === 'tool_result' && m.proposalId === ids.at(-1));
    expect(last).toMatchObject({ excerpt: expect.any(String) });
    // Each reference rereads its whole body.
    const first = prepared.request.messages.find((m) => m.kind === 'tool_result' && m.proposalId === ids[0]);
    expect(first).not.toHaveProperty('excerpt');
    expect(first).toMatchObject({ reference: { bytes: Buffer.byteLength(`page ${ids[0]} `.repeat(4000)) } });
    const recovered = await recoverRunContext({ pool, runId, scope, ...INPUT });
    expect(JSON.stringify(recovered.body)).toBe(JSON.stringify(prepared.body));
  });
});

describe('a correction recorded while a summary request is out (a slow summary: up to 16 x 120 s by default)', () => {
  it('is in the request prepareRunRequest hands out after it, and in what recovery rebuilds', async () => {
    const { runId } = await buildRun(pool, { scope, groups: 30, turnBytes: 1500, resultBytes: 3000 });
    const correction = 'USER-CANARY: only funds domiciled in the EU.';
    const summarizer: Summarizer = {
      model: 'test/slow@1',
      async summarize() {
        // The user corrects the Run while the summary is being written.
        await recordCorrection({ pool, runId, scope, text: correction });
        return { kind: 'ok', text: 'Earlier searches of fund fees and their results.', model: 'test/slow@1', usage: null, requestId: null };
      },
    };
    const prepared = await prepareChecked({ pool, runId, scope, ...INPUT, policy: SMALL_POLICY, summarizer });
    expect(prepared.report.compactions.some((c) => c.decision === 'committed')).toBe(true);
    // Before: the request was assembled from the records read before the summary request, without the correction.
    const texts = prepared.request.messages.filter((m) => m.kind === 'correction').map((m) => m.text);
    expect(texts).toEqual([correction]);
    const recovered = await recoverRunContext({ pool, runId, scope, ...INPUT, policy: SMALL_POLICY });
    expect(JSON.stringify(recovered.body)).toBe(JSON.stringify(prepared.body));
  });
});

describe('read_result answers (readResultTool) and their maxBytes', () => {
  it('keep to maxBytes, header and way on included, or refuse a maxBytes no answer can keep to', async () => {
    const runId = await newRun();
    const stored = await storeResult({ pool, runId, scope, content: 'x'.repeat(50_000) });
    const input = { resultId: stored.resultId, version: 1, startByte: 10 };
    // 200 was an answer of 204 bytes (a read clamped to 4 bytes, its header and its way on).
    for (const maxBytes of [100, 200, 515, 1.5e3 + 0.5]) {
      await expect(readResultTool({ pool, runId, scope, input, maxBytes }), String(maxBytes)).rejects.toBeInstanceOf(RangeError);
    }
    for (const maxBytes of [516, 1024, 4096]) {
      const answer = await readResultTool({ pool, runId, scope, input, maxBytes });
      expect(Buffer.byteLength(answer), String(maxBytes)).toBeLessThanOrEqual(maxBytes);
      expect(answer).toMatch(/go on with \{.*"startByte": \d+\}\]$/);
    }
  });
});

describe('a model turn recorded again after a crash (the application cannot know whether it was committed)', () => {
  it('is the same turn when it has the same model request key: recorded once, sent once', async () => {
    const runId = await newRun();
    await recordModelRequest({ pool, runId, scope, requestKey: 'msg_1', requestBytes: 100 });
    await recordModelRequest({ pool, runId, scope, requestKey: 'msg_2', requestBytes: 100 });
    const answer = { pool, runId, scope, text: 'The cheapest is fund C.', modelRequestKey: 'msg_1' };
    const search = {
      pool,
      runId,
      scope,
      text: 'Searching.',
      modelRequestKey: 'msg_2',
      toolCalls: [{ id: 'toolu_1', name: 'search', input: { q: 'fees' } }],
    };
    const first = await recordModelTurn(answer);
    // Before: a second model turn (the answer twice in every later request), and for a turn with tool calls a
    // RunHistoryError for a duplicate id, which the application could not tell from a real conflict.
    expect(await recordModelTurn(answer)).toEqual(first);
    const second = await recordModelTurn(search);
    expect(await recordModelTurn(search)).toEqual(second);
    // Both at once: serialized on the model request, one turn.
    await recordModelRequest({ pool, runId, scope, requestKey: 'msg_3', requestBytes: 100 });
    const third = { ...answer, text: 'Fund C, checked.', modelRequestKey: 'msg_3' };
    const [a, b] = await Promise.all([recordModelTurn(third), recordModelTurn(third)]);
    expect(a).toEqual(b);
    // Another turn for the same key is refused, not appended.
    await expect(recordModelTurn({ ...answer, text: 'Something else.' })).rejects.toThrow(/already has a different turn/);
    await expect(recordModelTurn({ ...search, toolCalls: [{ id: 'toolu_2', name: 'search', input: {} }] })).rejects.toThrow(
      /already has a different turn/,
    );

    const prepared = await prepareChecked({ pool, runId, scope, ...INPUT });
    expect(prepared.request.messages.map((m) => (m.kind === 'model_turn' ? m.text : m.kind))).toEqual([
      'user_request',
      'The cheapest is fund C.',
      'Searching.',
      'tool_result',
      'Fund C, checked.',
    ]);
  });
});

describe('null for an absent value, from a plain JS caller', () => {
  it('is absent in recordToolResult (content, resultRef) and recordModelTurn (modelRequestKey), as it was for error', async () => {
    // A null resultRef was destructured (TypeError); a null content was "not a string"; a null key was "no model request null".
    const runId = await newRun();
    await recordModelTurn({
      pool,
      runId,
      scope,
      text: 't',
      modelRequestKey: null as unknown as string,
      toolCalls: [
        { id: 'a', name: 'cat', input: {} },
        { id: 'b', name: 'cat', input: {} },
      ],
    });
    const none = null as unknown as undefined;
    expect(
      (
        await recordToolResult({
          pool,
          runId,
          scope,
          proposalId: 'a',
          settlement: 'failed',
          content: none,
          resultRef: none,
          error: 'ENOENT',
        })
      ).status,
    ).toBe('failed');
    await recordToolCall({ pool, runId, scope, proposalId: 'b', dispatchId: 'd-b' });
    expect(
      (await recordToolResult({ pool, runId, scope, proposalId: 'b', settlement: 'settled', content: 'found', resultRef: none })).result,
    ).toMatchObject({ bytes: 5 });
    const prepared = await prepareChecked({ pool, runId, scope, ...INPUT });
    expect(prepared.request.messages.map((m) => (m.kind === 'tool_result' ? (m.body ?? m.error) : m.kind))).toEqual([
      'user_request',
      'model_turn',
      'ENOENT',
      'found',
    ]);
  });
});

describe('a summarizer outcome of the wrong shape (a plain JS summarizer)', () => {
  // Each made the receipt's settlement fail: prepareRunRequest threw a DatabaseError or a TypeError, and the receipt
  // stayed dispatched, so every later call said summary_in_flight until its lease ran out (150 s by default).
  const cases: [string, unknown, { decision: string; status: string; reason?: RegExp }][] = [
    ['no known kind', { kind: 'done', text: 'x' }, { decision: 'failed', status: 'unknown', reason: /^contract:malformed_outcome:done$/ }],
    ['deferred without retryAfterMs', { kind: 'deferred', reason: 'busy' }, { decision: 'failed', status: 'deferred', reason: /^busy$/ }],
    [
      'deferred for longer than a Date holds',
      { kind: 'deferred', reason: 'busy', retryAfterMs: 1e300 },
      { decision: 'failed', status: 'deferred', reason: /^busy$/ },
    ],
    [
      'ok with usage that is not whole tokens',
      {
        kind: 'ok',
        text: 'Earlier searches of fund fees.',
        model: 'm',
        usage: { inputTokens: 1.5, outputTokens: Number.NaN },
        requestId: null,
      },
      { decision: 'committed', status: 'ok' },
    ],
    [
      'invalid with a NUL in its reason',
      { kind: 'invalid', reason: 'bad\u0000answer', model: 'm', usage: null, requestId: null },
      { decision: 'failed', status: 'invalid', reason: /^bad answer$/ },
    ],
  ];
  for (const [name, outcome, want] of cases) {
    it(`${name}: settled on its receipt, and prepareRunRequest returns`, async () => {
      const { runId } = await buildRun(pool, { scope, groups: 30, turnBytes: 1500, resultBytes: 3000 });
      const summarizer: Summarizer = { model: 'test/plain-js@1', summarize: async () => outcome as Outcome };
      const prepared = await prepareChecked({ pool, runId, scope, ...INPUT, policy: SMALL_POLICY, summarizer });
      expect(prepared.report.compaction.decision).toBe(want.decision);
      if (want.reason) expect(prepared.report.compaction.reason).toMatch(want.reason);
      const { rows } = await pool.query<{ status: string; charged_tokens: string }>(
        'select status, charged_tokens from sourcebound.run_summary_requests where run_id = $1',
        [runId],
      );
      expect(rows.map((r) => r.status)).toEqual([want.status]);
      const recovered = await recoverRunContext({ pool, runId, scope, ...INPUT, policy: SMALL_POLICY });
      expect(recovered.report.inFlight).toEqual([]);
    });
  }
});

describe('a request that ends with a text-only model turn (asked again, as after max_tokens)', () => {
  it('sends that turn without trailing white space: the Messages API refuses a prefill ending with it', async () => {
    const server = await startMessagesServer({ defaultBehaviour: behaviours.text('Continued.') });
    try {
      const client = new Anthropic({ apiKey: server.apiKey, baseURL: server.url, maxRetries: 0 });
      // The server enforces the API's rule.
      await expect(
        client.messages.create({
          model: 'm',
          max_tokens: 10,
          messages: [
            { role: 'user', content: 'Hi' },
            { role: 'assistant', content: 'The fee is \n' },
          ],
        }),
      ).rejects.toThrow(/final assistant content cannot end with trailing whitespace/);
      for (const text of ['The cheapest fund is A, because\n\n', 'Fees compared. \t', 'No trailing space.']) {
        const runId = await newRun();
        await recordModelTurn({ pool, runId, scope, text, toolCalls: [] });
        const prepared = await prepareChecked({ pool, runId, scope, ...INPUT });
        const last = prepared.body!.messages.at(-1)!;
        expect(last).toEqual({ role: 'assistant', content: [{ type: 'text', text: text.trimEnd() }] });
        await client.messages.create({ ...prepared.body!, max_tokens: 10 } as Anthropic.MessageCreateParamsNonStreaming);
      }
      expect(server.requests.map((r) => r.behaviour)).toEqual(['rejected', 'message', 'message', 'message']);
    } finally {
      await server.close();
    }
  });
});
