import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/support/config.ts';
import { openDatabase } from '../../src/db/database.ts';
import { silentLogger } from '../../src/support/logger.ts';
import { projectConversationHistory } from '../../src/projection/index.ts';
import { beginTurn, completeTurn } from '../../src/turns/index.ts';
import { startWorker } from '../../src/worker/supervisor.ts';
import { createTestDatabase } from '../support/db.ts';
import { createRuntimeRoles } from '../support/roles.ts';
import { spawnSourcebound, until } from '../support/processes.ts';

/**
 * The trust boundaries hold in PostgreSQL itself, probed as the runtime roles
 * a deployment uses (login roles that are members of sourcebound_app,
 * sourcebound_worker and sourcebound_reader), never as the owner.
 */
const db = await createTestDatabase();
const roles = await createRuntimeRoles(db, 'probe', { beforeDrop: () => db.pool.query(`select sourcebound.row_security(false)`) });
const { names, urlAs, poolAs } = roles;
const PASSWORD = roles.password;

let app: pg.Pool;
let reader: pg.Pool;
const tenantA = { scope: 'tenant-a', id: '' };
const tenantB = { scope: 'tenant-b', id: '' };

beforeAll(async () => {
  app = poolAs(names.app);
  reader = poolAs(names.reader);
  for (const tenant of [tenantA, tenantB]) {
    const turn = await beginTurn({ pool: app, scope: tenant.scope, userText: `hello from ${tenant.scope}` });
    await completeTurn({ pool: app, scope: tenant.scope, runId: turn.runId, assistantText: `reply to ${tenant.scope}` });
    tenant.id = turn.conversationId;
  }
});

async function refusal(
  pool: pg.Pool,
  sql: string,
  params: unknown[] = [],
  setup?: string,
): Promise<{ code: string; message: string; constraint?: string }> {
  const client = await pool.connect();
  try {
    await client.query('begin');
    if (setup) await client.query(setup);
    await client.query(sql, params);
    await client.query('rollback');
  } catch (error) {
    await client.query('rollback').catch(() => {});
    const e = error as { code: string; message: string; constraint?: string };
    return { code: e.code, message: e.message, constraint: e.constraint };
  } finally {
    client.release();
  }
  throw new Error(`not refused: ${sql}`);
}

describe('tenants: what the app role cannot do, whatever SQL it sends', () => {
  it("cannot change a conversation's scope or id", async () => {
    const r = await refusal(app, 'update sourcebound.conversations set scope = $1 where id = $2', [tenantB.scope, tenantA.id]);
    expect(r.constraint).toBe('conversation_scope_fixed');
  });

  it("cannot move a run or a message to another tenant's conversation", async () => {
    const run = await app.query(`insert into sourcebound.runs (conversation_id, status) values ($1, 'completed') returning id`, [
      tenantA.id,
    ]);
    const runId = run.rows[0].id as string;
    const moved = await refusal(app, 'update sourcebound.runs set conversation_id = $1 where id = $2', [tenantB.id, runId]);
    expect(moved.constraint).toBe('conversation_scope_fixed');
    const msg = await refusal(app, 'update sourcebound.messages set conversation_id = $1, run_id = null where conversation_id = $2', [
      tenantB.id,
      tenantA.id,
    ]);
    expect(msg.constraint).toBe('conversation_scope_fixed');
  });

  it("enqueue names the scope, and another tenant's id reads exactly like one that does not exist", async () => {
    const other = await refusal(app, 'select sourcebound.enqueue_compaction($1, $2)', [tenantA.scope, tenantB.id]);
    const none = await refusal(app, 'select sourcebound.enqueue_compaction($1, $2)', [
      tenantA.scope,
      '00000000-0000-4000-8000-000000000000',
    ]);
    expect(other.code).toBe('P0002');
    expect(other.message.replace(tenantB.id, 'ID')).toBe(none.message.replace('00000000-0000-4000-8000-000000000000', 'ID'));
    const unscoped = await refusal(app, 'select sourcebound.enqueue_compaction($1)', [tenantA.id]);
    expect(unscoped.code).toBe('42501');
    await app.query('select sourcebound.enqueue_compaction($1, $2)', [tenantA.scope, tenantA.id]);
  });

  it('with row security on, a transaction sees and writes only its own scope', async () => {
    await db.pool.query('select sourcebound.row_security(true)');
    try {
      const asA = `select set_config('sourcebound.scope', '${tenantA.scope}', true)`;
      const c = await app.connect();
      try {
        await c.query('begin');
        await c.query(asA);
        const seen = await c.query('select conversation_id from sourcebound.messages');
        expect(new Set(seen.rows.map((r) => r.conversation_id))).toEqual(new Set([tenantA.id]));
        const convs = await c.query('select id from sourcebound.conversations');
        expect(convs.rows.map((r) => r.id)).toEqual([tenantA.id]);
        await c.query('commit');
      } finally {
        c.release();
      }
      const run = await refusal(app, `insert into sourcebound.runs (conversation_id, status) values ($1, 'running')`, [tenantB.id], asA);
      expect(run.code).toBe('42501'); // new row violates row-level security policy
      const msg = await refusal(
        app,
        `insert into sourcebound.messages (conversation_id, role, content) values ($1, 'user', 'x')`,
        [tenantB.id],
        asA,
      );
      expect(msg.code).toBe('42501');
      const conv = await refusal(app, `insert into sourcebound.conversations (scope) values ($1)`, [tenantB.scope], asA);
      expect(conv.code).toBe('42501');
      // No scope named: nothing is seen, nothing is written.
      const none = await app.query('select count(*)::int as n from sourcebound.messages');
      expect(none.rows[0].n).toBe(0);
      // Every table under row security reads as the app (its policy's subquery reads other
      // tables under their own policies): tenant A's rows only, none with no scope named.
      const { rows: tables } = await db.pool.query<{ t: string }>('select sourcebound.row_security_tables() as t');
      const seenBy = async (setup: string | null) => {
        const c = await app.connect();
        try {
          await c.query('begin');
          if (setup) await c.query(setup);
          const counts: Record<string, number> = {};
          for (const { t } of tables) counts[t] = (await c.query(`select count(*)::int as n from sourcebound.${t}`)).rows[0].n;
          await c.query('rollback');
          return counts;
        } finally {
          c.release();
        }
      };
      const ofA = await db.pool.query<{ n: number }>('select count(*)::int as n from sourcebound.messages where conversation_id = $1', [
        tenantA.id,
      ]);
      expect((await seenBy(asA)).messages).toBe(ofA.rows[0]!.n);
      expect(Object.values(await seenBy(null)).every((n) => n === 0)).toBe(true);
      // The product's own reads name their scope, and still work.
      const projected = await projectConversationHistory({
        pool: app,
        scope: tenantA.scope,
        conversationId: tenantA.id,
        budgetBytes: 64 * 1024,
      });
      expect(projected.items.map((i) => i.kind)).toContain('pair');
      // The reader role sees every tenant.
      const all = await reader.query('select count(distinct conversation_id)::int as n from sourcebound.messages');
      expect(all.rows[0].n).toBeGreaterThanOrEqual(2);
    } finally {
      await db.pool.query('select sourcebound.row_security(false)');
    }
  });
});

describe('authentic summaries: only the commit path completes one', () => {
  it('the app role cannot write summaries, attempts, the pair index or the job queue', async () => {
    for (const sql of [
      `insert into sourcebound.conversation_summaries (conversation_id, scope, from_pair, to_pair, source_message_ids, source_hash, hash_version, model, prompt_version, status) values ('${tenantA.id}', '${tenantA.scope}', 0, 9, '{}', repeat('a', 64), 1, 'm', 'p', 'pending')`,
      `update sourcebound.conversation_summaries set summary = 'forged'`,
      `delete from sourcebound.conversation_summaries`,
      `insert into sourcebound.conversation_summary_attempts (summary_id, worker_id) values (gen_random_uuid(), 'w')`,
      `delete from sourcebound.pairs`,
      `delete from sourcebound.compaction_marks`,
      `select * from graphile_worker._private_jobs`,
      `alter table sourcebound.conversation_summaries disable trigger user`,
      `drop trigger conversation_summaries_guard_update on sourcebound.conversation_summaries`,
      `select sourcebound.row_security(false)`,
      `select sourcebound.claim_range('${tenantA.id}', 0, 'm', 'p', 'w', 1000)`,
    ]) {
      const r = await refusal(app, sql);
      expect(r.code, sql).toBe('42501');
    }
  });
});

describe('a deployment on runtime roles', () => {
  it('the worker compacts as sourcebound_worker, the app writes and projects as sourcebound_app, the reader only reads', async () => {
    const scope = 'tenant-live';
    let conversationId: string | undefined;
    for (let i = 0; i < 40; i++) {
      const turn = await beginTurn({ pool: app, scope, conversationId, userText: `question ${i}: what is item ${i} of the order?` });
      conversationId = turn.conversationId;
      await completeTurn({
        pool: app,
        scope,
        runId: turn.runId,
        assistantText: `Item ${i} is part number PN-${1000 + i}, shipped on 2026-03-${String(1 + (i % 28)).padStart(2, '0')}.`,
      });
    }
    const workerUrl = urlAs(names.worker);
    const config = loadConfig({ DATABASE_URL: workerUrl, SOURCEBOUND_SUMMARIZER: 'offline', SOURCEBOUND_POLL_INTERVAL_MS: '100' });
    const database = await openDatabase(config, silentLogger, 4);
    const handle = await startWorker({ config, logger: silentLogger, database, skipMigrations: true });
    try {
      await app.query('select sourcebound.enqueue_compaction($1, $2)', [scope, conversationId]);
      const completed = async () =>
        (
          await reader.query(
            `select count(*)::int as n from sourcebound.conversation_summaries where conversation_id = $1 and status = 'completed'`,
            [conversationId],
          )
        ).rows[0].n as number;
      await until(async () => (await completed()) >= 2, 30_000, 'two completed summaries');
      expect(await completed()).toBe(2);
    } finally {
      await handle.stop();
      await database.close();
    }
    const projected = await projectConversationHistory({ pool: app, scope, conversationId: conversationId!, budgetBytes: 4096 });
    expect(projected.items.length).toBeGreaterThan(0);
    // The app role reads the summaries the worker committed (the projection weighs them).
    const visible = await app.query(
      `select count(*)::int as n from sourcebound.conversation_summaries where conversation_id = $1 and status = 'completed'`,
      [conversationId],
    );
    expect(visible.rows[0].n).toBe(2);
    const write = await refusal(reader, `insert into sourcebound.conversations (scope) values ('x')`);
    expect(write.code).toBe('42501');
  });
});

describe('the owner migrates; a runtime role cannot', () => {
  it("migrate as the app role stops with PostgreSQL's own message and SQLSTATE, and names the fix", async () => {
    const migrate = spawnSourcebound(['migrate'], { DATABASE_URL: urlAs(names.app) });
    expect(await migrate.exited).toBe(1);
    expect(migrate.stderr).toMatch(
      /^sourcebound migrate: the database refused: permission denied for [^\n]+ \(SQLSTATE 42501\); does this role have the grants it needs\?/,
    );
    expect(migrate.stderr).not.toContain(PASSWORD);
    expect(migrate.stderr.split('\n').filter(Boolean)).toHaveLength(1);
  });
});

describe('limits', () => {
  it('a message over sourcebound.max_message_bytes is refused at write, naming the limit; the owner sets it per database or role', async () => {
    const big = 'x'.repeat(1024 * 1024 + 1);
    const r = await refusal(app, `insert into sourcebound.messages (conversation_id, role, content) values ($1, 'user', $2)`, [
      tenantA.id,
      big,
    ]);
    expect(r).toMatchObject({ code: '54000', constraint: 'message_size_limit' });
    expect(r.message).toBe(
      'sourcebound: a user message of 1048577 bytes is over the limit of 1048576 bytes (sourcebound.max_message_bytes)',
    );
    const grown = await refusal(app, `update sourcebound.messages set content = $2 where conversation_id = $1 and role = 'assistant'`, [
      tenantA.id,
      big,
    ]);
    expect(grown.constraint).toBe('message_size_limit');
    // Under the limit: stored; a lower limit set for the role refuses it.
    await app.query(`insert into sourcebound.messages (conversation_id, role, content) values ($1, 'user', $2)`, [
      tenantA.id,
      'y'.repeat(100_000),
    ]);
    const lowered = await refusal(
      app,
      `insert into sourcebound.messages (conversation_id, role, content) values ($1, 'user', $2)`,
      [tenantA.id, 'y'.repeat(100_000)],
      `set local sourcebound.max_message_bytes = '70000'`,
    );
    expect(lowered.message).toContain('over the limit of 70000 bytes');
  });
});
