import Anthropic from '@anthropic-ai/sdk';
import { afterAll, describe, expect, it } from 'vitest';
import {
  BREAKPOINT_BYTES,
  itemBytes,
  messagesBytes,
  noteBytes,
  projectConversationHistory,
  projectedBytes,
  toAnthropicMessages,
  type ConversationProjection,
  type MessageParam,
} from '../../src/projection/index.ts';
import { createTestDatabase } from '../support/db.ts';
import { addPairs, createConversation } from '../support/fixtures.ts';
import { startMessagesServer } from '../support/messages-server.ts';
import { insertSummary } from './support.ts';

const db = await createTestDatabase();
const server = await startMessagesServer();
afterAll(() => server.close());

/** 45 pairs, a usable summary of 10-19, and a budget of exactly: a note for 0-9, that summary, pairs 20-44 raw. */
async function projectionWithEverything(): Promise<ConversationProjection> {
  const id = await createConversation(db.pool);
  await addPairs(db.pool, id, 45, (i) => ({ user: `Frage ${i}: 数据? 🚀`, assistant: `Antwort ${i} ${'…'.repeat(20)}` }));
  await insertSummary(db.pool, { conversationId: id, fromPair: 10, summary: 'Summary of replies 10-19.' });
  const full = await projectConversationHistory({
    pool: db.pool,
    conversationId: id,
    scope: 'tenant-a',
    budgetBytes: 1_000_000,
    layout: 'newest-first',
  });
  // The whole history fits raw: all of it, no summary.
  expect(full.items.map((i) => i.kind)).toEqual(Array(45).fill('pair'));
  const half = await projectConversationHistory({
    pool: db.pool,
    conversationId: id,
    scope: 'tenant-a',
    budgetBytes: Math.floor(full.bytes / 2),
    layout: 'newest-first',
  });
  const summary = half.items.find((i) => i.kind === 'summary')!;
  const budget = projectedBytes([summary, ...full.items.slice(20)], [{ fromPair: 0, toPair: 9, reason: 'budget' }]);
  const p = await projectConversationHistory({
    pool: db.pool,
    conversationId: id,
    scope: 'tenant-a',
    budgetBytes: budget,
    layout: 'newest-first',
  });
  expect(p.items.map((i) => i.kind)).toEqual(['summary', ...Array(25).fill('pair')]);
  expect(p.omitted).toEqual([{ fromPair: 0, toPair: 9, reason: 'budget' }]);
  return p;
}

/** Roles alternate user/assistant starting with a user turn; every block is non-empty text. */
function checkAlternation(messages: readonly { role: string; content: unknown }[]): void {
  messages.forEach((m, i) => expect(m.role, `message ${i}`).toBe(i % 2 === 0 ? 'user' : 'assistant'));
  for (const m of messages) {
    expect(Array.isArray(m.content)).toBe(true);
    for (const block of m.content as { type: string; text: string }[]) {
      expect(block.type).toBe('text');
      expect(block.text.length).toBeGreaterThan(0);
    }
  }
}

const texts = (m: MessageParam) =>
  Array.isArray(m.content) ? m.content.map((b) => (b.type === 'text' ? b.text : `<${b.type}>`)) : [m.content];

describe('toAnthropicMessages', () => {
  it('starts with a user turn, alternates, ends with an assistant turn, and leads with the note', async () => {
    const p = await projectionWithEverything();
    const messages = toAnthropicMessages(p);
    checkAlternation(messages);
    expect(messages).toHaveLength(2 * p.items.length);
    expect(messages.at(-1)!.role).toBe('assistant');
    expect(messagesBytes(messages)).toBe(p.bytes);
    expect(Buffer.byteLength(JSON.stringify(messages), 'utf8')).toBe(p.bytes);

    // The note is its own block in front of the first user turn; the user messages follow unchanged.
    const [first, second] = messages;
    const summary = p.items[0]!;
    if (summary.kind !== 'summary') throw new Error('expected a summary first');
    expect(texts(first!)).toEqual([
      '[sourcebound note: 10 earlier exchanges were left out of this request.]',
      ...summary.userMessages.map((m) => m.text),
    ]);
    // The summary: an assistant turn, labelled as a non-authoritative summary of assistant replies.
    expect(texts(second!)).toEqual([summary.label, 'Summary of replies 10-19.']);
    expect(summary.label).toContain("non-authoritative summary of the assistant's replies for pairs 10-19");
    // Raw pairs: one block each, verbatim.
    expect(texts(messages[2]!)).toEqual(['Frage 20: 数据? 🚀']);
    expect(texts(messages[3]!)).toEqual([`Antwort 20 ${'…'.repeat(20)}`]);
  });

  it('marks the end of the history and the end of the newest summary with cache breakpoints, counted in the bytes; off on request', async () => {
    const p = await projectionWithEverything();
    const messages = toAnthropicMessages(p);
    const blocks = messages.flatMap((m) => (Array.isArray(m.content) ? m.content : []));
    const marked = blocks.filter((b) => 'cache_control' in b && b.cache_control !== undefined);
    // A prompt cache holds a prefix only where a request put a breakpoint: after the summary, so a later
    // request that keeps the summary (and changes what follows it) reads it from the cache.
    expect(marked).toHaveLength(2);
    expect(marked[0]).toBe((messages[1]!.content as unknown[]).at(-1));
    expect(p.items[0]).toMatchObject({ kind: 'summary' });
    expect(marked[1]).toBe(blocks.at(-1));
    expect(marked[1]).toMatchObject({ cache_control: { type: 'ephemeral' } });
    const plain = toAnthropicMessages(p, { cacheBreakpoint: false });
    expect(JSON.stringify(plain)).not.toContain('cache_control');
    expect(messagesBytes(plain)).toBe(p.bytes - 2 * BREAKPOINT_BYTES);
    expect(BREAKPOINT_BYTES).toBe(Buffer.byteLength(',"cache_control":{"type":"ephemeral"}'));
  });

  it('has no note when nothing was left out, and no messages when nothing fitted', async () => {
    const id = await createConversation(db.pool);
    await addPairs(db.pool, id, 3);
    const all = await projectConversationHistory({ pool: db.pool, conversationId: id, scope: 'tenant-a', budgetBytes: 100_000 });
    expect(texts(toAnthropicMessages(all)[0]!)).toEqual(['question 0']);
    const none = await projectConversationHistory({ pool: db.pool, conversationId: id, scope: 'tenant-a', budgetBytes: 50 });
    expect(none.items).toEqual([]);
    expect(toAnthropicMessages(none)).toEqual([]);
    expect(none.bytes).toBe(0);
  });

  it('says "1 earlier exchange" in the singular', () => {
    const messages = toAnthropicMessages({
      items: [{ kind: 'pair', pairIndex: 1, runId: 'r', userMessageId: 'u', assistantMessageId: 'a', userText: 'q', assistantText: 'a' }],
      omitted: [{ fromPair: 0, toPair: 0, reason: 'budget' }],
    });
    expect(texts(messages[0]!)).toEqual(['[sourcebound note: 1 earlier exchange was left out of this request.]', 'q']);
  });

  it('the note is always cheaper than the cheapest item, so reserving it never costs an older pair', () => {
    const cheapest = itemBytes({
      kind: 'pair',
      pairIndex: 0,
      runId: '',
      userMessageId: '',
      assistantMessageId: '',
      userText: 'x',
      assistantText: 'x',
    });
    expect(noteBytes(Number.MAX_SAFE_INTEGER)).toBeLessThan(cheapest);
  });

  it('goes through the real SDK to a Messages API server and back', async () => {
    const p = await projectionWithEverything();
    const history = toAnthropicMessages(p);
    const client = new Anthropic({ apiKey: server.apiKey, baseURL: server.url, maxRetries: 0 });
    // Typed by the SDK: this line does not compile if the adapter's output is not MessageParam[].
    const request: Anthropic.MessageCreateParamsNonStreaming = {
      model: 'claude-test',
      max_tokens: 64,
      messages: [...history, { role: 'user', content: 'And what about today?' }],
    };
    server.reset();
    const response = await client.messages.create(request);
    expect(response.type).toBe('message');
    expect(response.stop_reason).toBe('end_turn');

    const received = server.requests.at(-1)!.body as { messages: { role: string; content: unknown }[] };
    // The caller's new turn goes after the history's last (assistant) turn: alternation holds end to end.
    received.messages.forEach((m, i) => expect(m.role).toBe(i % 2 === 0 ? 'user' : 'assistant'));
    checkAlternation(received.messages.slice(0, -1));
    // What arrived is byte for byte what was projected and counted.
    expect(JSON.stringify(received.messages.slice(0, -1))).toBe(JSON.stringify(history));
    expect(Buffer.byteLength(JSON.stringify(received.messages.slice(0, -1)), 'utf8')).toBe(p.bytes);
  });
});
