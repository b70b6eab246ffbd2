import { hostname } from 'node:os';
import { retryRange, type RetryReport } from '../conversation/retry.ts';
import { gatewayFromConfig } from '../gateway/from-config.ts';
import {
  conversationIdArg,
  parseCommandArgs,
  reportingMissingConversation,
  UsageError,
  wholeNumberArg,
  withSession,
  type Command,
} from './common.ts';
import { loadSummarizerModule } from './summarizer-module.ts';

export const retryCommand: Command = {
  name: 'retry',
  summary: 'summarize a range that failed for good again, under another model identity',
  usage: [
    'usage: sourcebound retry <conversationId> --scope <scope> --from-pair <n> [--summarizer <module>] [--json]',
    '',
    'A range fails for good after two spent attempts of its identity (conversation, source, model, prompt version);',
    'no worker comes for it again. This claims it under the model configuration chooses (SOURCEBOUND_SUMMARIZER,',
    'SOURCEBOUND_MODEL) or the one --summarizer loads, and summarizes it here: at most two attempts of that identity,',
    "with the worker's admission, classification and grounding. The identity that failed is never called again:",
    'retrying under it is refused. Exit 0 when the range has a completed summary, 1 otherwise (the message says why).',
  ].join('\n'),
  async run(argv) {
    const { values, positionals } = parseCommandArgs(
      argv,
      {
        scope: { type: 'string' },
        'from-pair': { type: 'string' },
        summarizer: { type: 'string' },
        json: { type: 'boolean' },
      },
      1,
    );
    const conversationId = conversationIdArg(positionals[0]);
    if (!values.scope) throw new UsageError('missing --scope');
    if (values['from-pair'] === undefined) throw new UsageError('missing --from-pair (the first pair of the range: 0, 10, 20...)');
    const fromPair = wholeNumberArg('--from-pair', values['from-pair'], 'pairs');
    if (fromPair % 10 !== 0) throw new UsageError(`--from-pair must be a multiple of 10 (a range's first pair), got ${fromPair}`);
    const scope = values.scope;
    return withSession(
      async ({ config, logger, database }) => {
        const custom = values.summarizer === undefined ? undefined : await loadSummarizerModule(values.summarizer, { config, logger });
        const configured = gatewayFromConfig(config, database.directConnectionString, logger, {}, custom);
        try {
          const report = await reportingMissingConversation(() =>
            retryRange(
              {
                pool: database.pool,
                summarizer: configured.gateway,
                logger,
                workerId: `retry:${hostname()}:${process.pid}`,
                leaseMs: config.leaseMs,
                grounding: config.grounding,
              },
              conversationId,
              scope,
              fromPair,
            ),
          );
          process.stdout.write(values.json ? `${JSON.stringify(report)}\n` : `${renderRetry(report)}\n`);
          return report.result === 'completed' || report.result === 'already_completed' ? 0 : 1;
        } finally {
          await configured.close();
        }
      },
      { poolSize: 2, logLevel: 'warn' },
    );
  },
};

export function renderRetry(r: RetryReport): string {
  const head = `range ${r.range.fromPair}-${r.range.toPair} of ${r.conversationId} under ${r.model}`;
  const before = `failed for good under ${r.failed.map((f) => f.model).join(', ')}`;
  const calls = `${r.calls} model call(s)`;
  switch (r.result) {
    case 'completed':
      return `${head}: completed (record ${r.recordId}; it had ${before}); ${calls}`;
    case 'already_completed':
      return `${head}: already completed under this identity (record ${r.recordId})`;
    case 'failed':
      return `${head}: failed for good under this identity too (record ${r.recordId}; last: ${r.reason ?? 'see inspect'}); ${calls}. Try another model`;
    case 'deferred':
      return `${head}: deferred until ${r.until?.toISOString()} (${r.reason ?? 'the provider asked to wait'}); no attempt spent. Run the command again then`;
    case 'busy':
      return `${head}: held by another claim until ${r.until?.toISOString() ?? 'its lease ends'}; run the command again then`;
    case 'stale':
      return `${head}: the conversation changed while summarizing (attempt spent); the worker summarizes the new source`;
    case 'lease_lost':
      return `${head}: the claim was taken over while summarizing (SOURCEBOUND_LEASE_MS shorter than the call?); run the command again`;
  }
}
