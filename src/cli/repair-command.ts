import { describeDrift, repairConversation, type RepairReport } from '../conversation/repair.ts';
import { conversationIdArg, parseCommandArgs, reportingMissingConversation, UsageError, withSession, type Command } from './common.ts';

export const repairCommand: Command = {
  name: 'repair',
  summary: "rebuild a conversation's pair index from the definition (under its lock)",
  usage: [
    'usage: sourcebound repair <conversationId> --scope <scope> [--json]',
    '',
    'Rebuilds sourcebound.pairs for the conversation from the one definition of an eligible pair, in one',
    "transaction under the conversation's pair lock. An exact index is left untouched. Summaries whose",
    'source changed no longer bind and their ranges are enqueued again. `sourcebound inspect` says when it is needed.',
  ].join('\n'),
  async run(argv) {
    const { values, positionals } = parseCommandArgs(argv, { scope: { type: 'string' }, json: { type: 'boolean' } }, 1);
    const conversationId = conversationIdArg(positionals[0]);
    if (!values.scope) throw new UsageError('missing --scope');
    const scope = values.scope;
    await withSession(
      async ({ database }) => {
        const report = await reportingMissingConversation(() => repairConversation(database.pool, conversationId, scope));
        process.stdout.write(values.json ? `${JSON.stringify(report)}\n` : `${renderRepair(report)}\n`);
      },
      { poolSize: 1, logLevel: 'warn' },
    );
  },
};

export function renderRepair(r: RepairReport): string {
  const head = `conversation ${r.conversationId} (scope ${r.scope}): `;
  if (r.before.length === 0) return `${head}the pair index matches the definition; nothing written`;
  const after =
    r.after.length === 0 ? 'it now matches the definition' : `it STILL differs in ${r.after.length} row(s): ${describeDrift(r.after)}`;
  return `${head}rebuilt the pair index: ${r.before.length} row(s) were wrong (${describeDrift(r.before)}); ${after}`;
}
