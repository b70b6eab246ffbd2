import { inspectConversation, type Inspection } from '../conversation/inspect.ts';
import { conversationIdArg, parseCommandArgs, reportingMissingConversation, UsageError, withSession, type Command } from './common.ts';

export const inspectCommand: Command = {
  name: 'inspect',
  summary: "show a conversation's pairs, planned ranges and summary records with their attempts",
  usage: 'usage: sourcebound inspect <conversationId> --scope <scope> [--json]',
  async run(argv) {
    const { values, positionals } = parseCommandArgs(argv, { scope: { type: 'string' }, json: { type: 'boolean' } }, 1);
    const conversationId = conversationIdArg(positionals[0]);
    if (!values.scope) throw new UsageError('missing --scope');
    const scope = values.scope;
    await withSession(
      async ({ database }) => {
        const inspection = await reportingMissingConversation(() => inspectConversation(database.pool, conversationId, scope));
        process.stdout.write(values.json ? `${JSON.stringify(inspection, null, 2)}\n` : renderInspection(inspection));
      },
      { poolSize: 2, logLevel: 'warn' },
    );
  },
};

/** `grounding: 3 facts checked, 1 not in the sources: number:0.9%` (or `all in the sources`), then the facts checked. */
function groundingLine(g: { checked: string[]; ungrounded: string[] }): string {
  if (g.checked.length === 0) return 'grounding: no checkable facts';
  const verdict =
    g.ungrounded.length === 0 ? 'all in the sources' : `${g.ungrounded.length} NOT in the sources: ${g.ungrounded.join(', ')}`;
  return `grounding: ${g.checked.length} fact(s) checked, ${verdict}; checked: ${g.checked.join(', ')}`;
}

export function renderInspection(i: Inspection): string {
  const lines = [
    `conversation ${i.conversationId} (scope ${i.scope})`,
    `eligible pairs: ${i.pairCount}; planned ranges: ${i.plannedRanges.map((r) => `${r.fromPair}-${r.toPair}`).join(', ') || 'none (fewer than 30 pairs)'}`,
  ];
  for (const problem of i.problems) lines.push(`PROBLEM: ${problem.message}`);
  if (i.records.length === 0) lines.push('no summary records');
  for (const r of i.records) {
    lines.push('');
    lines.push(`range ${r.fromPair}-${r.toPair}  ${r.status.toUpperCase()}  record ${r.id}`);
    lines.push(
      `  model ${r.model}, prompt ${r.promptVersion}${r.projectableVersion ? '' : ' (not projectable)'}, attempts spent ${r.attemptsSpent}/2, binding ${r.bindingHolds ? 'holds' : 'BROKEN (source changed)'}`,
    );
    if (r.summaryChars !== null) lines.push(`  summary: ${r.summaryChars} chars`);
    if (r.status === 'running') lines.push(`  lease: ${r.leaseOwner} until ${r.leaseExpiresAt?.toISOString()}`);
    if (r.notBefore) lines.push(`  not before: ${r.notBefore.toISOString()}`);
    if (r.failureReason && r.status !== 'completed') lines.push(`  last failure: ${r.failureReason}`);
    for (const [n, a] of r.attempts.entries()) {
      lines.push(
        `  attempt ${n + 1}: ${a.outcome ?? 'in flight'}${a.spent === null ? '' : a.spent ? ' (spent)' : ' (not spent)'}${a.reason ? ` — ${a.reason}` : ''} [${a.workerId}]`,
      );
      if (a.grounding !== null) lines.push(`    ${groundingLine(a.grounding)}`);
    }
  }
  return `${lines.join('\n')}\n`;
}
