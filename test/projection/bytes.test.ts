import { describe, expect, it } from 'vitest';
import { messagesBytes, projectConversationHistory, toAnthropicMessages, type ConversationProjection } from '../../src/projection/index.ts';
import { createTestDatabase } from '../support/db.ts';
import { addPairs, createConversation } from '../support/fixtures.ts';
import { insertSummary, rangeSource } from './support.ts';

const db = await createTestDatabase();

// Characters of 1, 2, 3 and 4 UTF-8 bytes, a ZWJ sequence, and characters JSON escapes.
const PIECES = ['a', 'é', '数', '据', '🚀', '👩‍👩‍👧', '"', '\\', '\n', '\u0001', 'ｱ'];
const text = (seed: number, length: number) => Array.from({ length }, (_, i) => PIECES[(seed * 7 + i * 3) % PIECES.length]).join('');

describe('byte accounting', () => {
  it.each(['newest-first', 'stable'] as const)(
    'never exceeds the budget and never cuts an item, for every budget in steps (%s)',
    async (layout) => {
      const id = await createConversation(db.pool);
      // 31 pairs: range 0-9 is plannable (outside the newest 20), so its summary may be used.
      await addPairs(db.pool, id, 31, (i) => ({
        user: `问 ${i} ${text(i, 5 + (i % 4) * 7)}`,
        assistant: `答 ${i} ${text(i + 1, 10 + (i % 5) * 11)}`,
      }));
      await insertSummary(db.pool, { conversationId: id, fromPair: 0, summary: `要約 🚀 ${text(3, 40)}` });
      const source = await rangeSource(db.pool, id, 0, 30);
      const full = await projectConversationHistory({
        pool: db.pool,
        conversationId: id,
        scope: 'tenant-a',
        budgetBytes: 1_000_000,
        layout,
      });
      // The whole history fits raw: sent whole, no summary.
      expect(full.omitted).toEqual([]);

      // Every 7th budget from 0 to past the whole history, eight at a time.
      const budgets = Array.from({ length: Math.ceil((full.bytes + 10) / 7) + 1 }, (_, i) => i * 7);
      const results: ConversationProjection[] = [];
      for (let i = 0; i < budgets.length; i += 8) {
        results.push(
          ...(await Promise.all(
            budgets
              .slice(i, i + 8)
              .map((budgetBytes) =>
                projectConversationHistory({ pool: db.pool, conversationId: id, scope: 'tenant-a', budgetBytes, layout }),
              ),
          )),
        );
      }
      let lastCovered = 0;
      for (const p of results) {
        const budget = p.budgetBytes;
        const messages = toAnthropicMessages(p);
        expect(p.bytes, `budget ${budget}`).toBe(messagesBytes(messages));
        expect(p.bytes, `budget ${budget}`).toBeLessThanOrEqual(budget);
        if (messages.length > 0) expect(Buffer.byteLength(JSON.stringify(messages), 'utf8')).toBeLessThanOrEqual(budget);
        checkWhole(p, source);
        // More budget never covers fewer pairs (newest-first: in stable mode, budgets within 25% of each
        // other share one layout, which a smaller one may have made).
        const covered = p.pairCount - p.omitted.reduce((n, s) => n + s.toPair - s.fromPair + 1, 0);
        if (layout === 'newest-first') expect(covered, `budget ${budget}`).toBeGreaterThanOrEqual(lastCovered);
        lastCovered = covered;
      }
      expect(results.length).toBeGreaterThan(800);
      if (layout === 'stable') return;
      expect(lastCovered).toBe(31);

      // The accounting is exact: a budget of exactly a projection's bytes is never exceeded and never left empty.
      for (const p of results.filter((_, i) => i % 20 === 0 && _.items.length > 0)) {
        const again = await projectConversationHistory({
          pool: db.pool,
          conversationId: id,
          scope: 'tenant-a',
          budgetBytes: p.bytes,
          layout,
        });
        expect(again.bytes).toBeLessThanOrEqual(p.bytes);
        expect(again.items.length).toBeGreaterThan(0);
      }
    },
  );

  it('counts multi-byte text exactly as the adapter serializes it', () => {
    const p = {
      items: [
        {
          kind: 'pair' as const,
          pairIndex: 3,
          runId: 'r',
          userMessageId: 'u',
          assistantMessageId: 'a',
          userText: '数据 🚀 "q"\u0001',
          assistantText: 'é\n',
        },
      ],
      omitted: [{ fromPair: 0, toPair: 2, reason: 'budget' as const }],
    };
    const messages = toAnthropicMessages(p);
    expect(messagesBytes(messages)).toBe(Buffer.byteLength(JSON.stringify(messages), 'utf8'));
    expect(messagesBytes(messages)).toBeGreaterThan(JSON.stringify(messages).length);
  });
});

/** Every item is whole: its texts are exactly the stored ones, never a cut. */
function checkWhole(p: ConversationProjection, source: { userText: string; assistantText: string }[]): void {
  for (const item of p.items) {
    if (item.kind === 'pair') {
      expect(item.userText).toBe(source[item.pairIndex]!.userText);
      expect(item.assistantText).toBe(source[item.pairIndex]!.assistantText);
    } else {
      expect(item.userMessages.map((m) => m.text)).toEqual(source.slice(item.fromPair, item.toPair + 1).map((s) => s.userText));
    }
  }
}
