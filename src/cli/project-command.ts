import { projectCommand } from './project-output.ts';
import {
  conversationIdArg,
  parseCommandArgs,
  reportingMissingConversation,
  UsageError,
  wholeNumberArg,
  withSession,
  type Command,
} from './common.ts';

export const projectCliCommand: Command = {
  name: 'project',
  summary: 'print the history the next model request would carry within a byte budget',
  usage: 'usage: sourcebound project <conversationId> --scope <scope> --budget <bytes> [--layout stable|newest-first] [--json]',
  async run(argv) {
    const { values, positionals } = parseCommandArgs(
      argv,
      { scope: { type: 'string' }, budget: { type: 'string' }, layout: { type: 'string' }, json: { type: 'boolean' } },
      1,
    );
    const conversationId = conversationIdArg(positionals[0]);
    if (!values.scope) throw new UsageError('missing --scope');
    if (values.budget === undefined) throw new UsageError('missing --budget');
    // Bytes in plain decimal digits: Number('') and Number(' ') are 0, Number('1e3') is 1000; none of those is what was meant.
    const budgetBytes = wholeNumberArg('--budget', values.budget, 'bytes');
    const layout = values.layout ?? 'stable';
    if (layout !== 'stable' && layout !== 'newest-first') throw new UsageError(`--layout must be stable or newest-first, got ${layout}`);
    const scope = values.scope;
    await withSession(
      async ({ database }) => {
        await reportingMissingConversation(() =>
          projectCommand({
            pool: database.pool,
            conversationId,
            scope,
            budgetBytes,
            layout,
            json: values.json === true,
            out: (line) => process.stdout.write(`${line}\n`),
          }),
        );
      },
      { poolSize: 2, logLevel: 'warn' },
    );
  },
};
