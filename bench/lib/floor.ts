import type pg from 'pg';
import { claimNextRange } from '../../src/conversation/claim.ts';
import { CONVERSATION_PROMPT_VERSION } from '../../src/gateway/prompts.ts';
import type { BenchServer } from './server.ts';
import { benchClient } from './server.ts';
import { INSTANT_MODEL } from './workers.ts';
import { bulkPairs, createConversations } from './writes.ts';

/**
 * The floor of P3 and P4: a range's claim made durable before the model is
 * called (an attempt is counted even if the worker dies during the call, so
 * the claim's transaction must be committed, synchronously, first). Timed on
 * one connection of its own database, in the same run as what it is the
 * floor of: BEGIN (outside the clock), the claim statement the worker sends
 * (the next-mark claim, a named prepared statement as on a direct
 * connection), then its COMMIT, each timed as the client sees it. A worker
 * sends the claim in autocommit, so statement and COMMIT are one round trip
 * there: the two timed apart cost one round trip more than the worker pays.
 *
 * The ranges are fresh (conversations of exactly 30 pairs of real text, one
 * plannable range each, their jobs deleted: no worker runs on this database).
 */
export interface ClaimFloor {
  /** One fresh range claimed: the statement's and its COMMIT's milliseconds. */
  sample(): Promise<{ claim: number; commit: number }>;
  close(): Promise<void>;
}

export async function startClaimFloor(server: BenchServer, label: string, samples: number, textOffset = 0): Promise<ClaimFloor> {
  const url = await server.freshDatabase(label);
  const client: pg.Client = await benchClient(url);
  const conversations = await createConversations(client, samples);
  for (let i = 0; i < conversations.length; i += 100) await bulkPairs(client, conversations.slice(i, i + 100), 30, textOffset + i * 30);
  await client.query('delete from graphile_worker._private_jobs');
  await client.query('analyze');
  let next = 0;
  return {
    async sample() {
      const conversationId = conversations[next++];
      if (conversationId === undefined) throw new Error(`${label}: more floor samples taken than the ${samples} ranges seeded`);
      await client.query('begin');
      const t0 = performance.now();
      const claim = await claimNextRange(
        client,
        {
          conversationId,
          after: -1,
          wrap: false,
          skip: new Map(),
          model: INSTANT_MODEL,
          promptVersion: CONVERSATION_PROMPT_VERSION,
          workerId: 'bench-floor',
          leaseMs: 60_000,
        },
        { prepared: true },
      );
      const t1 = performance.now();
      await client.query('commit');
      const t2 = performance.now();
      if (claim.kind !== 'claimed') throw new Error(`${label}: a fresh range was not claimed (${claim.kind})`);
      return { claim: t1 - t0, commit: t2 - t1 };
    },
    close: () => client.end(),
  };
}
