/**
 * The agent loop of the README ("Run compaction" > "An agent loop"), complete
 * and runnable: a research Run that calls the model, records every turn and
 * tool call, and lets sourcebound keep each request under its byte budget.
 *
 *   DATABASE_URL=postgres://... ANTHROPIC_API_KEY=... node --import tsx examples/run-agent-loop.ts
 *
 * (a migrated database: `node bin/sourcebound.js migrate`; ANTHROPIC_BASE_URL
 * points it elsewhere). test/run/example.test.ts runs this file end to end
 * against the local Messages server, and test/run/soak.test.ts drives `step`
 * for thousands of tool calls. In an application, import from 'sourcebound'.
 */
import Anthropic from '@anthropic-ai/sdk';
import pg from 'pg';
import { pathToFileURL } from 'node:url';
import {
  createOfflineSummarizer,
  prepareRunRequest,
  READ_RESULT_TOOL,
  readResultTool,
  recordCorrection,
  recordModelRequest,
  recordModelTurn,
  recordToolCall,
  recordToolResult,
  startRun,
  turnOfMessage,
  type CannotFit,
  type PrepareRunRequestOptions,
  type Summarizer,
} from '../src/index.ts';

export interface AgentLoop {
  pool: pg.Pool;
  scope: string;
  runId: string;
  client: Anthropic;
  model: string;
  system: string;
  /** Your tools' schemas (read_result is added: the model rereads stored results with it). */
  tools: readonly unknown[];
  /** Runs one of your tools. A throw named TimeoutError records an unknown effect, any other a failed one. */
  runTool: (name: string, input: unknown) => Promise<string>;
  /** The summarizer for compaction: in production the gateway (createGateway over createAnthropicSummarizer). */
  summarizer?: Summarizer;
  policy?: PrepareRunRequestOptions['policy'];
  maxTokens?: number;
}

export type StepOutcome =
  | { kind: 'tool_calls'; calls: number }
  | { kind: 'answered'; text: string }
  /** The request cannot be brought under the threshold: `cannotFit.holders` says what holds the bytes. */
  | { kind: 'cannot_fit'; cannotFit: CannotFit };

/** One turn of the loop: the next request, the model's answer, its tool calls. */
export async function step(loop: AgentLoop): Promise<StepOutcome> {
  const { pool, runId, scope } = loop;
  // 1. The next request: measured as sent, fitted, maybe compacted. Or a typed "cannot fit".
  const prepared = await prepareRunRequest({
    pool,
    runId,
    scope,
    model: loop.model,
    system: loop.system,
    tools: [...loop.tools, READ_RESULT_TOOL],
    summarizer: loop.summarizer,
    policy: loop.policy,
  });
  if (!prepared.ok) return { kind: 'cannot_fit', cannotFit: prepared.cannotFit };

  // 2. Send exactly the measured body; record the receipt and the turn (text, tool calls, thinking blocks).
  const message = await loop.client.messages.create({
    ...prepared.body,
    max_tokens: loop.maxTokens ?? 4096,
  } as Anthropic.MessageCreateParamsNonStreaming);
  const turn = turnOfMessage(message);
  await recordModelRequest({ pool, runId, scope, requestKey: turn.id, requestBytes: prepared.report.bytes, usage: turn.usage });
  await recordModelTurn({
    pool,
    runId,
    scope,
    text: turn.text,
    toolCalls: turn.toolCalls,
    thinking: turn.thinking,
    modelRequestKey: turn.id,
  });

  // 3. Each tool call: the dispatch first, then its settlement. Every result goes in as content,
  //    whatever its size: the library shows a large one by excerpt and reference.
  for (const call of turn.toolCalls) {
    await recordToolCall({ pool, runId, scope, proposalId: call.id, dispatchId: `${runId}:${call.id}` });
    try {
      const output =
        call.name === READ_RESULT_TOOL.name
          ? await readResultTool({ pool, runId, scope, input: call.input })
          : await loop.runTool(call.name, call.input);
      await recordToolResult({ pool, runId, scope, proposalId: call.id, settlement: 'settled', content: output });
    } catch (error) {
      // A timeout after sending means the effect may have happened: unknown, not failed.
      const settlement = (error as Error).name === 'TimeoutError' ? 'unknown' : 'failed';
      await recordToolResult({ pool, runId, scope, proposalId: call.id, settlement, error: String(error) });
    }
  }
  return turn.toolCalls.length > 0 ? { kind: 'tool_calls', calls: turn.toolCalls.length } : { kind: 'answered', text: turn.text };
}

/** Steps until the model answers, the request cannot fit, or `maxSteps`; `between` runs after each step (corrections, limits). */
export async function runAgentLoop(
  loop: AgentLoop & { maxSteps?: number; between?: (steps: number) => Promise<void> },
): Promise<StepOutcome & { steps: number }> {
  for (let steps = 1; ; steps++) {
    const outcome = await step(loop);
    if (outcome.kind !== 'tool_calls' || steps >= (loop.maxSteps ?? 50)) return { ...outcome, steps };
    await loop.between?.(steps);
  }
}

/** A stand-in research tool: a holdings table of a fund, some of them large. */
async function fetchHoldings(_name: string, input: unknown): Promise<string> {
  const fund = String((input as { fund?: unknown } | null)?.fund ?? 'F');
  const rows = fund.length % 3 === 0 ? 6000 : 40;
  return Array.from({ length: rows }, (_, i) => `${fund},holding ${i},weight ${(i % 97) / 10}%`).join('\n');
}

async function main(): Promise<void> {
  const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
  try {
    const scope = process.env.SCOPE ?? 'tenant-42';
    const {
      rows: [conversation],
    } = await pool.query<{ id: string }>('insert into sourcebound.conversations (scope) values ($1) returning id', [scope]);
    const { runId } = await startRun({
      pool,
      scope,
      conversationId: conversation!.id,
      budget: { requests: 60, tokens: 3_000_000 },
      request: 'Compare the overlap and fees in my technology funds.',
    });
    const outcome = await runAgentLoop({
      pool,
      scope,
      runId,
      client: new Anthropic({ apiKey: process.env.ANTHROPIC_API_KEY, baseURL: process.env.ANTHROPIC_BASE_URL ?? null, maxRetries: 2 }),
      model: process.env.MODEL ?? 'claude-sonnet-4-6',
      system: 'You research funds. Reread stored results with read_result.',
      tools: [
        {
          name: 'fetch_holdings',
          description: 'Holdings of a fund',
          input_schema: { type: 'object', properties: { fund: { type: 'string' } } },
        },
      ],
      runTool: fetchHoldings,
      // The offline summarizer needs no key; in production pass the gateway over the Anthropic one.
      summarizer: createOfflineSummarizer({ maxChars: 6000 }),
      between: async (steps) => {
        // A correction, whenever the user sends one: carried verbatim into every later request.
        if (steps === 2) await recordCorrection({ pool, runId, scope, text: 'Do not treat NAV values from a month ago as current.' });
      },
    });
    process.stdout.write(
      `${JSON.stringify({ runId, steps: outcome.steps, outcome: outcome.kind, answer: outcome.kind === 'answered' ? outcome.text : null })}\n`,
    );
    if (outcome.kind === 'cannot_fit') process.exitCode = 3;
  } finally {
    await pool.end();
  }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((error) => {
    process.stderr.write(`${error instanceof Error ? error.stack : String(error)}\n`);
    process.exitCode = 1;
  });
}
