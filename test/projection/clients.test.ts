import { createAnthropic } from '@ai-sdk/anthropic';
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, type ModelMessage } from 'ai';
import OpenAI from 'openai';
import { afterAll, describe, expect, it } from 'vitest';
import {
  BYTES_PER_TOKEN,
  FORMATS,
  historyBytes,
  projectConversationHistory,
  toAnthropicMessages,
  toModelMessages,
  toOpenAIMessages,
  type ConversationProjection,
  type ProjectArgs,
  type ProjectionFormat,
  type SummaryItem,
} from '../../src/projection/index.ts';
import { startChatServer } from '../support/chat-server.ts';
import { createTestDatabase } from '../support/db.ts';
import { addPairs, createConversation } from '../support/fixtures.ts';
import { behaviours, startMessagesServer } from '../support/messages-server.ts';
import { insertSummary } from './support.ts';

const db = await createTestDatabase();
const messagesServer = await startMessagesServer();
const chatServer = await startChatServer({ apiKey: 'test-key' });
afterAll(async () => {
  await messagesServer.close();
  await chatServer.close();
});

const ADAPTERS: Record<ProjectionFormat, (p: ConversationProjection) => readonly unknown[]> = {
  anthropic: (p) => toAnthropicMessages(p),
  openai: (p) => toOpenAIMessages(p),
  'ai-sdk': (p) => toModelMessages(p),
};

const base = { scope: 'tenant-a', layout: 'newest-first' } as const;

/** 45 pairs, a usable summary of 10-19, and a budget, in `format`'s JSON, of exactly: a note for 0-9, that summary, pairs 20-44 raw. */
async function projectionWithEverything(format: ProjectionFormat): Promise<{ p: ConversationProjection; summary: SummaryItem }> {
  const conversationId = await createConversation(db.pool);
  await addPairs(db.pool, conversationId, 45, (i) => ({ user: `Frage ${i}: 数据? 🚀`, assistant: `Antwort ${i} ${'…'.repeat(20)}` }));
  await insertSummary(db.pool, { conversationId, fromPair: 10, summary: 'The phrase of replies 10-19.' });
  const args = { ...base, pool: db.pool, conversationId, format };
  const full = await projectConversationHistory({ ...args, budgetBytes: 1_000_000 });
  expect(full.items.map((i) => i.kind)).toEqual(Array(45).fill('pair'));
  const half = await projectConversationHistory({ ...args, budgetBytes: Math.floor(full.bytes / 2) });
  const summary = half.items.find((i): i is SummaryItem => i.kind === 'summary')!;
  const budgetBytes = FORMATS[format].projectedBytes([summary, ...full.items.slice(20)], [{ fromPair: 0, toPair: 9, reason: 'budget' }]);
  const p = await projectConversationHistory({ ...args, budgetBytes });
  expect(p.items.map((i) => i.kind)).toEqual(['summary', ...Array(25).fill('pair')]);
  expect(p.omitted).toEqual([{ fromPair: 0, toPair: 9, reason: 'budget' }]);
  expect(p.bytes).toBe(budgetBytes);
  expect(p.format).toBe(format);
  return { p, summary };
}

function checkAlternation(messages: readonly { role: string }[], length: number): void {
  expect(messages).toHaveLength(length);
  messages.forEach((m, i) => expect(m.role, `message ${i}`).toBe(i % 2 === 0 ? 'user' : 'assistant'));
}

/** Which messages' last block carries a breakpoint, as the Anthropic adapter places them. */
function anthropicMarks(p: ConversationProjection): number[] {
  return toAnthropicMessages(p).flatMap((m, i) =>
    Array.isArray(m.content) && m.content.at(-1) && 'cache_control' in m.content.at(-1)! ? [i] : [],
  );
}

type WireMessage = { role: string; content: string | { type: string; text: string; cache_control?: unknown }[] };
const wireText = (m: WireMessage) => (typeof m.content === 'string' ? [m.content] : m.content.map((b) => b.text));

describe.each(['anthropic', 'openai', 'ai-sdk'] as const)('format %s', (format) => {
  it('sizes the layout exactly as the adapter serializes it, within the budget, alternating', async () => {
    const { p } = await projectionWithEverything(format);
    const messages = ADAPTERS[format](p) as { role: string }[];
    expect(historyBytes(messages)).toBe(p.bytes);
    expect(Buffer.byteLength(JSON.stringify(messages), 'utf8')).toBe(p.bytes);
    expect(p.bytes).toBeLessThanOrEqual(p.budgetBytes);
    checkAlternation(messages, 2 * p.items.length);
    // One byte less fits one pair less: the budget is the format's own.
    const tighter = await projectConversationHistory({
      ...base,
      pool: db.pool,
      conversationId: p.conversationId,
      format,
      budgetBytes: p.bytes - 1,
    });
    expect(tighter.bytes).toBeLessThan(p.bytes);
    expect(historyBytes(ADAPTERS[format](tighter))).toBe(tighter.bytes);
  });
});

describe('the stable layout in every format', () => {
  it('keeps each request within its budget in its own JSON while the formats take turns on one stored layout', async () => {
    const conversationId = await createConversation(db.pool);
    await addPairs(db.pool, conversationId, 40, (i) => ({ user: `q${i} ${'ü'.repeat(30)}`, assistant: `a${i} ${'x'.repeat(200)}` }));
    for (const fromPair of [0, 10, 20])
      await insertSummary(db.pool, { conversationId, fromPair, summary: `Replies ${fromPair}-${fromPair + 9}.` });
    const budgetBytes = 6_000;
    const rewrites: (string | null)[] = [];
    for (let turn = 0; turn < 24; turn++) {
      const format = (['anthropic', 'openai', 'ai-sdk'] as const)[turn % 3]!;
      const p = await projectConversationHistory({
        pool: db.pool,
        conversationId,
        scope: 'tenant-a',
        budgetBytes,
        format,
        now: () => 1_000_000 + turn * 1000,
      });
      expect(historyBytes(ADAPTERS[format](p))).toBe(p.bytes);
      expect(p.bytes).toBeLessThanOrEqual(budgetBytes);
      rewrites.push(p.cache.rewrite);
      await addPairs(db.pool, conversationId, 1, (i) => ({ user: `q${40 + turn} ${i}`, assistant: `a${40 + turn} ${'y'.repeat(150)}` }), {
        startAt: 40 + turn,
      });
    }
    // A layout made in one format is kept in the others while it fits them: not a rewrite a call.
    expect(rewrites[0]).toBe('first');
    expect(rewrites.filter((r) => r === null).length).toBeGreaterThan(rewrites.length / 2);
  });
});

describe('toOpenAIMessages through the openai SDK', () => {
  it('arrives as projected: strings, the note as a leading paragraph, label and summary with a blank line, no cache fields', async () => {
    const { p, summary } = await projectionWithEverything('openai');
    const client = new OpenAI({ baseURL: chatServer.url, apiKey: 'test-key', maxRetries: 0 });
    const history = toOpenAIMessages(p);
    await client.chat.completions.create({ model: 'gpt-test', messages: [...history, { role: 'user', content: 'And now?' }] });
    const body = chatServer.requests.at(-1)!.body as { messages: WireMessage[] };
    const arrived = body.messages.slice(0, -1);
    expect(arrived).toEqual(JSON.parse(JSON.stringify(history)));
    expect(historyBytes(arrived)).toBe(p.bytes);
    checkAlternation(arrived, 2 * p.items.length);
    expect(arrived[0]!.content).toBe(
      `[sourcebound note: 10 earlier exchanges were left out of this request.]\n\n${summary.userMessages.map((m) => m.text).join('\n\n')}`,
    );
    expect(arrived[1]!.content).toBe(`${summary.label}\n\nThe phrase of replies 10-19.`);
    expect(arrived[2]!.content).toBe('Frage 20: 数据? 🚀');
    expect(JSON.stringify(body)).not.toMatch(/cache_control|providerOptions/);
  });
});

describe('toModelMessages through the AI SDK', () => {
  it('@ai-sdk/anthropic: the texts arrive as projected, with cache control where the Anthropic adapter puts its breakpoints', async () => {
    const { p, summary } = await projectionWithEverything('ai-sdk');
    const anthropic = createAnthropic({ baseURL: `${messagesServer.url}/v1`, apiKey: messagesServer.apiKey });
    // Typed by the AI SDK itself: sourcebound's own declarations of its messages are assignable to ModelMessage.
    const history: ModelMessage[] = toModelMessages(p);
    // The AI SDK's schema takes no `citations: null` (the stand-in's default text block): a reply without it.
    messagesServer.enqueue(behaviours.blocks([{ type: 'text', text: 'Noted.' }]));
    await generateText({
      model: anthropic('claude-test'),
      system: 'Be brief.',
      maxRetries: 0,
      messages: [...history, { role: 'user', content: 'And now?' }],
    });
    const body = messagesServer.requests.at(-1)!.body as { messages: WireMessage[] };
    const arrived = body.messages.slice(0, -1);
    checkAlternation(arrived, 2 * p.items.length);
    const marks = arrived.flatMap((m, i) => (typeof m.content !== 'string' && m.content.at(-1)?.cache_control !== undefined ? [i] : []));
    expect(marks).toEqual(anthropicMarks(p));
    expect(marks).toEqual([1, 2 * p.items.length - 1]);
    expect(arrived[marks[0]!]!.content.at(-1)).toMatchObject({ cache_control: { type: 'ephemeral' } });
    // Every text as the Anthropic adapter sends it, but label and summary in one block.
    const expected = toAnthropicMessages(p).map((m) => wireText(m as WireMessage));
    expected[1] = [`${summary.label}\n\nThe phrase of replies 10-19.`];
    expect(arrived.map(wireText)).toEqual(expected);
    // What was counted is the ModelMessage JSON, and what arrived is no larger.
    expect(historyBytes(history)).toBe(p.bytes);
    expect(historyBytes(arrived)).toBeLessThanOrEqual(p.bytes);
  });

  it('@ai-sdk/openai: the assistant summary reads with its blank line; the user parts and note arrive apart; no cache fields', async () => {
    const { p, summary } = await projectionWithEverything('ai-sdk');
    const openai = createOpenAI({ baseURL: chatServer.url, apiKey: 'test-key' });
    await generateText({
      model: openai.chat('gpt-test'),
      maxRetries: 0,
      messages: [...toModelMessages(p), { role: 'user', content: 'And now?' }],
    });
    const body = chatServer.requests.at(-1)!.body as { messages: WireMessage[] };
    const arrived = body.messages.slice(0, -1);
    checkAlternation(arrived, 2 * p.items.length);
    expect(arrived[1]!.content).toBe(`${summary.label}\n\nThe phrase of replies 10-19.`);
    expect(arrived[1]!.content).not.toContain('.]The phrase');
    expect(wireText(arrived[0]!)).toEqual([
      '[sourcebound note: 10 earlier exchanges were left out of this request.]',
      ...summary.userMessages.map((m) => m.text),
    ]);
    expect(wireText(arrived[3]!)).toEqual([`Antwort 20 ${'…'.repeat(20)}`]);
    expect(JSON.stringify(body)).not.toMatch(/cache_control|cacheControl|providerOptions/);
    expect(historyBytes(arrived)).toBeLessThanOrEqual(p.bytes);
  });

  it('leaves cache control out on request, and the history is smaller by what it counted for it', async () => {
    const { p } = await projectionWithEverything('ai-sdk');
    const plain = toModelMessages(p, { anthropicCacheControl: false });
    expect(JSON.stringify(plain)).not.toContain('providerOptions');
    expect(historyBytes(plain)).toBe(p.bytes - 2 * FORMATS['ai-sdk'].breakpointBytes);
    expect(FORMATS['ai-sdk'].breakpointBytes).toBe(
      Buffer.byteLength(',"providerOptions":{"anthropic":{"cacheControl":{"type":"ephemeral"}}}'),
    );
  });
});

describe('budgets a developer can state', () => {
  const id = '00000000-0000-4000-8000-000000000000';
  const cases: [string, Partial<ProjectArgs>, RegExp][] = [
    ['neither budget', {}, /exactly one of budgetBytes and budgetTokens, got neither/],
    ['both budgets', { budgetBytes: 1000, budgetTokens: 300 }, /exactly one of budgetBytes and budgetTokens, got both/],
    ['negative tokens', { budgetTokens: -1 }, /budgetTokens must be a non-negative integer, got -1/],
    ['fractional bytes', { budgetBytes: 10.5 }, /budgetBytes must be a non-negative integer, got 10.5/],
    ['bytesPerToken with bytes', { budgetBytes: 1000, bytesPerToken: 4 }, /bytesPerToken applies to budgetTokens only/],
    ['bytesPerToken zero', { budgetTokens: 1000, bytesPerToken: 0 }, /bytesPerToken must be a positive number, got 0/],
    ['reserve.bytes negative', { budgetBytes: 1000, reserve: { bytes: -5 } }, /reserve.bytes must be a non-negative integer, got -5/],
    [
      'reserve over the budget',
      { budgetTokens: 10, reserve: { system: 'x'.repeat(40) } },
      /the reserve \(42 bytes.*exceeds the budget of 30 bytes/,
    ],
    ['reserve not JSON', { budgetBytes: 1000, reserve: { tools: () => 1 } }, /a reserve part must be JSON/],
    [
      'unknown format',
      { budgetBytes: 1000, format: 'gemini' as ProjectionFormat },
      /format must be 'anthropic', 'openai' or 'ai-sdk', got gemini/,
    ],
  ];
  it.each(cases)('%s: a RangeError that says so', async (_, extra, message) => {
    const call = projectConversationHistory({ pool: db.pool, conversationId: id, scope: 'tenant-a', ...extra } as ProjectArgs);
    await expect(call).rejects.toThrow(RangeError);
    await expect(call).rejects.toThrow(message);
  });

  it('keeps the whole request (system, new message, history) within the stated tokens, as it arrives', async () => {
    const conversationId = await createConversation(db.pool);
    await addPairs(db.pool, conversationId, 60, (i) => ({
      user: `question ${i} ${'q'.repeat(40)}`,
      assistant: `answer ${i} ${'a'.repeat(120)}`,
    }));
    const system = { role: 'system' as const, content: 'You are a careful assistant. '.repeat(20) };
    const next = { role: 'user' as const, content: 'What did we decide about the cache?' };
    // The request's own fields; "messages":[] becomes the messages, which the reserve and the history account for.
    const envelope = { model: 'gpt-test', messages: [] };
    const budgetTokens = 2_000;
    const p = await projectConversationHistory({
      pool: db.pool,
      conversationId,
      scope: 'tenant-a',
      format: 'openai',
      budgetTokens,
      reserve: { system, newMessage: next, bytes: Buffer.byteLength(JSON.stringify(envelope)) },
    });
    expect(p.requestBudgetBytes).toBe(budgetTokens * BYTES_PER_TOKEN);
    expect(p.reservedBytes).toBe(
      Buffer.byteLength(JSON.stringify(system)) + Buffer.byteLength(JSON.stringify(next)) + Buffer.byteLength(JSON.stringify(envelope)),
    );
    expect(p.budgetBytes).toBe(p.requestBudgetBytes - p.reservedBytes);
    expect(p.items.length).toBeGreaterThan(0);
    expect(p.omitted.length).toBeGreaterThan(0);
    const client = new OpenAI({ baseURL: chatServer.url, apiKey: 'test-key', maxRetries: 0 });
    await client.chat.completions.create({ model: envelope.model, messages: [system, ...toOpenAIMessages(p), next] });
    const body = chatServer.requests.at(-1)!.body;
    const sent = Buffer.byteLength(JSON.stringify(body), 'utf8');
    // The body is exactly the reserve plus the history: "[" s "," h... "," u "]" inside the envelope's "[]".
    expect(sent).toBe(p.reservedBytes + p.bytes);
    expect(sent).toBeLessThanOrEqual(p.requestBudgetBytes);
    // A bigger reserve leaves the history less.
    const less = await projectConversationHistory({
      pool: db.pool,
      conversationId,
      scope: 'tenant-a',
      format: 'openai',
      budgetTokens,
      layout: 'newest-first',
      reserve: { system, newMessage: next, bytes: 2_000 },
    });
    expect(less.bytes).toBeLessThanOrEqual(less.budgetBytes);
    expect(less.budgetBytes).toBe(
      p.requestBudgetBytes - Buffer.byteLength(JSON.stringify(system)) - Buffer.byteLength(JSON.stringify(next)) - 2_000,
    );
  });
});
