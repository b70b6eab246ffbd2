import { SourceboundError } from '../support/errors.ts';
import { databaseCondition } from '../db/database-errors.ts';
import { compactionEnqueue } from '../db/queries/queue.ts';
import { conversationIdArg, parseCommandArgs, UsageError, withSession, type Command } from './common.ts';

export const enqueueCommand: Command = {
  name: 'enqueue',
  summary: 'enqueue a compaction job for a conversation by hand',
  usage:
    "usage: sourcebound enqueue <conversationId> --scope <scope>\n\nSame as: select sourcebound.enqueue_compaction('<scope>', '<conversationId>');",
  async run(argv) {
    const { values, positionals } = parseCommandArgs(argv, { scope: { type: 'string' } }, 1);
    const conversationId = conversationIdArg(positionals[0]);
    if (!values.scope) throw new UsageError('missing --scope');
    const scope = values.scope;
    await withSession(
      async ({ database }) => {
        try {
          await compactionEnqueue(database.pool, scope, conversationId);
        } catch (error) {
          if (databaseCondition(error)?.kind === 'not_found') {
            throw Object.assign(new SourceboundError(`conversation ${conversationId} not found in scope ${JSON.stringify(scope)}`), {
              exitQuietly: true,
            });
          }
          throw error;
        }
        process.stdout.write(`enqueued compact_conversation for ${conversationId}\n`);
      },
      { poolSize: 1 },
    );
  },
};
