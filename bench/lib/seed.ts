import type pg from 'pg';
import { CONVERSATION_PROMPT_VERSION } from '../../src/gateway/prompts.ts';
import { textAt } from './data.ts';
import { INSTANT_MODEL } from './workers.ts';

/**
 * Large starting states for P7, built set-based instead of pair by pair:
 * conversations, runs and messages inserted with triggers off
 * (session_replication_role = replica), then sourcebound.pairs filled from
 * the same definition the triggers maintain (dense indexes in run order), and
 * optionally every plannable range given a completed record that binds its
 * source (hashed by the database's own range_source()), so nothing is marked.
 * What is measured afterwards (jobs, writes, sweeps) runs with triggers on,
 * through the real code. A state built here is checked with pairs_drift() on
 * a sample, so a fixture that disagreed with the triggers would fail the run.
 */

export type Db = Pick<pg.ClientBase, 'query'>;

/**
 * `count` conversations of `pairsEach` eligible pairs each. Texts: real ones
 * (cycling through the shared data) or, for states where no text is read,
 * short ones of the same shape.
 */
export async function seedConversations(
  db: Db,
  count: number,
  pairsEach: number,
  options: { realTexts: boolean; scope?: string },
): Promise<string[]> {
  const pool = options.realTexts ? 400 : 1;
  const texts = Array.from({ length: pool }, (_, i) => (options.realTexts ? textAt(i) : { user: 'a question', assistant: 'an answer' }));
  await db.query('set session_replication_role = replica');
  try {
    const { rows } = await db.query<{ id: string }>(
      'insert into sourcebound.conversations (scope) select $1 from generate_series(1, $2::int) returning id',
      [options.scope ?? 'bench', count],
    );
    const ids = rows.map((r) => r.id);
    for (let i = 0; i < ids.length; i += 2000) {
      const chunk = ids.slice(i, i + 2000);
      await db.query(
        `with r as (
           insert into sourcebound.runs (conversation_id, status)
           select c.id, 'completed' from unnest($1::uuid[]) with ordinality as c(id, ord) cross join generate_series(1, $2::int) g
           order by c.ord, g
           returning id, conversation_id, seq
         ), numbered as (
           select id, conversation_id, seq, row_number() over (partition by conversation_id order by seq) - 1 as k from r
         ), u as (
           insert into sourcebound.messages (conversation_id, run_id, role, content, status)
           select conversation_id, id, 'user', ($3::text[])[1 + (k % $5::int)], 'completed' from numbered
           returning id, run_id
         ), a as (
           insert into sourcebound.messages (conversation_id, run_id, role, content, status)
           select conversation_id, id, 'assistant', ($4::text[])[1 + (k % $5::int)], 'completed' from numbered
           returning id, run_id
         )
         insert into sourcebound.pairs (run_id, conversation_id, run_seq, pair_index, user_message_id, assistant_message_id)
         select n.id, n.conversation_id, n.seq, n.k, u.id, a.id from numbered n join u on u.run_id = n.id join a on a.run_id = n.id`,
        [chunk, pairsEach, texts.map((t) => t.user), texts.map((t) => t.assistant), pool],
      );
    }
    return ids;
  } finally {
    await db.query('set session_replication_role = origin');
  }
}

/** Gives every plannable range of these conversations a completed record for its current source (the instant model's identity) and clears their marks. */
export async function seedCompleted(db: Db, conversationIds: readonly string[]): Promise<void> {
  for (let i = 0; i < conversationIds.length; i += 2000) {
    const chunk = conversationIds.slice(i, i + 2000);
    await db.query(
      `insert into sourcebound.conversation_summaries
         (conversation_id, scope, from_pair, to_pair, source_message_ids, source_hash, hash_version, model, prompt_version,
          status, summary, attempts_spent, completed_at)
       select p.conversation_id, c.scope, 10 * k, 10 * k + 9, s.source_message_ids, s.source_hash, 1, $2, $3, 'completed', 'seeded summary', 1, now()
       from (select conversation_id, max(pair_index) + 1 as n from sourcebound.pairs where conversation_id = any($1::uuid[]) group by conversation_id) p
       join sourcebound.conversations c on c.id = p.conversation_id
       cross join lateral generate_series(0, sourcebound.plannable_range_count(p.n::int) - 1) k
       cross join lateral sourcebound.range_source(p.conversation_id, 10 * k) s`,
      [chunk, INSTANT_MODEL, CONVERSATION_PROMPT_VERSION],
    );
    await db.query('delete from sourcebound.compaction_marks where conversation_id = any($1::uuid[])', [chunk]);
  }
}

/** Fresh planner statistics (autovacuum may be off) and a drift check on a sample: the fixture must be what the triggers would have built. */
export async function seedSettle(db: Db, sample: readonly string[]): Promise<void> {
  await db.query('analyze');
  for (const id of sample) {
    const { rowCount } = await db.query('select 1 from sourcebound.pairs_drift($1)', [id]);
    if (rowCount !== 0) throw new Error(`seeded conversation ${id} drifts from the pair definition`);
    const { rows } = await db.query<{ n: number }>('select count(*)::int as n from sourcebound.ranges_needing_work($1)', [id]);
    if (
      rows[0]!.n !== 0 &&
      (await db.query('select 1 from sourcebound.compaction_marks where conversation_id = $1', [id])).rowCount === 0
    ) {
      throw new Error(`seeded conversation ${id} needs work but has no mark`);
    }
  }
}
