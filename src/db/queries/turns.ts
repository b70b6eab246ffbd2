/**
 * SQL of the turn helpers (src/turns), named noun-first: conversations, runs
 * and messages as an application writes them. Every statement takes the
 * client it runs on; the helper decides the transaction.
 */
import type pg from 'pg';
import type { Queryable } from '../queryable.ts';
import type { MESSAGE_ROLES, MESSAGE_STATUSES, RUN_STATUSES } from '../schema/conversations.ts';

/** Every status a run can have (the `runs_status_known` constraint). */
export type RunStatus = (typeof RUN_STATUSES)[number];
/** Every status a message can have (the `messages_status_known` constraint). */
export type MessageStatus = (typeof MESSAGE_STATUSES)[number];
/** Every role a message can have (the `messages_role_known` constraint). */
export type MessageRole = (typeof MESSAGE_ROLES)[number];

export interface TurnRunRow {
  conversationId: string;
  status: RunStatus;
}

export interface TurnMessageRow {
  id: string;
  role: MessageRole;
  status: MessageStatus;
  content: string;
}

/** Creates a conversation in `scope`; returns its id. */
export async function conversationInsert(db: Queryable, scope: string): Promise<string> {
  const { rows } = await db.query<{ id: string }>('insert into sourcebound.conversations (scope) values ($1) returning id', [scope]);
  return rows[0]!.id;
}

/** Creates a conversation with a given id in `scope` unless one with that id exists; returns whether it created it. */
export async function conversationInsertIfAbsent(db: Queryable, conversationId: string, scope: string): Promise<boolean> {
  const { rowCount } = await db.query('insert into sourcebound.conversations (id, scope) values ($1, $2) on conflict (id) do nothing', [
    conversationId,
    scope,
  ]);
  return rowCount === 1;
}

/** Whether a conversation with this id is in `scope` (false for one of another scope). */
export async function conversationInScopeExists(db: Queryable, conversationId: string, scope: string): Promise<boolean> {
  const { rowCount } = await db.query('select 1 from sourcebound.conversations where id = $1 and scope = $2', [conversationId, scope]);
  return rowCount === 1;
}

/** Creates a run in a conversation; returns its id. Its `seq` (pair order) is taken now. */
export async function runInsert(db: Queryable, conversationId: string, status: RunStatus): Promise<string> {
  const { rows } = await db.query<{ id: string }>('insert into sourcebound.runs (conversation_id, status) values ($1, $2) returning id', [
    conversationId,
    status,
  ]);
  return rows[0]!.id;
}

/**
 * The run, when it is in a conversation of `scope`, locked FOR UPDATE until
 * the transaction ends: the helpers that settle a run or add its reply take
 * this lock first, so two of them on one run take turns.
 */
export async function runInScopeGetForUpdate(db: Queryable, runId: string, scope: string): Promise<TurnRunRow | null> {
  const { rows } = await db.query<TurnRunRow>(
    `select r.conversation_id as "conversationId", r.status
     from sourcebound.runs r join sourcebound.conversations c on c.id = r.conversation_id
     where r.id = $1 and c.scope = $2
     for update of r`,
    [runId, scope],
  );
  return rows[0] ?? null;
}

/** The run's status, when it is in a conversation of `scope` (no lock). */
export async function runInScopeStatusGet(db: Queryable, runId: string, scope: string): Promise<RunStatus | null> {
  const { rows } = await db.query<{ status: RunStatus }>(
    `select r.status from sourcebound.runs r join sourcebound.conversations c on c.id = r.conversation_id
     where r.id = $1 and c.scope = $2`,
    [runId, scope],
  );
  return rows[0]?.status ?? null;
}

export async function runStatusUpdate(db: Queryable, runId: string, status: RunStatus): Promise<void> {
  await db.query('update sourcebound.runs set status = $2 where id = $1', [runId, status]);
}

/** Inserts a message of a run; returns its id. */
export async function messageInsert(
  db: Queryable,
  message: { conversationId: string; runId: string; role: MessageRole; content: string; status: MessageStatus },
): Promise<string> {
  const { rows } = await db.query<{ id: string }>(
    `insert into sourcebound.messages (conversation_id, run_id, role, content, status) values ($1, $2, $3, $4, $5) returning id`,
    [message.conversationId, message.runId, message.role, message.content, message.status],
  );
  return rows[0]!.id;
}

/** The run's user message and reply, the reply locked FOR UPDATE (an append waits for a finish, and the reverse). */
export async function messagesOfRunListForUpdate(
  db: Queryable,
  runId: string,
): Promise<{ user: TurnMessageRow | null; reply: TurnMessageRow | null }> {
  const { rows } = await db.query<TurnMessageRow>(
    `select id, role, status, content from sourcebound.messages where run_id = $1 order by role desc for update`,
    [runId],
  );
  return { user: rows.find((m) => m.role === 'user') ?? null, reply: rows.find((m) => m.role === 'assistant') ?? null };
}

export async function messageStatusUpdate(db: Queryable, messageId: string, status: MessageStatus): Promise<void> {
  await db.query('update sourcebound.messages set status = $2 where id = $1', [messageId, status]);
}

/**
 * Appends `text` to the streaming reply of a run of `scope`; returns the
 * reply's id, or null when the run has no streaming reply there. One
 * statement: it locks the reply's row, so it takes turns with a finish.
 */
export async function replyAppend(db: Queryable, runId: string, scope: string, text: string): Promise<string | null> {
  const { rows } = await db.query<{ id: string }>(
    `update sourcebound.messages m set content = m.content || $3
     from sourcebound.conversations c
     where m.run_id = $1 and m.role = 'assistant' and m.status = 'streaming'
       and c.id = m.conversation_id and c.scope = $2
     returning m.id`,
    [runId, scope, text],
  );
  return rows[0]?.id ?? null;
}
