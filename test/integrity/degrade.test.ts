import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { renderInspection } from '../../src/cli/inspect-command.ts';
import { repairCommand } from '../../src/cli/repair-command.ts';
import { inspectConversation } from '../../src/conversation/inspect.ts';
import { messagesBytes, projectConversationHistory, toAnthropicMessages } from '../../src/projection/index.ts';
import type { ConversationProjection } from '../../src/projection/types.ts';
import { repairConversation } from '../../src/conversation/repair.ts';
import { createTestDatabase } from '../support/db.ts';
import { addPairs, createConversation, drift, type WrittenPair } from '../support/fixtures.ts';
import { spawnSourcebound } from '../support/processes.ts';
import { compactOffline, longText, shape, summaryVerdicts } from './support.ts';

/**
 * Issue 11 item 9: whatever the stored state, projection degrades to what it
 * can prove and says so, inspect names the inconsistency and its repair, and
 * `sourcebound repair` rebuilds the index. The states are made the way they
 * happen in the field: writes around the triggers (a restore, a replica
 * session, a hand-edited index), which the triggers cannot prevent.
 */
const db = await createTestDatabase();

/** Runs SQL with every trigger off (session_replication_role = replica), as a logical restore would. */
async function aroundTheTriggers(sql: string, params: unknown[]): Promise<void> {
  const client = await db.pool.connect();
  try {
    await client.query('set session_replication_role = replica');
    await client.query(sql, params);
  } finally {
    await client.query('reset session_replication_role');
    client.release();
  }
}

interface State {
  name: string;
  /** Makes the state; returns the conversations it concerns besides the main one. */
  make: (c: string, written: WrittenPair[]) => Promise<string[]>;
  /** Whether the projection can see it (a gap) or only the drift check can. */
  visible: boolean;
}

const states: State[] = [
  {
    name: 'a row missing from the index',
    visible: true,
    make: async (_c, w) => {
      await db.pool.query('delete from sourcebound.pairs where run_id = $1', [w[25]!.runId]);
      return [];
    },
  },
  {
    name: 'a message id changed around the triggers',
    visible: true,
    make: async (_c, w) => {
      await aroundTheTriggers('update sourcebound.messages set id = gen_random_uuid() where id = $1', [w[33]!.userMessageId]);
      return [];
    },
  },
  {
    name: 'a half-applied move (run and messages moved, index not)',
    visible: true,
    make: async (_c, w) => {
      const target = await createConversation(db.pool);
      await addPairs(db.pool, target, 5);
      await aroundTheTriggers(
        `with m as (update sourcebound.messages set conversation_id = $2 where run_id = $1)
         update sourcebound.runs set conversation_id = $2 where id = $1`,
        [w[36]!.runId, target],
      );
      return [target];
    },
  },
  {
    name: 'indexes out of place ([0..38, 44])',
    visible: true,
    make: async (c) => {
      await db.pool.query('update sourcebound.pairs set pair_index = 44 where conversation_id = $1 and pair_index = 39', [c]);
      return [];
    },
  },
  {
    name: 'an ineligible run still indexed',
    visible: false,
    make: async (_c, w) => {
      await aroundTheTriggers(`update sourcebound.runs set status = 'failed' where id = $1`, [w[31]!.runId]);
      return [];
    },
  },
];

const warnings: { details: { problems?: unknown[] }; message: string }[] = [];
const logger = {
  warn: (details: object, message: string) => {
    warnings.push({ details, message });
  },
};

async function projectBoth(c: string, budgetBytes: number): Promise<ConversationProjection[]> {
  return [
    await projectConversationHistory({ pool: db.pool, conversationId: c, scope: 'tenant-a', budgetBytes, layout: 'newest-first', logger }),
    await projectConversationHistory({ pool: db.pool, conversationId: c, scope: 'tenant-a', budgetBytes, logger }),
  ];
}

/** Every message a projection carries belongs to the conversation. */
async function ownMessages(p: ConversationProjection, c: string, pool: pg.Pool): Promise<void> {
  const ids = p.items.flatMap((i) =>
    i.kind === 'pair' ? [i.userMessageId, i.assistantMessageId] : i.userMessages.map((u) => u.messageId),
  );
  const { rows } = await pool.query<{ n: number }>(
    'select count(*)::int as n from sourcebound.messages where id = any($1::uuid[]) and conversation_id = $2',
    [ids, c],
  );
  expect(rows[0]!.n).toBe(ids.length);
}

describe('9. projection degrades, inspect names the problem, repair rebuilds', () => {
  it.each(states)('$name', async (state) => {
    const c = await createConversation(db.pool);
    const written = await addPairs(db.pool, c, 40, longText);
    await compactOffline(db.pool, c);
    const others = await state.make(c, written);
    expect(await drift(db.pool, c)).not.toEqual([]);

    for (const budget of [10_000_000, 20_000]) {
      warnings.length = 0;
      for (const p of await projectBoth(c, budget)) {
        // Reported in the result and in the log, once per call that degraded.
        expect(warnings.filter((w) => w.details.problems === p.problems)).toHaveLength(p.problems.length > 0 ? 1 : 0);
        expect(p.bytes).toBeLessThanOrEqual(budget);
        expect(messagesBytes(toAnthropicMessages(p))).toBe(p.bytes);
        await ownMessages(p, c, db.pool);
        if (state.visible && budget > 1_000_000) {
          expect(p.problems.length).toBeGreaterThan(0);
          expect(p.problems[0]!.message).toContain(`sourcebound repair ${c} --scope tenant-a`);
          expect(p.omitted.at(0)?.reason).toBe('inconsistent');
        }
      }
    }

    const inspection = await inspectConversation(db.pool, c, 'tenant-a');
    expect(inspection.problems).toHaveLength(1);
    expect(inspection.problems[0]).toMatchObject({ kind: 'pair_index_drift', repair: `sourcebound repair ${c} --scope tenant-a` });
    expect(renderInspection(inspection)).toMatch(new RegExp(`PROBLEM: the pair index differs .*sourcebound repair ${c} --scope tenant-a`));

    const report = await repairConversation(db.pool, c, 'tenant-a');
    expect(report.before.length).toBeGreaterThan(0);
    expect(report.after).toEqual([]);
    expect(await drift(db.pool, c)).toEqual([]);
    for (const other of others) expect(await drift(db.pool, other)).toEqual([]);
    expect((await inspectConversation(db.pool, c, 'tenant-a')).problems).toEqual([]);
    for (const p of await projectBoth(c, 10_000_000)) expect(p.problems).toEqual([]);
    // A second repair finds nothing to do and writes nothing.
    expect((await repairConversation(db.pool, c, 'tenant-a')).before).toEqual([]);
    // Compaction works again: every plannable range is summarized, and its summary may be projected.
    await compactOffline(db.pool, c);
    const [after] = await projectBoth(c, 10_000_000);
    expect((await summaryVerdicts(db.pool, c)).usable.length).toBe(after!.pairCount >= 40 ? 2 : 1);
  });

  it('the CLI: project and inspect report the problem (exit 0, no stack trace), repair fixes it', async () => {
    const c = await createConversation(db.pool);
    const written = await addPairs(db.pool, c, 35);
    await db.pool.query('delete from sourcebound.pairs where run_id = $1', [written[12]!.runId]);
    const env = { DATABASE_URL: db.url };
    const collect = (args: string[]) => {
      const cli = spawnSourcebound(args, env);
      const out: string[] = [];
      cli.child.stdout!.on('data', (chunk: Buffer) => out.push(chunk.toString()));
      return { cli, out };
    };
    const project = collect(['project', c, '--scope', 'tenant-a', '--budget', '100000']);
    const inspect = collect(['inspect', c, '--scope', 'tenant-a']);
    expect(await project.cli.exited).toBe(0);
    expect(await inspect.cli.exited).toBe(0);
    expect(project.out.join('')).toMatch(new RegExp(`problem: .*sourcebound repair ${c} --scope tenant-a`));
    expect(inspect.out.join('')).toMatch(
      /PROBLEM: the pair index differs from the definition of an eligible pair in 1 row\(s\) \(missing 1\), from pair 12 on/,
    );
    for (const p of [project, inspect]) expect(p.cli.stderr).not.toMatch(/\n\s+at /);

    // The repair command in-process (same code path as the binary, minus a third process start).
    const printed: string[] = [];
    const write = process.stdout.write.bind(process.stdout);
    const savedUrl = process.env.DATABASE_URL;
    process.env.DATABASE_URL = db.url;
    process.stdout.write = ((chunk: string) => {
      printed.push(String(chunk));
      return true;
    }) as typeof process.stdout.write;
    try {
      await repairCommand.run([c, '--scope', 'tenant-a']);
      await expect(repairCommand.run([c, '--scope', 'tenant-b'])).rejects.toMatchObject({
        exitQuietly: true,
        message: expect.stringMatching(/not found in scope/),
      });
    } finally {
      process.stdout.write = write;
      process.env.DATABASE_URL = savedUrl;
    }
    expect(printed.join('')).toMatch(/rebuilt the pair index: 1 row\(s\) were wrong \(missing 1\); it now matches the definition/);
    expect(await drift(db.pool, c)).toEqual([]);
  });
});
