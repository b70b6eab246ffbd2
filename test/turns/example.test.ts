import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { answer, answerStreamed } from '../../examples/write-turns.ts';
import { createTestDatabase } from '../support/db.ts';
import { docCodeFrom, formatted } from '../support/doc-code.ts';
import { pairCount } from '../support/fixtures.ts';

/** The turn helpers of docs/turns.md are examples/write-turns.ts; run here against a real database. */
const db = await createTestDatabase();
const { pool } = db;
const scope = 'tenant-42';

const statuses = async (conversationId: string) =>
  (
    await pool.query(
      `select r.status as run, a.status as reply, a.content from sourcebound.runs r
   left join sourcebound.messages a on a.run_id = r.id and a.role = 'assistant'
   where r.conversation_id = $1 order by r.seq`,
      [conversationId],
    )
  ).rows;

describe('the turn helpers of docs/turns.md (examples/write-turns.ts)', () => {
  it('is the code docs/turns.md shows (compared as Prettier prints it: layout may differ)', async () => {
    const readme = readFileSync(new URL('../../docs/turns.md', import.meta.url), 'utf8');
    const file = readFileSync(new URL('../../examples/write-turns.ts', import.meta.url), 'utf8');
    const start = 'export async function answer(';
    const code = file.slice(file.indexOf(start));
    expect(code.length).toBeGreaterThan(500);
    expect(await formatted(docCodeFrom(readme, start))).toBe(await formatted(code));
  });

  it('writes whole and streamed replies as pairs, and a model that fails as a failed turn', async () => {
    const { conversationId } = await answer(pool, scope, undefined, 'What is 2 + 2?', async () => '4');
    async function* stream() {
      yield 'The answer ';
      yield 'is 6.';
    }
    await answerStreamed(pool, scope, conversationId, 'And 3 + 3?', stream);
    await expect(
      answer(pool, scope, conversationId, 'And 4 + 4?', async () => {
        throw new Error('overloaded');
      }),
    ).rejects.toThrow('overloaded');
    async function* broken() {
      yield 'Half';
      throw new Error('stream cut');
    }
    await expect(answerStreamed(pool, scope, conversationId, 'And 5 + 5?', broken)).rejects.toThrow('stream cut');
    expect(await statuses(conversationId)).toEqual([
      { run: 'completed', reply: 'completed', content: '4' },
      { run: 'completed', reply: 'completed', content: 'The answer is 6.' },
      { run: 'failed', reply: null, content: null },
      { run: 'failed', reply: 'failed', content: 'Half' },
    ]);
    expect(await pairCount(pool, conversationId)).toBe(2);
  });
});
