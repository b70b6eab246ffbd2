import type pg from 'pg';
import { textAt } from './data.ts';

/**
 * Writes as an application does, for the benchmarks. Two shapes:
 * - pairTransaction: one completed pair the way a live agent produces it,
 *   five statements in one transaction (the P1 unit of work);
 * - bulkConversations: many conversations and pairs in one set-based
 *   statement per call (fixtures; the triggers still fire row by row).
 */

export type Db = Pick<pg.ClientBase, 'query'>;

/**
 * One completed pair, as a live run writes it: run 'running', user message,
 * assistant message 'streaming', assistant completed with its text, run
 * completed. One transaction; returns when COMMIT has returned.
 * `beforeCommit` runs just before COMMIT is sent (a clock that must not start
 * after anything the commit sets off, such as a NOTIFY); `asynchronousCommit`
 * commits without waiting for the WAL flush (a stimulus whose durability is
 * not what is measured).
 */
export async function pairTransaction(
  db: Db,
  conversationId: string,
  text: { user: string; assistant: string },
  options: { beforeCommit?: () => void; asynchronousCommit?: boolean } = {},
): Promise<void> {
  await db.query('begin');
  try {
    if (options.asynchronousCommit) await db.query('set local synchronous_commit = off');
    const {
      rows: [run],
    } = await db.query<{ id: string }>(`insert into sourcebound.runs (conversation_id, status) values ($1, 'running') returning id`, [
      conversationId,
    ]);
    await db.query(`insert into sourcebound.messages (conversation_id, run_id, role, content) values ($1, $2, 'user', $3)`, [
      conversationId,
      run!.id,
      text.user,
    ]);
    const {
      rows: [assistant],
    } = await db.query<{ id: string }>(
      `insert into sourcebound.messages (conversation_id, run_id, role, content, status) values ($1, $2, 'assistant', '', 'streaming') returning id`,
      [conversationId, run!.id],
    );
    await db.query(`update sourcebound.messages set content = $2, status = 'completed' where id = $1`, [assistant!.id, text.assistant]);
    await db.query(`update sourcebound.runs set status = 'completed' where id = $1`, [run!.id]);
    options.beforeCommit?.();
    await db.query('commit');
  } catch (error) {
    await db.query('rollback').catch(() => {});
    throw error;
  }
}

/** New empty conversations in a scope. */
export async function createConversations(db: Db, count: number, scope = 'bench'): Promise<string[]> {
  const { rows } = await db.query<{ id: string }>(
    'insert into sourcebound.conversations (scope) select $1 from generate_series(1, $2::int) returning id',
    [scope, count],
  );
  return rows.map((r) => r.id);
}

/**
 * `pairsEach` completed pairs appended to each conversation, in one
 * statement: runs, user and assistant messages inserted set-based. Texts come
 * from the real pool, pair k of conversation c getting text
 * `textOffset + c * pairsEach + k`.
 */
export async function bulkPairs(db: Db, conversationIds: readonly string[], pairsEach: number, textOffset = 0): Promise<void> {
  if (conversationIds.length === 0 || pairsEach === 0) return;
  const n = conversationIds.length * pairsEach;
  const texts = Array.from({ length: n }, (_, i) => textAt(textOffset + i));
  await db.query(
    `with conv as (
       select id, ord from unnest($1::uuid[]) with ordinality as c(id, ord)
     ), r as (
       insert into sourcebound.runs (conversation_id, status)
       select conv.id, 'completed' from conv cross join generate_series(1, $2::int) g
       order by conv.ord, g
       returning id, conversation_id, seq
     ), numbered as (
       select r.id, r.conversation_id,
              (conv.ord - 1) * $2 + row_number() over (partition by r.conversation_id order by r.seq) as n
       from r join conv on conv.id = r.conversation_id
     ), u as (
       insert into sourcebound.messages (conversation_id, run_id, role, content, status)
       select conversation_id, id, 'user', ($3::text[])[n], 'completed' from numbered order by n
       returning 1
     ), a as (
       insert into sourcebound.messages (conversation_id, run_id, role, content, status)
       select conversation_id, id, 'assistant', ($4::text[])[n], 'completed' from numbered order by n
       returning 1
     )
     select (select count(*) from u) + (select count(*) from a) as n`,
    [conversationIds, pairsEach, texts.map((t) => t.user), texts.map((t) => t.assistant)],
  );
}
