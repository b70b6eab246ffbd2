import pg from 'pg';
import { beforeAll, describe, expect, it } from 'vitest';
import { SourceboundError } from '../../src/support/errors.ts';
import { turnErrorFrom } from '../../src/turns/turn-errors.ts';
import {
  appendReply,
  beginTurn,
  completeTurn,
  failTurn,
  finishReply,
  startReply,
  TurnInputError,
  TurnNotFoundError,
  TurnStateError,
} from '../../src/turns/index.ts';
import { createTestDatabase } from '../support/db.ts';
import { createConversation } from '../support/fixtures.ts';

/**
 * What an application gets wrong when it writes a turn, and what it is told:
 * the option, what the option takes, and what it gave, before anything is
 * written. With raw SQL the same mistakes named a constraint
 * (`runs_status_known`), said "not found" for a malformed id, or were
 * written and silently never counted as a pair.
 */
const db = await createTestDatabase();
const { pool } = db;
const scope = 'tenant-a';
let runId: string;
let conversationId: string;
beforeAll(async () => {
  ({ runId, conversationId } = await beginTurn({ pool, scope, userText: 'a question' }));
});

async function written(): Promise<{ runs: number; messages: number; conversations: number }> {
  const {
    rows: [counts],
  } = await pool.query(
    `select (select count(*)::int from sourcebound.runs) as runs, (select count(*)::int from sourcebound.messages) as messages,
            (select count(*)::int from sourcebound.conversations) as conversations`,
  );
  return counts;
}

type Call = () => Promise<unknown>;
// Options as a JavaScript caller (or a cast) can pass them: the checks run whatever the types say.
const loose = (options: Record<string, unknown>) => options as never;

const mistakes: { mistake: string; call: Call; field: string; says: string }[] = [
  {
    mistake: 'a status that is not one (done)',
    field: 'status',
    says: "status must be one of completed, partial, clarify_pending; got 'done'",
    call: () => completeTurn(loose({ pool, scope, runId, assistantText: 'a', status: 'done' })),
  },
  {
    mistake: 'a status in the wrong case',
    field: 'status',
    says: "status must be one of completed, partial, clarify_pending; got 'COMPLETED'",
    call: () => completeTurn(loose({ pool, scope, runId, assistantText: 'a', status: 'COMPLETED' })),
  },
  {
    mistake: 'completing with a failure status',
    field: 'status',
    says: "status must be one of completed, partial, clarify_pending; got 'failed'",
    call: () => completeTurn(loose({ pool, scope, runId, assistantText: 'a', status: 'failed' })),
  },
  {
    mistake: 'finishing a reply with a failure status',
    field: 'status',
    says: "status must be one of completed, partial, clarify_pending; got 'cancelled'",
    call: () => finishReply(loose({ pool, scope, runId, status: 'cancelled' })),
  },
  {
    mistake: 'failing with a completion status',
    field: 'status',
    says: "status must be one of failed, cancelled; got 'completed'",
    call: () => failTurn(loose({ pool, scope, runId, status: 'completed' })),
  },
  {
    mistake: 'failing without a status',
    field: 'status',
    says: 'status must be one of failed, cancelled; got undefined',
    call: () => failTurn(loose({ pool, scope, runId })),
  },
  {
    mistake: 'a failure reason (not stored: no column holds it)',
    field: 'option name',
    says: "option name must be one of pool, scope, runId, status; got 'reason'",
    call: () => failTurn(loose({ pool, scope, runId, status: 'failed', reason: 'timeout' })),
  },
  {
    mistake: 'the user text under another name',
    field: 'option name',
    says: "option name must be one of pool, scope, conversationId, userText; got 'text'",
    call: () => beginTurn(loose({ pool, scope, text: 'hi' })),
  },
  {
    mistake: 'a role option (the helper knows the role)',
    field: 'option name',
    says: "option name must be one of pool, scope, runId, assistantText, status; got 'role'",
    call: () => completeTurn(loose({ pool, scope, runId, assistantText: 'a', role: 'assistant' })),
  },
  {
    mistake: 'an empty user text',
    field: 'userText',
    says: "userText must be a string with non-whitespace text (a blank message never forms a pair); got ''",
    call: () => beginTurn({ pool, scope, userText: '' }),
  },
  {
    mistake: 'a user text of only whitespace (no-break spaces too)',
    field: 'userText',
    says: "userText must be a string with non-whitespace text (a blank message never forms a pair); got ' \\n\u00a0'",
    call: () => beginTurn({ pool, scope, userText: ' \n\u00a0' }),
  },
  {
    mistake: 'a missing assistant text',
    field: 'assistantText',
    says: 'assistantText must be a string with non-whitespace text (a blank message never forms a pair); got undefined',
    call: () => completeTurn(loose({ pool, scope, runId })),
  },
  {
    mistake: 'an assistant text that is not a string',
    field: 'assistantText',
    says: 'assistantText must be a string with non-whitespace text (a blank message never forms a pair); got {"text":"a"}',
    call: () => completeTurn(loose({ pool, scope, runId, assistantText: { text: 'a' } })),
  },
  {
    mistake: 'a streamed chunk that is not a string',
    field: 'text',
    says: 'text must be a string; got 42',
    call: () => appendReply(loose({ pool, scope, runId, text: 42 })),
  },
  {
    mistake: 'an empty scope',
    field: 'scope',
    says: "scope must be a non-empty string; got ''",
    call: () => beginTurn({ pool, scope: '', userText: 'q' }),
  },
  {
    mistake: 'a scope that is not a string',
    field: 'scope',
    says: 'scope must be a non-empty string; got 42',
    call: () => beginTurn(loose({ pool, scope: 42, userText: 'q' })),
  },
  {
    mistake: 'a conversation id that is not a UUID',
    field: 'conversationId',
    says: "conversationId must be a UUID; got 'conv-1'",
    call: () => beginTurn({ pool, scope, conversationId: 'conv-1', userText: 'q' }),
  },
  {
    mistake: 'a run id that is not a UUID',
    field: 'runId',
    says: "runId must be a UUID; got 'run-1'",
    call: () => completeTurn({ pool, scope, runId: 'run-1', assistantText: 'a' }),
  },
  {
    mistake: "a numeric run id (a serial from the app's own table)",
    field: 'runId',
    says: 'runId must be a UUID; got 17',
    call: () => startReply(loose({ pool, scope, runId: 17 })),
  },
  {
    mistake: 'a connection string instead of a pool',
    field: 'pool',
    says: "pool must be a pg Pool or a connected pg client; got 'postgres://localhost/app'",
    call: () => beginTurn(loose({ pool: 'postgres://localhost/app', scope, userText: 'q' })),
  },
  {
    mistake: 'no pool',
    field: 'pool',
    says: 'pool must be a pg Pool or a connected pg client; got undefined',
    call: () => failTurn(loose({ scope, runId, status: 'failed' })),
  },
  {
    mistake: 'positional arguments instead of one options object',
    field: 'options',
    says: "options must be an object with pool, scope, conversationId, userText; got 'tenant-a'",
    call: () => (beginTurn as unknown as (...a: unknown[]) => Promise<unknown>)(scope, 'q'),
  },
];

describe('user mistakes are refused before anything is written, naming the option and what it takes', () => {
  it('the table has at least 15 mistakes', () => {
    expect(mistakes.length).toBeGreaterThanOrEqual(15);
  });

  it.each(mistakes)('$mistake', async ({ call, field, says }) => {
    const before = await written();
    const error = await call().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(TurnInputError);
    expect(error).toBeInstanceOf(SourceboundError);
    expect((error as TurnInputError).field).toBe(field);
    expect((error as Error).message).toContain(`${field} must be`);
    expect((error as Error).message).toMatch(new RegExp(`^(beginTurn|completeTurn|startReply|appendReply|finishReply|failTurn): `));
    expect((error as Error).message.slice((error as Error).message.indexOf(': ') + 2)).toBe(says);
    expect(await written()).toEqual(before);
  });

  it('lists the allowed values on the error too', async () => {
    const error = await completeTurn(loose({ pool, scope, runId, assistantText: 'a', status: 'done' })).catch((e: unknown) => e);
    expect(error).toMatchObject({ field: 'status', allowed: ['completed', 'partial', 'clarify_pending'] });
  });
});

describe('what the database refuses is named by SQLSTATE and constraint, with the allowed values', () => {
  /** The error PostgreSQL raises for a raw statement, as the helpers would meet it. */
  const refusal = (sql: string, values: unknown[]) =>
    pool.query(sql, values).then(
      () => {
        throw new Error('not refused');
      },
      (e: unknown) => e,
    );

  it('a run status, a message role or status, an empty scope', async () => {
    const cases = [
      {
        sql: `insert into sourcebound.runs (conversation_id, status) values ($1, 'done')`,
        values: [conversationId],
        write: { runStatus: 'done' },
        says: "status must be one of queued, running, completed, partial, clarify_pending, failed, cancelled; got 'done'",
      },
      {
        sql: `insert into sourcebound.messages (conversation_id, run_id, role, content) values ($1, $2, 'system', 'x')`,
        values: [conversationId, runId],
        write: { role: 'system' },
        says: "role must be one of user, assistant; got 'system'",
      },
      {
        sql: `insert into sourcebound.messages (conversation_id, run_id, role, content, status) values ($1, null, 'user', 'x', 'done')`,
        values: [conversationId],
        write: { messageStatus: 'done' },
        says: "message status must be one of streaming, completed, failed; got 'done'",
      },
      {
        sql: `insert into sourcebound.conversations (scope) values ($1)`,
        values: [''],
        write: {},
        says: "scope must be a non-empty string; got ''",
      },
    ];
    for (const c of cases) {
      const raw = await refusal(c.sql, c.values);
      const mapped = turnErrorFrom(raw, {
        operation: 'op',
        scope: c.sql.includes('conversations (scope)') ? '' : scope,
        ...c.write,
      } as never);
      expect(mapped, c.sql).toBeInstanceOf(TurnInputError);
      expect((mapped as Error).message).toBe(`op: ${c.says}`);
      expect((mapped as Error & { cause: unknown }).cause).toBe(raw);
    }
  });

  it('a second reply names the run, not messages_run_role_key', async () => {
    const t = await beginTurn({ pool, scope, userText: 'q' });
    await completeTurn({ pool, scope, runId: t.runId, assistantText: 'a' });
    const raw = await refusal(
      `insert into sourcebound.messages (conversation_id, run_id, role, content) values ($1, $2, 'assistant', 'again')`,
      [t.conversationId, t.runId],
    );
    const mapped = turnErrorFrom(raw, { operation: 'completeTurn', scope, runId: t.runId, role: 'assistant' });
    expect(mapped).toBeInstanceOf(TurnStateError);
    expect((mapped as Error).message).toBe(
      `completeTurn: run ${t.runId} already has an assistant reply (another writer added it meanwhile)`,
    );
  });

  it('a conversation deleted while beginTurn writes into it: not found (the foreign key), not a constraint name', async () => {
    const c = await createConversation(pool, scope);
    const deleter = new pg.Client({ connectionString: db.url });
    await deleter.connect();
    try {
      await deleter.query('begin');
      await deleter.query('delete from sourcebound.conversations where id = $1', [c]);
      // beginTurn still sees the conversation (the delete is not committed) and waits on its row to insert the run.
      const pending = beginTurn({ pool, scope, conversationId: c, userText: 'q' }).then(
        () => undefined,
        (e: unknown) => e,
      );
      for (;;) {
        const { rows } = await pool.query(
          `select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and query like 'insert into sourcebound.runs%'`,
        );
        if (rows[0].n === 1) break;
        await new Promise<void>((resolve) => setImmediate(resolve));
      }
      await deleter.query('commit');
      const error = await pending;
      expect(error).toBeInstanceOf(TurnNotFoundError);
      expect((error as Error).message).toBe(`beginTurn: conversation ${c} not found in scope 'tenant-a'`);
      expect((error as Error & { cause: { constraint: string } }).cause.constraint).toBe('runs_conversation_id_conversations_id_fk');
    } finally {
      await deleter.end();
    }
  });

  it("a message over the database's size limit names the option and the limit, for user text and replies", async () => {
    const big = 'x'.repeat(1024 * 1024 + 1);
    const before = await written();
    const begun = await beginTurn({ pool, scope, userText: big }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(begun).toBeInstanceOf(TurnInputError);
    expect((begun as TurnInputError).field).toBe('userText');
    expect((begun as Error).message).toBe(
      'beginTurn: userText must be at most sourcebound.max_message_bytes bytes of UTF-8, a limit the database sets ' +
        "(docs/trust-boundaries.md#limits); got 'a text of 1048577 bytes'",
    );
    expect(await written()).toEqual(before);
    const t = await beginTurn({ pool, scope, userText: 'q' });
    const completed = await completeTurn({ pool, scope, runId: t.runId, assistantText: big }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect((completed as TurnInputError).field).toBe('assistantText');
  });

  it('anything else passes through unchanged', () => {
    const other = Object.assign(new Error('deadlock detected'), { code: '40P01' });
    expect(turnErrorFrom(other, { operation: 'op', scope })).toBe(other);
    const plain = new Error('socket hang up');
    expect(turnErrorFrom(plain, { operation: 'op', scope })).toBe(plain);
  });
});

describe('a run left open is visible, not silent', () => {
  it('completing a run begun outside beginTurn with no user message is refused: it would never be a pair', async () => {
    const {
      rows: [run],
    } = await pool.query(`insert into sourcebound.runs (conversation_id, status) values ($1, 'queued') returning id`, [conversationId]);
    await expect(completeTurn({ pool, scope, runId: run.id, assistantText: 'a' })).rejects.toThrow(
      `completeTurn: run ${run.id} has no user message, so it would never form a pair; begin turns with beginTurn`,
    );
  });
});
