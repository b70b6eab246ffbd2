import { describe, expect, it } from 'vitest';
import { compactConversation } from '../../src/conversation/compact.ts';
import { attemptsOfConversationRead, summariesOfConversationRead } from '../../src/db/queries/summaries.ts';
import type { FactKind } from '../../src/grounding/index.ts';
import { renderInspection } from '../../src/cli/inspect-command.ts';
import { inspectConversation } from '../../src/conversation/inspect.ts';
import { projectConversationHistory, type SummaryItem } from '../../src/projection/index.ts';
import { addPairs, createConversation } from '../support/fixtures.ts';
import { behaviours } from '../support/messages-server.ts';
import { compactionSetup } from './setup.ts';

/**
 * The grounding check at commit, through the real SDK against the local
 * Messages server: the model's answer is scripted, everything else (gateway,
 * claim, commit, attempts, projection) is the product's own path.
 */
const { db, server, ctx } = await compactionSetup();

// Pair 3's reply holds one fact of every kind; the others are plain.
const FACTS =
  'Order INV-2231 costs $1,250.00 with a fee of 0.5% and weighs 12 kg; billed on 2024-03-05 at 14:30. ' +
  'Docs: https://example.com/fees and src/billing/fees.ts, mail billing@example.com, upgrade to v2.3.1 and run `npm ci --no-audit`.';
const reply = (i: number) =>
  i === 3 ? FACTS : `Reply ${i} says the plan is fine. ${'It goes on about the plan at some length. '.repeat(8)}`;

async function conversation() {
  const c = await createConversation(db.pool);
  await addPairs(db.pool, c, 30, (i) => ({ user: `question ${i}`, assistant: reply(i) }));
  return c;
}

/** A faithful summary whose one fact of `kind` is replaced by an invented one. */
/**
 * The projection at the largest budget (in 10% steps below the whole history) that shows a summary:
 * a history that fits is sent raw, so a summary shows only when the budget needs it.
 */
async function projectNeedingSummary(c: string) {
  const at = (budgetBytes: number) =>
    projectConversationHistory({ pool: db.pool, conversationId: c, scope: 'tenant-a', budgetBytes, layout: 'newest-first' });
  let budget = (await at(1 << 20)).bytes;
  for (let i = 0; i < 30; i++, budget = Math.floor(budget * 0.9)) {
    const p = await at(budget);
    if (p.items.some((it) => it.kind === 'summary')) return p;
  }
  return at(budget);
}

const WRONG: Record<FactKind, [string, string]> = {
  number: ['The fee is 0.9%.', 'number:0.9%'],
  money: ['The order costs $1,260.00.', 'money:$1260.00'],
  date: ['It was billed on 2024-03-06.', 'date:2024-03-06'],
  time: ['It was billed at 15:30.', 'time:15:30'],
  identifier: ['Order INV-2232 was billed.', 'identifier:INV-2232'],
  url: ['Docs at https://example.com/prices.', 'url:https://example.com/prices'],
  email: ['Mail sales@example.com.', 'email:sales@example.com'],
  path: ['See src/billing/prices.ts.', 'path:src/billing/prices.ts'],
  version: ['Upgrade to v2.4.0.', 'version:v2.4.0'],
  code: ['Run `npm install --force`.', 'code:`npm install --force`'],
};

describe('grounding at commit', () => {
  it('accepts a faithful summary that reformats its figures (separators, percent spacing, date style, case)', async () => {
    const c = await conversation();
    server.enqueue(
      behaviours.text(
        'Order inv-2231 costs $1250 (fee 0.5 %), weighs 12kg, billed March 5, 2024 at 2:30 pm; ' +
          'docs HTTPS://EXAMPLE.COM/fees, src/billing/fees.ts, Billing@Example.com, 2.3.1, `npm ci --no-audit`.',
      ),
    );
    const report = await compactConversation(ctx(), c);
    expect(report.ranges.map((r) => r.result)).toEqual(['completed']);
    const [attempt] = await attemptsOfConversationRead(db.pool, c);
    expect(attempt).toMatchObject({ outcome: 'ok', spent: true, groundingUngrounded: [] });
    expect(attempt!.groundingChecked).toHaveLength(11);
  });

  it('accepts the rewrites a model makes of figures written other ways (units in words, 10k, points as separators, short hashes, JSON fields)', async () => {
    const c = await createConversation(db.pool);
    const material =
      'It weighs 12 kilograms, serves 10k users and costs 2.500.000 €; fixed in commit a1b2c3d4e5f6a7b8c9d0 ' +
      'on 03/05/2024 in src/app/main.ts with Python 3.11. {"size_bytes": 1048576, "amount": 1250.5, "currency": "USD"}';
    await addPairs(db.pool, c, 30, (i) => ({ user: `question ${i}`, assistant: i === 3 ? material : reply(i) }));
    server.enqueue(
      behaviours.text(
        'It weighs 12 kg, serves 10,000 users and costs €2,500,000; fixed in a1b2c3d on March 5, 2024 ' +
          'in ./src/app/main.ts with Python3.11; 1,048,576 bytes, $1,250.50.',
      ),
    );
    const report = await compactConversation(ctx(), c);
    expect(report.ranges.map((r) => r.result)).toEqual(['completed']);
    const [attempt] = await attemptsOfConversationRead(db.pool, c);
    expect(attempt).toMatchObject({ outcome: 'ok', groundingUngrounded: [] });
    expect(attempt!.groundingChecked).toEqual([
      'number:12 kg',
      'number:10000',
      'money:€2500000',
      'identifier:a1b2c3d',
      'date:March 5, 2024',
      'path:./src/app/main.ts',
      'identifier:Python3.11',
      'number:1048576 bytes',
      'money:$1250.50',
    ]);
  });

  it("rejects a figure made of another one's decimal part (5% against 0.5%), spending one attempt", async () => {
    const c = await conversation();
    server.enqueue(behaviours.text('Reply 3 says the fee is 5%.'));
    const report = await compactConversation(ctx(), c);
    expect(report.ranges.map((r) => r.result)).toEqual(['attempt_spent']);
    const [attempt] = await attemptsOfConversationRead(db.pool, c);
    expect(attempt).toMatchObject({ outcome: 'invalid', spent: true, groundingUngrounded: ['number:5%'] });
  });

  describe('policy reject (default)', () => {
    it.each(Object.entries(WRONG) as [FactKind, [string, string]][])(
      'an invented %s makes the answer invalid and spends exactly one attempt',
      async (_kind, [text, fact]) => {
        const c = await conversation();
        server.enqueue(behaviours.text(`Reply 3 says: ${text}`));
        const report = await compactConversation(ctx(), c);
        expect(server.count).toBe(1);
        expect(report.ranges.map((r) => r.result)).toEqual(['attempt_spent']);
        const [record] = await summariesOfConversationRead(db.pool, c);
        expect(record).toMatchObject({ status: 'pending', attemptsSpent: 1, summary: null });
        expect(record!.failureReason).toBe(`invalid: ungrounded: 1 fact(s) not in the material: ${fact}`);
        const attempts = await attemptsOfConversationRead(db.pool, c);
        expect(attempts).toHaveLength(1);
        expect(attempts[0]).toMatchObject({ outcome: 'invalid', spent: true, groundingUngrounded: [fact] });
        expect(attempts[0]!.groundingChecked).toContain(fact);
        // The raw pairs stay in use: nothing is projected as a summary.
        const projection = await projectConversationHistory({ pool: db.pool, conversationId: c, scope: 'tenant-a', budgetBytes: 1 << 20 });
        expect(projection.items.filter((i) => i.kind === 'summary')).toEqual([]);
        expect(projection.items).toHaveLength(30);
      },
    );

    it('a second ungrounded answer fails the identity for good, like any invalid answer; no third call', async () => {
      const c = await conversation();
      server.enqueue(behaviours.text('The fee is 0.9%.'), behaviours.text('Order INV-9999.'));
      expect((await compactConversation(ctx(), c)).ranges.map((r) => r.result)).toEqual(['attempt_spent']);
      expect((await compactConversation(ctx(), c)).ranges.map((r) => r.result)).toEqual(['failed']);
      expect(server.count).toBe(2);
      const [record] = await summariesOfConversationRead(db.pool, c);
      expect(record).toMatchObject({ status: 'failed', attemptsSpent: 2 });
      expect((await attemptsOfConversationRead(db.pool, c)).map((a) => a.groundingUngrounded)).toEqual([
        ['number:0.9%'],
        ['identifier:INV-9999'],
      ]);
      server.reset();
      expect((await compactConversation(ctx(), c)).ranges.map((r) => r.result)).toEqual(['failed']);
      expect(server.count).toBe(0);
    });

    it('after one ungrounded answer, a grounded second one completes the range', async () => {
      const c = await conversation();
      server.enqueue(behaviours.text('The fee is 0.9%.'), behaviours.text('The fee is 0.5%.'));
      expect((await compactConversation(ctx(), c)).ranges.map((r) => r.result)).toEqual(['attempt_spent']);
      expect((await compactConversation(ctx(), c)).ranges.map((r) => r.result)).toEqual(['completed']);
      const [record] = await summariesOfConversationRead(db.pool, c);
      expect(record).toMatchObject({ status: 'completed', attemptsSpent: 2, summary: 'The fee is 0.5%.' });
    });
  });

  describe('policy flag', () => {
    it.each(Object.entries(WRONG) as [FactKind, [string, string]][])(
      'an invented %s completes, is recorded, and the projection names it in the label',
      async (_kind, [text, fact]) => {
        const c = await conversation();
        server.enqueue(behaviours.text(`Reply 3 says: ${text}`));
        const report = await compactConversation(ctx({ grounding: 'flag' }), c);
        expect(report.ranges.map((r) => r.result)).toEqual(['completed']);
        const [attempt] = await attemptsOfConversationRead(db.pool, c);
        expect(attempt).toMatchObject({ outcome: 'ok', spent: true, groundingUngrounded: [fact] });
        const projection = await projectNeedingSummary(c);
        const [summary] = projection.items.filter((i): i is SummaryItem => i.kind === 'summary');
        expect(summary).toMatchObject({ fromPair: 0, ungrounded: [fact] });
        expect(summary!.label).toContain(
          `Warning: this figure is not in the replies it summarizes and may be wrong: ${fact.slice(fact.indexOf(':') + 1)}.`,
        );
      },
    );

    it('a grounded summary under flag has a plain label', async () => {
      const c = await conversation();
      server.enqueue(behaviours.text('Reply 3: the fee is 0.5% on 2024-03-05.'));
      await compactConversation(ctx({ grounding: 'flag' }), c);
      const projection = await projectNeedingSummary(c);
      const [summary] = projection.items.filter((i): i is SummaryItem => i.kind === 'summary');
      expect(summary).toMatchObject({ ungrounded: [] });
      expect(summary!.label).not.toContain('Warning');
    });
  });

  it('sourcebound inspect shows, per record and attempt, what was checked and what failed', async () => {
    const c = await conversation();
    server.enqueue(behaviours.text('Reply 3: the fee is 0.9% for INV-2231.'), behaviours.text('Reply 3: the fee is 0.5% for INV-2231.'));
    await compactConversation(ctx(), c);
    await compactConversation(ctx(), c);
    const inspection = await inspectConversation(db.pool, c, 'tenant-a');
    expect(inspection.records[0]!.attempts.map((a) => [a.outcome, a.grounding])).toEqual([
      ['invalid', { checked: ['number:0.9%', 'identifier:INV-2231'], ungrounded: ['number:0.9%'] }],
      ['ok', { checked: ['number:0.5%', 'identifier:INV-2231'], ungrounded: [] }],
    ]);
    const text = renderInspection(inspection);
    expect(text).toContain('attempt 1: invalid (spent) — ungrounded: 1 fact(s) not in the material: number:0.9%');
    expect(text).toContain('grounding: 2 fact(s) checked, 1 NOT in the sources: number:0.9%; checked: number:0.9%, identifier:INV-2231');
    expect(text).toContain('grounding: 2 fact(s) checked, all in the sources; checked: number:0.5%, identifier:INV-2231');
  });
});
