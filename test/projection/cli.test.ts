import { describe, expect, it } from 'vitest';
import { projectCommand } from '../../src/cli/project-output.ts';
import { ConversationNotFoundError, projectConversationHistory } from '../../src/projection/index.ts';
import { createTestDatabase } from '../support/db.ts';
import { addPairs, createConversation } from '../support/fixtures.ts';
import { insertSummary } from './support.ts';
import { spawnSourcebound } from '../support/processes.ts';

const db = await createTestDatabase();

async function run(conversationId: string, budgetBytes: number, json: boolean, scope = 'tenant-a'): Promise<string[]> {
  const lines: string[] = [];
  await projectCommand({
    pool: db.pool,
    conversationId,
    scope,
    budgetBytes,
    layout: 'newest-first',
    json,
    out: (line) => lines.push(line),
  });
  return lines;
}

describe('sourcebound project', () => {
  it('prints the projection object as JSON', async () => {
    const id = await createConversation(db.pool);
    await addPairs(db.pool, id, 31);
    await insertSummary(db.pool, { conversationId: id, fromPair: 0 });
    const lines = await run(id, 3000, true);
    expect(lines).toHaveLength(1);
    expect(JSON.parse(lines[0]!)).toEqual(
      await projectConversationHistory({ pool: db.pool, conversationId: id, scope: 'tenant-a', budgetBytes: 3000, layout: 'newest-first' }),
    );
  });

  it('prints one line per range: summarized, raw, partial, omitted, with totals', async () => {
    const id = await createConversation(db.pool);
    await addPairs(db.pool, id, 35);
    const recordId = await insertSummary(db.pool, { conversationId: id, fromPair: 0 });
    const all = await run(id, 1_000_000, false);
    expect(all[0]).toBe(`conversation ${id} (scope tenant-a): 35 pairs`);
    // All of it fits raw: sent whole, no summary needed.
    expect(all.slice(1, -2)).toEqual(['pairs 0-9  raw', 'pairs 10-19  raw', 'pairs 20-29  raw', 'pairs 30-34  raw']);
    expect(all.at(-2)).toMatch(/^total: \d+\/1000000 bytes; 35 pairs raw, 0 summarized in 0 ranges, 0 omitted$/);

    // A budget that holds the newest pairs raw, the summary of 0-9 and part of range 20-29: a gap between.
    const p = await projectConversationHistory({
      pool: db.pool,
      conversationId: id,
      scope: 'tenant-a',
      budgetBytes: 2500,
      layout: 'newest-first',
    });
    const oldestRaw = Math.min(...p.items.flatMap((i) => (i.kind === 'pair' ? [i.pairIndex] : [])));
    expect(oldestRaw).toBeGreaterThan(20);
    expect(oldestRaw).toBeLessThan(30);
    const some = await run(id, 2500, false);
    expect(some.slice(1, -2)).toEqual([
      `pairs 0-9  summarized (record ${recordId}, conversation-compaction@4)`,
      'pairs 10-19  omitted (budget); summary not used: not_yet_summarized',
      `pairs 20-29  partial: pairs ${oldestRaw}-29 raw, ${oldestRaw === 21 ? 'pair 20' : `pairs 20-${oldestRaw - 1}`} omitted (budget)`,
      'pairs 30-34  raw',
    ]);
    expect(some.at(-1)).toBe('cache: newest-first layout (filled anew on every call)');
    expect(some.at(-2)).toBe(
      `total: ${p.bytes}/2500 bytes; ${35 - oldestRaw} pairs raw, 10 summarized in 1 ranges, ${oldestRaw - 10} omitted`,
    );
  });

  it('folds the ranges the walk never reached into one line', async () => {
    const id = await createConversation(db.pool);
    await addPairs(db.pool, id, 200);
    const lines = await run(id, 1500, false);
    // Ranges never looked at are one line; those judged for a summary say why none came.
    expect(lines[1]).toMatch(/^pairs 0-\d+  omitted \(budget\) \[\d+ ranges\]$/);
    expect(lines.filter((l) => l.includes('summary not used: not_yet_summarized'))).toHaveLength(4);
    expect(lines.length).toBeLessThan(10);
  });

  it('shows the stable layout the next call would get, without storing one', async () => {
    const id = await createConversation(db.pool);
    await addPairs(db.pool, id, 60);
    const lines: string[] = [];
    await projectCommand({
      pool: db.pool,
      conversationId: id,
      scope: 'tenant-a',
      budgetBytes: 4000,
      json: false,
      out: (line) => lines.push(line),
    });
    expect(lines.at(-1)).toMatch(/^cache: stable layout made, down to \d+ bytes when the history does not fit$/);
    const stored = await db.pool.query('select 1 from sourcebound.projection_layouts where conversation_id = $1', [id]);
    expect(stored.rowCount).toBe(0);
    const p = await projectConversationHistory({
      pool: db.pool,
      conversationId: id,
      scope: 'tenant-a',
      budgetBytes: 4000,
      persistLayout: false,
    });
    expect(lines.at(-2)).toBe(
      `total: ${p.bytes}/4000 bytes; ${p.items.length} pairs raw, 0 summarized in 0 ranges, ${60 - p.items.length} omitted`,
    );
  });

  it('a conversation of another scope is not found', async () => {
    const id = await createConversation(db.pool);
    await expect(run(id, 1000, false, 'tenant-b')).rejects.toThrow(ConversationNotFoundError);
  });

  it('--budget is plain decimal digits (the parser of the numeric settings): blanks, hex, exponents are usage errors', async () => {
    const id = await createConversation(db.pool);
    await Promise.all(
      ['', ' 100', '100 ', '0x100', '1e3', '0b11', '1.5', '+100'].map(async (budget) => {
        const cli = spawnSourcebound(['project', id, '--scope', 'tenant-a', '--budget', budget], { DATABASE_URL: db.url });
        expect(await cli.exited, JSON.stringify(budget)).toBe(2);
        expect(cli.stderr).toContain(
          `sourcebound project: --budget must be a whole number of bytes, got '${budget}' (plain decimal digits 0-9 only: no sign, spaces, hex, binary or exponent)`,
        );
      }),
    );
  });
});
