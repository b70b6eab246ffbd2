import Anthropic from '@anthropic-ai/sdk';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { step, type AgentLoop } from '../../examples/run-agent-loop.ts';
import { createOfflineSummarizer } from '../../src/gateway/offline.ts';
import { READ_RESULT_TOOL, recordCorrection, recoverRunContext, startRun, turnOfMessage } from '../../src/run/index.ts';
import { createTestDatabase } from '../support/db.ts';
import { docCodeFrom, formatted } from '../support/doc-code.ts';
import { behaviours, startMessagesServer, type MessagesServer, type WireBlock } from '../support/messages-server.ts';
import { createConversation, prepareChecked } from './support/fixtures.ts';

/**
 * The agent loop of docs/runs.md is examples/run-agent-loop.ts; these tests run it
 * end to end against the local Messages server through the real SDK (issue
 * 12, defect 9): in process, step by step, and as its own process.
 */
const db = await createTestDatabase();
const pool = db.pool;
const scope = 'tenant-42';
const EXAMPLE = fileURLToPath(new URL('../../examples/run-agent-loop.ts', import.meta.url));
const README = fileURLToPath(new URL('../../docs/runs.md', import.meta.url));
const MAX_TOKENS_FIELD = Buffer.byteLength(',"max_tokens":4096');

let server: MessagesServer;
beforeAll(async () => {
  server = await startMessagesServer();
});
afterAll(async () => {
  await server.close();
});

const toolUse = (id: string, name: string, input: unknown): WireBlock => ({ type: 'tool_use', id, name, input });
const text = (t: string): WireBlock => ({ type: 'text', text: t, citations: null });

describe('the agent loop of docs/runs.md (examples/run-agent-loop.ts)', () => {
  it('is the code docs/runs.md shows (compared as Prettier prints it: layout may differ)', async () => {
    const readme = readFileSync(README, 'utf8');
    const file = readFileSync(EXAMPLE, 'utf8');
    const start = file.indexOf('export interface AgentLoop');
    const end = file.indexOf('/** A stand-in research tool');
    expect(start).toBeGreaterThan(0);
    expect(end).toBeGreaterThan(start);
    expect(await formatted(docCodeFrom(readme, 'export interface AgentLoop'))).toBe(await formatted(file.slice(start, end)));
  });

  it('runs step by step: every request measured as sent, large results never inline, thinking kept with tool use, recovery the same', async () => {
    server.reset();
    const conversationId = await createConversation(pool, scope);
    const { runId } = await startRun({ pool, scope, conversationId, request: 'Compare the overlap and fees in my technology funds.' });
    const loop: AgentLoop = {
      pool,
      scope,
      runId,
      client: new Anthropic({ apiKey: server.apiKey, baseURL: server.url, maxRetries: 0 }),
      model: 'claude-test',
      system: 'You research funds. Reread stored results with read_result.',
      tools: [{ name: 'fetch', input_schema: { type: 'object' } }],
      // 300 KB of CJK with no newline: over the inline limit by bytes, far under it in UTF-16 units.
      runTool: async (_name, input) => `${JSON.stringify(input)} ${'基金費用'.repeat(25_000)}`,
      summarizer: createOfflineSummarizer({ maxChars: 6000 }),
    };
    const thinking = { type: 'thinking', thinking: 'I should fetch both funds first.', signature: 'sig-1' };
    const script: WireBlock[][] = [
      [thinking, text('Fetching.'), toolUse('t1', 'fetch', { fund: 'A' }), toolUse('t2', 'fetch', { fund: 'B' })],
      [toolUse('t3', 'read_result', { catalog: { offset: 0 } })],
      [text('Checking the fees.'), toolUse('t4', 'fetch', { fund: 'C' })],
      [text('Fund A and B overlap by 40%.')],
    ];
    const outcomes = [];
    for (const [n, content] of script.entries()) {
      server.enqueue(behaviours.blocks(content, n === script.length - 1 ? 'end_turn' : 'tool_use'));
      if (n === 2) await recordCorrection({ pool, runId, scope, text: 'Do not treat NAV values from a month ago as current.' });
      outcomes.push(await step(loop));
    }
    expect(outcomes.map((o) => o.kind)).toEqual(['tool_calls', 'tool_calls', 'tool_calls', 'answered']);

    // Every request, as the server received it, is what was measured (plus the max_tokens the loop adds).
    const { rows } = await pool.query<{ bytes: number }>(
      'select request_bytes as bytes from sourcebound.run_model_requests where run_id = $1 order by id',
      [runId],
    );
    expect(server.requests.map((r) => r.bytes + 16 * 1024 - MAX_TOKENS_FIELD)).toEqual(rows.map((r) => r.bytes));
    for (const r of server.requests) expect(r.bytes).toBeLessThanOrEqual(256 * 1024);
    // The bodies went in as content and are shown by excerpt and reference, not whole.
    const last = server.requests.at(-1)!.body as Anthropic.MessageCreateParams;
    const results = last.messages.flatMap((m) => (typeof m.content === 'string' ? [] : m.content)).filter((b) => b.type === 'tool_result');
    expect(results).toHaveLength(4);
    for (const id of ['t1', 't2', 't4']) {
      const r = results.find((b) => b.type === 'tool_result' && b.tool_use_id === id) as { content: string };
      expect(Buffer.byteLength(r.content)).toBeLessThan(4 * 1024);
      expect(r.content).toMatch(/version 1, \d+ bytes/);
    }
    // The thinking block is sent back first in its assistant turn, verbatim, with its tool use.
    const assistant = last.messages.find((m) => m.role === 'assistant')!;
    expect((assistant.content as unknown as WireBlock[])[0]).toEqual(thinking);
    expect((assistant.content as unknown as WireBlock[]).map((b) => b.type)).toEqual(['thinking', 'text', 'tool_use', 'tool_use']);
    // The correction is carried verbatim.
    expect(JSON.stringify(last.messages)).toContain('Do not treat NAV values from a month ago as current.');

    // The next request, and after a crash the same body from records alone.
    const input = { pool, runId, scope, model: loop.model, system: loop.system, tools: [...loop.tools, READ_RESULT_TOOL] };
    const next = await prepareChecked({ ...input, summarizer: loop.summarizer });
    const recovered = await recoverRunContext(input);
    expect(JSON.stringify(recovered.body)).toBe(JSON.stringify(next.body));
  });

  it('turns a provider response into text, tool calls and thinking blocks', () => {
    const turn = turnOfMessage({
      id: 'msg_1',
      stop_reason: 'tool_use',
      usage: { input_tokens: 10, output_tokens: 5 },
      content: [
        { type: 'thinking', thinking: 'hmm', signature: 's' } as { type: string },
        { type: 'redacted_thinking', data: 'opaque' } as { type: string },
        { type: 'text', text: 'One.' } as { type: string },
        { type: 'text', text: 'Two.' } as { type: string },
        { type: 'tool_use', id: 'tu', name: 'fetch', input: { q: 1 } } as { type: string },
      ],
    });
    expect(turn).toEqual({
      id: 'msg_1',
      text: 'One.\n\nTwo.',
      stopReason: 'tool_use',
      usage: { inputTokens: 10, outputTokens: 5 },
      toolCalls: [{ id: 'tu', name: 'fetch', input: { q: 1 } }],
      thinking: [
        { type: 'thinking', thinking: 'hmm', signature: 's' },
        { type: 'redacted_thinking', data: 'opaque' },
      ],
    });
  });

  it('runs as its own process to the answer, and exits', async () => {
    server.reset();
    server.enqueue(
      behaviours.blocks([text('Fetching.'), toolUse('a1', 'fetch_holdings', { fund: 'TECH' })], 'tool_use'),
      behaviours.blocks([toolUse('a2', 'fetch_holdings', { fund: 'AB' }), toolUse('a3', 'read_result', { catalog: {} })], 'tool_use'),
      behaviours.blocks([toolUse('a4', 'fetch_holdings', { fund: 'Q' })], 'tool_use'),
      behaviours.text('TECH and AB overlap in 12 holdings.'),
    );
    const child = spawn(process.execPath, ['--import', 'tsx', EXAMPLE], {
      env: { ...process.env, DATABASE_URL: db.url, ANTHROPIC_API_KEY: server.apiKey, ANTHROPIC_BASE_URL: server.url, SCOPE: scope },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
    expect(err).toBe('');
    expect(code).toBe(0);
    const result = JSON.parse(out.trim());
    expect(result).toMatchObject({ steps: 4, outcome: 'answered', answer: 'TECH and AB overlap in 12 holdings.' });
    expect(server.count).toBe(4);
    const { rows } = await pool.query(
      `select count(*) filter (where status = 'settled')::int as settled, count(*)::int as units from sourcebound.run_tool_units where run_id = $1`,
      [result.runId],
    );
    expect(rows[0]).toEqual({ settled: 4, units: 4 });
    const { rows: turns } = await pool.query(`select kind from sourcebound.run_turns where run_id = $1 order by seq`, [result.runId]);
    expect(turns.map((t) => t.kind)).toEqual(['request', 'model', 'model', 'correction', 'model', 'model']);
  });
});
