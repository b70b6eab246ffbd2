import { SourceboundError } from '../support/errors.ts';
import { databaseCondition } from '../db/database-errors.ts';
import { compactionEnqueue } from '../db/queries/queue.ts';
import { conversationIdArg, parseCommandArgs, withSession, type Command } from './common.ts';

export const enqueueCommand: Command = {
  name: 'enqueue',
  summary: 'enqueue a compaction job for a conversation by hand',
  usage: 'usage: sourcebound enqueue <conversationId>\n\nSame as: select sourcebound.enqueue_compaction(\'<conversationId>\');',
  async run(argv) {
    const { positionals } = parseCommandArgs(argv, {}, 1);
    const conversationId = conversationIdArg(positionals[0]);
    await withSession(async ({ database }) => {
      try {
        await compactionEnqueue(database.pool, conversationId);
      } catch (error) {
        if (databaseCondition(error)?.kind === 'not_found') {
          throw Object.assign(new SourceboundError(`conversation ${conversationId} does not exist`), { exitQuietly: true });
        }
        throw error;
      }
      process.stdout.write(`enqueued compact_conversation for ${conversationId}\n`);
    }, { poolSize: 1 });
  },
};
