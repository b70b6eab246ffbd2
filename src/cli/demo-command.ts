import { migrateDatabase } from '../db/migrate.ts';
import { DEMO_SCOPE, rangeProgress, readThreads, writeThread } from './demo-threads.ts';
import { pairCountRead, pairsRangeRead } from '../db/queries/summaries.ts';
import { plannableRangeCount } from '../conversation/plan.ts';
import { messagesBytes, projectConversationHistory, toAnthropicMessages } from '../projection/index.ts';
import { startWorker } from '../worker/supervisor.ts';
import { CLI_COMMAND, parseCommandArgs, wholeNumberArg, withSession, type Command } from './common.ts';

const DEFAULT_BUDGET = 64 * 1024;

export const demoCommand: Command = {
  name: 'demo',
  summary: 'write real conversations, compact them with the worker, and show raw vs projected bytes',
  usage: [
    'usage: sourcebound demo [--budget <bytes>] [--timeout <seconds>]',
    '',
    'Uses DATABASE_URL, or starts the embedded PostgreSQL (data in SOURCEBOUND_DATA_DIR).',
    'Without ANTHROPIC_API_KEY it summarizes with the offline extractive summarizer.',
    `--budget   projection budget in bytes (default ${DEFAULT_BUDGET})`,
    '--timeout  give up waiting for the worker after this many whole seconds (default 300)',
  ].join('\n'),
  async run(argv) {
    const { values } = parseCommandArgs(argv, { budget: { type: 'string' }, timeout: { type: 'string' } });
    // The same parser as `project --budget` and the environment's numbers: plain decimal digits only.
    const budgetBytes = values.budget === undefined ? DEFAULT_BUDGET : wholeNumberArg('--budget', values.budget, 'bytes');
    const timeoutS = values.timeout === undefined ? 300 : wholeNumberArg('--timeout', values.timeout, 'seconds', 1);
    const say = (line: string) => process.stdout.write(`${line}\n`);

    return withSession(
      async ({ config, logger, database }) => {
        say(config.databaseUrl ? 'Using DATABASE_URL.' : `Using the embedded PostgreSQL in ${config.dataDir}.`);
        await migrateDatabase(database.directConnectionString, logger);
        const threads = readThreads();
        const conversations: { threadId: string; conversationId: string }[] = [];
        for (const thread of threads) {
          const { conversationId, created } = await writeThread(database.pool, thread);
          conversations.push({ threadId: thread.id, conversationId });
          say(`${created ? 'wrote' : 'found'} ${thread.id}: ${thread.pairs.length} pairs -> conversation ${conversationId}`);
        }

        const worker = await startWorker({ config, logger, database, skipMigrations: true });
        const model =
          config.summarizer === 'openai'
            ? config.openai!.model
            : config.summarizer === 'anthropic'
              ? config.anthropic.model
              : 'offline extractive, no model configured';
        say(`Worker ${worker.workerId} started (summarizer: ${model}).`);
        const ids = conversations.map((c) => c.conversationId);
        const deadline = Date.now() + timeoutS * 1000;
        let last = '';
        let settled = false;
        while (Date.now() < deadline) {
          const p = await rangeProgress(database.pool, ids);
          const line = `ranges settled: ${p.completed + p.failed}/${p.planned} (completed ${p.completed}, failed ${p.failed})`;
          if (line !== last) {
            say(line);
            last = line;
          }
          if (p.completed + p.failed >= p.planned) {
            settled = true;
            break;
          }
          await new Promise((r) => setTimeout(r, 200));
        }
        await worker.stop();
        if (!settled) say(`Gave up waiting after ${timeoutS}s; run \`sourcebound inspect\` to see why.`);

        say('');
        say(`Projection budget: ${budgetBytes} bytes (what the next model request may spend on history).`);
        // Both byte columns are the Anthropic JSON the adapter sends (breakpoint included): like with like.
        const header = ['thread', 'pairs', 'planned', 'completed', 'failed', 'whole history bytes', 'projected bytes', 'items'];
        const rows: string[][] = [];
        for (const c of conversations) {
          const pairCount = await pairCountRead(database.pool, c.conversationId);
          const { rows: records } = await database.pool.query<{ status: string; n: number }>(
            'select status, count(*)::int as n from sourcebound.conversation_summaries where conversation_id = $1 group by status',
            [c.conversationId],
          );
          const count = (s: string) => records.find((r) => r.status === s)?.n ?? 0;
          const all = await pairsRangeRead(database.pool, c.conversationId, 0, pairCount - 1);
          const rawBytes = messagesBytes(
            toAnthropicMessages({
              items: all.map((p, pairIndex) => ({
                kind: 'pair' as const,
                pairIndex,
                runId: '',
                userMessageId: '',
                assistantMessageId: '',
                userText: p.userText,
                assistantText: p.assistantText,
              })),
              omitted: [],
            }),
          );
          const projection = await projectConversationHistory({
            pool: database.pool,
            conversationId: c.conversationId,
            scope: DEMO_SCOPE,
            budgetBytes,
          });
          const projectedBytes = messagesBytes(toAnthropicMessages(projection));
          const summaries = projection.items.filter((i) => i.kind === 'summary').length;
          rows.push([
            c.threadId,
            String(pairCount),
            String(plannableRangeCount(pairCount)),
            String(count('completed')),
            String(count('failed')),
            String(rawBytes),
            String(projectedBytes),
            `${projection.items.length - summaries} pairs + ${summaries} summaries`,
          ]);
        }
        say(table(header, rows));
        say('');
        const example = conversations.find((c) => c.threadId.includes('long')) ?? conversations[0]!;
        say('The data stays in place. Try:');
        say(`  ${CLI_COMMAND} inspect ${example.conversationId} --scope ${DEMO_SCOPE}`);
        say(`  ${CLI_COMMAND} project ${example.conversationId} --scope ${DEMO_SCOPE} --budget 16384`);
        return settled ? 0 : 1;
      },
      { poolSize: (c) => c.workerConcurrency + 6, defaultLogLevel: 'warn' },
    );
  },
};

function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ');
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
}
