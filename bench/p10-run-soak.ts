import type { BenchContext } from './lib/context.ts';
import type { BenchResult } from './lib/report.ts';
import { spread } from './lib/stats.ts';
import { benchPool } from './lib/server.ts';
import { runSoak } from '../test/run/support/soak.ts';

/**
 * P10 run-compaction soak: the README's agent loop (examples/run-agent-loop.ts)
 * for 1,000 tool calls (quick) or 10,000 (--full), through the real SDK
 * against the local Messages server and an unreliable summarizer behind the
 * real gateway, at the default policy (256 KiB threshold). Reports the
 * largest request as measured and as received, and the bytes each compacted
 * tool call still costs in the request (its share of the checkpoint items).
 * Its headline is absolute: the largest request over the 256 KiB threshold
 * (goal <= 1). The same soak is test/run/soak.test.ts.
 */
export async function benchRunSoak(ctx: BenchContext): Promise<BenchResult> {
  const toolCalls = ctx.full ? 10_000 : 1_000;
  const url = await ctx.server.freshDatabase('p10_soak');
  const pool = benchPool(url, 6);
  try {
    const f = await runSoak({ pool, url, toolCalls, log: (m) => ctx.log(`P10: ${m}`) });
    const threshold = 256 * 1024;
    return {
      id: 'P10',
      title: 'run-compaction soak (README agent loop)',
      status: f.failures.length === 0 ? 'ok' : 'error',
      ...(f.failures.length === 0 ? {} : { reason: f.failures.slice(0, 3).join('; ') }),
      seconds: 0,
      params: {
        toolCalls,
        steps: f.steps,
        policy: 'default (256 KiB threshold, 224 KiB target)',
        results: '0 B to 300 KB, Latin/CJK/emoji/binary-ish',
        summarizer: 'ok 70%, slow 8%, bad 10%, down 12%',
      },
      figures: [
        { label: 'largest request, measured (body + 16 KiB reserve)', unit: 'bytes', value: spread([f.largestRequestBytes]) },
        { label: 'largest request body as received by the server', unit: 'bytes', value: spread([f.largestSentBytes]) },
        {
          label: 'bytes per compacted tool call (checkpoint items of the last request / tool calls they cover)',
          unit: 'bytes',
          value: spread([f.bytesPerCompactedToolCall]),
        },
        { label: 'compacted tool calls in the last request', unit: 'calls', value: spread([f.compactedToolCalls]) },
        { label: 'checkpoints', unit: 'count', value: spread([f.checkpoints]) },
        { label: 'requests that could not fit', unit: 'count', value: spread([f.cannotFit]) },
        { label: 'soak wall time', unit: 's', value: spread([f.seconds]) },
      ],
      headlines: [
        {
          label: 'P10 largest request / 256 KiB threshold',
          ratio: spread([f.largestRequestBytes / threshold]),
          goal: { op: '<=', target: 1 },
        },
      ],
      notes: [
        `${f.toolCalls} tool calls in ${f.steps} model requests; summarizer outcomes ${JSON.stringify(f.summaryOutcomes)}; results by script ${JSON.stringify(f.resultsByScript)}, largest ${f.largestResultBytes} B; ` +
          `${f.corrections} corrections; cold-process recovery rebuilt the next request byte for byte: ${f.recoveredSame}.`,
      ],
    };
  } finally {
    await pool.end();
  }
}
