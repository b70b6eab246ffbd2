import type { Queryable } from '../support/fixtures.ts';
import { sourceHash, sourceMessageIds, type SourcePair } from '../../src/conversation/source-hash.ts';

/** The current pairs fromPair..toPair as the hash sees them (read straight from the view). */
export async function rangeSource(db: Queryable, conversationId: string, fromPair: number, toPair = fromPair + 9): Promise<SourcePair[]> {
  const { rows } = await db.query<SourcePair>(
    `select user_message_id as "userMessageId", user_text as "userText",
            assistant_message_id as "assistantMessageId", assistant_text as "assistantText"
     from sourcebound.eligible_pairs where conversation_id = $1 and pair_index between $2 and $3 order by pair_index`,
    [conversationId, fromPair, toPair],
  );
  return rows;
}

export interface SummaryRecordInput {
  conversationId: string;
  scope?: string;
  fromPair: number;
  toPair?: number;
  /** Defaults to the current ids of the range. */
  sourceMessageIds?: string[];
  /** Defaults to the hash of the current range. */
  sourceHash?: string;
  hashVersion?: number;
  model?: string;
  promptVersion?: string;
  status?: 'completed' | 'failed' | 'running' | 'pending' | 'stale';
  summary?: string | null;
  /** Seconds before now() for completed_at (orders "newest"). */
  ageSeconds?: number;
}

/** Inserts a summary record directly, bound to the current source unless told otherwise. Returns its id. */
export async function insertSummary(db: Queryable, input: SummaryRecordInput): Promise<string> {
  const toPair = input.toPair ?? input.fromPair + 9;
  const source = await rangeSource(db, input.conversationId, input.fromPair, toPair);
  const status = input.status ?? 'completed';
  const { rows } = await db.query<{ id: string }>(
    `insert into sourcebound.conversation_summaries
       (conversation_id, scope, from_pair, to_pair, source_message_ids, source_hash, hash_version, model,
        prompt_version, status, summary, completed_at, lease_owner, lease_expires_at)
     values ($1, $2, $3, $4, $5::uuid[], $6, $7, $8, $9, $10, $11,
             case when $10 = 'completed' then now() - make_interval(secs => $12) end,
             case when $10 = 'running' then 'test' end,
             case when $10 = 'running' then now() + interval '1 hour' end)
     returning id`,
    [
      input.conversationId,
      input.scope ?? 'tenant-a',
      input.fromPair,
      toPair,
      input.sourceMessageIds ?? sourceMessageIds(source),
      input.sourceHash ?? sourceHash(source),
      input.hashVersion ?? 1,
      input.model ?? 'test/model',
      input.promptVersion ?? 'conversation-compaction@4',
      status,
      input.summary === undefined ? (status === 'completed' ? `Summary of pairs ${input.fromPair}-${toPair}.` : null) : input.summary,
      input.ageSeconds ?? 0,
    ],
  );
  return rows[0]!.id;
}

/** Texts of a given UTF-8 size made of one repeated character. */
export function sized(bytes: number, char = 'x'): string {
  const width = Buffer.byteLength(char, 'utf8');
  return char.repeat(Math.max(1, Math.floor(bytes / width)));
}
