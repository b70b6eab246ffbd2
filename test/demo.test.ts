import { describe, expect, it } from 'vitest';
import { DEMO_SCOPE, readThreads, conversationIdFor } from '../src/cli/demo-threads.ts';
import { OFFLINE_MODEL } from '../src/gateway/offline.ts';
import { createTestDatabase } from './support/db.ts';
import { spawnSourcebound } from './support/processes.ts';

const db = await createTestDatabase();

describe('sourcebound demo', () => {
  it('writes the sample conversations, settles every planned range with the offline summarizer, and reports bytes', async () => {
    const demo = spawnSourcebound(['demo', '--timeout', '120'], { DATABASE_URL: db.url });
    const stdout: string[] = [];
    demo.child.stdout!.on('data', (chunk: Buffer) => stdout.push(chunk.toString()));
    expect(await demo.exited).toBe(0);
    const out = stdout.join('');
    expect(out).toMatch(/ranges settled: 7\/7 \(completed 7, failed 0\)/);
    expect(out).toMatch(/offline extractive/);
    for (const thread of readThreads()) expect(out).toContain(thread.id);
    // The data stays for inspect/project, summarized by the offline model identity.
    const { rows } = await db.pool.query(
      `select model, count(*)::int as n from sourcebound.conversation_summaries s join sourcebound.conversations c on c.id = s.conversation_id
       where c.scope = $1 and s.status = 'completed' group by model`,
      [DEMO_SCOPE],
    );
    expect(rows).toEqual([{ model: OFFLINE_MODEL, n: 7 }]);
    // Running it again reuses the same conversations; LOG_LEVEL= (empty) is unset (before, pino crashed on it).
    const again = spawnSourcebound(['demo', '--timeout', '60'], { DATABASE_URL: db.url, LOG_LEVEL: '' });
    expect(await again.exited).toBe(0);
    expect(again.stderr).toBe('');
    const {
      rows: [count],
    } = await db.pool.query('select count(*)::int as n from sourcebound.conversations where scope = $1', [DEMO_SCOPE]);
    expect(count.n).toBe(readThreads().length);
    expect(conversationIdFor('x')).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  });

  it('--budget and --timeout take plain decimal digits only, as `project --budget` and the numeric settings do', async () => {
    // An unreachable database: a value taken as a number would get as far as connecting (exit 1, not 2).
    const env = { DATABASE_URL: 'postgres://postgres@127.0.0.1:1/db' };
    await Promise.all(
      [
        ['--budget', ''],
        ['--budget', '0x100'],
        ['--budget', '1e3'],
        ['--budget', ' 5'],
        ['--timeout', '1e3'],
        ['--timeout', '0.5'],
        ['--timeout', '0'],
      ].map(async ([option, value]) => {
        const demo = spawnSourcebound(['demo', option!, value!], env);
        expect(await demo.exited, `${option} ${JSON.stringify(value)}`).toBe(2);
        expect(demo.stderr).toMatch(
          new RegExp(
            `^sourcebound demo: ${option} must be (a whole number of (bytes|seconds), got '${value}' \\(plain decimal digits|at least 1, got 0\\n)`,
          ),
        );
      }),
    );
  });
});
