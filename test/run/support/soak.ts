/**
 * The run-compaction soak: the README's agent loop (examples/run-agent-loop.ts,
 * `step`) driven for thousands of tool calls, through the real SDK against
 * the local Messages server, with results from 0 B to 300 KB in Latin, CJK,
 * emoji and binary-ish text, tools that fail or time out, corrections, and a
 * summarizer (through the real gateway) that is sometimes slow, bad or down.
 *
 * Checked on every request as the server received it: its bytes are what
 * prepareRunRequest measured (the loop adds only max_tokens) and at most the
 * threshold; every tool_use is answered by its tool_result in the next user
 * message; the request and every correction are there verbatim and in order.
 * At the end, a cold process rebuilds the next request byte for byte.
 * Used by test/run/soak.test.ts (quick; FAULTS_FULL=1: 10,000 calls) and by
 * `npm run bench` (P10).
 */
import Anthropic from '@anthropic-ai/sdk';
import { createHash } from 'node:crypto';
import type pg from 'pg';
import { step, type AgentLoop } from '../../../examples/run-agent-loop.ts';
import { createGateway } from '../../../src/gateway/gateway.ts';
import type { MaterialItem, Outcome, Summarizer } from '../../../src/support/summary-contract.ts';
import {
  prepareRunRequest,
  READ_RESULT_TOOL,
  recordCorrection,
  startRun,
  toAnthropicRequest,
  type RunCompactionPolicy,
} from '../../../src/run/index.ts';
import { behaviours, startMessagesServer, type WireBlock } from '../../support/messages-server.ts';
import { recoverInColdProcess } from './cold-recovery.ts';
import { prng, type Prng } from './fixtures.ts';

const MAX_TOKENS = 4096;
const MAX_TOKENS_FIELD = Buffer.byteLength(`,"max_tokens":${MAX_TOKENS}`);
const KIB = 1024;

export interface SoakOptions {
  pool: pg.Pool;
  /** Database URL (for the cold recovery process). */
  url: string;
  toolCalls: number;
  seed?: number;
  policy?: Partial<RunCompactionPolicy>;
  log?: (message: string) => void;
}

export interface SoakFigures {
  toolCalls: number;
  steps: number;
  requests: number;
  /** Largest measured request (body + reserve), and the largest body as received. */
  largestRequestBytes: number;
  largestSentBytes: number;
  cannotFit: number;
  checkpoints: number;
  compactedToolCalls: number;
  /** Bytes the checkpoint items of the last request take, per tool call they cover. */
  bytesPerCompactedToolCall: number;
  summaryOutcomes: Record<string, number>;
  resultsByScript: Record<string, number>;
  largestResultBytes: number;
  corrections: number;
  recoveredSame: boolean;
  seconds: number;
  failures: string[];
}

type Script = 'latin' | 'cjk' | 'emoji' | 'binary';
const UNITS: Record<Script, string> = {
  latin: 'Fund overlap, fees and NAV by sector. ',
  cjk: '基金の重複と費用、純資産価値を部門別に。',
  emoji: '📈📉💹🏦 ',
  binary: '\u0001"\\\u001f\u007f\ufffd\t{}',
};

function text(r: Prng, script: Script, bytes: number, tag: string): string {
  if (bytes <= 0) return '';
  const unit = UNITS[script];
  const reps = Math.max(1, Math.ceil((bytes - Buffer.byteLength(tag)) / Buffer.byteLength(unit)));
  // No newline in half of them: a line-range reread would get it whole.
  const body = r.chance(0.5) ? unit.repeat(reps) : Array.from({ length: Math.ceil(reps / 40) }, () => unit.repeat(40)).join('\n');
  return tag + body;
}

function resultSize(r: Prng): number {
  const roll = r.next();
  if (roll < 0.05) return 0;
  if (roll < 0.6) return r.int(100, 4 * KIB);
  if (roll < 0.85) return r.int(10 * KIB, 60 * KIB);
  return r.int(100 * KIB, 300 * KIB);
}

/**
 * A summarizer that is mostly a good model and sometimes slow, bad or down.
 * A good answer keeps to the limit it is told, in the script of its material
 * (so CJK material gets a CJK summary), and states no figure its material
 * does not hold (the grounding check would refuse it).
 */
function unreliableSummarizer(r: Prng, counts: Record<string, number>, deadlineMs: number): Summarizer {
  const tally = (k: string) => (counts[k] = (counts[k] ?? 0) + 1);
  return {
    model: 'soak/unreliable@1',
    async summarize(request) {
      const roll = r.next();
      const max = request.maxChars ?? 6000;
      const good = (): Outcome => ({
        kind: 'ok',
        text: summaryOf(request.items, max),
        model: 'soak/unreliable@1',
        usage: { inputTokens: 1000, outputTokens: 300 },
        requestId: null,
      });
      if (roll < 0.7) {
        tally('ok');
        return good();
      }
      if (roll < 0.78) {
        // Slow: sometimes past the deadline (an unknown outcome), honouring the abort.
        tally('slow');
        const ms = r.int(Math.floor(deadlineMs / 2), deadlineMs * 2);
        await new Promise<void>((resolve) => {
          const t = setTimeout(resolve, ms);
          request.signal?.addEventListener(
            'abort',
            () => {
              clearTimeout(t);
              resolve();
            },
            { once: true },
          );
        });
        return good();
      }
      if (roll < 0.88) {
        tally('bad');
        const kind = r.int(0, 3);
        if (kind === 0) return { kind: 'ok', text: 'x'.repeat(max + 50), model: 'soak/unreliable@1', usage: null, requestId: null };
        if (kind === 1) return { kind: 'ok', text: '   ', model: 'soak/unreliable@1', usage: null, requestId: null };
        if (kind === 2) return { kind: 'invalid', reason: 'tool_use', model: 'soak/unreliable@1', usage: null, requestId: null };
        return {
          kind: 'ok',
          text: 'The overlap is 97.5% and fees fell to $12.40 on 2026-10-01.',
          model: 'soak/unreliable@1',
          usage: null,
          requestId: null,
        };
      }
      tally('down');
      const kind = r.int(0, 2);
      if (kind === 0) return { kind: 'deferred', reason: 'overloaded (529)', retryAfterMs: null };
      if (kind === 1) return { kind: 'unknown', reason: 'HTTP 500 after send', requestId: null };
      throw new Error('connection reset by peer');
    },
  };
}

/** A summary made of the material's own words (no digits, so no figure it does not hold), at most `maxChars` characters. */
function summaryOf(items: readonly MaterialItem[], maxChars: number): string {
  const words: string[] = [];
  let chars = 0;
  for (const item of items) {
    for (const w of item.text.replace(/[0-9`"'$%€£¥]/g, ' ').split(/\s+/)) {
      if (w === '' || w.length > 24) continue;
      const n = [...w].length + 1;
      if (chars + n > maxChars) return words.join(' ') || 'Work summarized.';
      words.push(w);
      chars += n;
      if (chars > maxChars * 0.8) return words.join(' ');
    }
  }
  return words.join(' ') || 'Work summarized.';
}

/** Runs the soak; the figures say what held (failures is empty when everything did). */
export async function runSoak(o: SoakOptions): Promise<SoakFigures> {
  const started = performance.now();
  const r = prng(o.seed ?? 12);
  const failures: string[] = [];
  const fail = (what: string) => {
    if (failures.length < 50) failures.push(what);
  };
  const policy: Partial<RunCompactionPolicy> = { summaryDeadlineMs: 400, leaseGraceMs: 200, ...o.policy };
  const threshold = policy.thresholdBytes ?? 256 * KIB;
  const reserve = policy.responseReserveBytes ?? 16 * KIB;
  const summaryOutcomes: Record<string, number> = {};
  const resultsByScript: Record<string, number> = {};
  let largestResultBytes = 0;
  const server = await startMessagesServer();
  const scope = 'soak';
  const {
    rows: [conversation],
  } = await o.pool.query<{ id: string }>('insert into sourcebound.conversations (scope) values ($1) returning id', [scope]);
  const request = 'Compare the overlap and fees of my technology funds; 基金の費用も比べて。 📈';
  const { runId } = await startRun({ pool: o.pool, scope, conversationId: conversation!.id, request });
  const protectedTexts = [request];
  const gateway = createGateway({
    summarizer: unreliableSummarizer(r, summaryOutcomes, policy.summaryDeadlineMs!),
    defaults: { maxChars: 6000, deadlineMs: policy.summaryDeadlineMs! },
  });
  const loop: AgentLoop = {
    pool: o.pool,
    scope,
    runId,
    client: new Anthropic({ apiKey: server.apiKey, baseURL: server.url, maxRetries: 0 }),
    model: 'claude-soak',
    system: 'You research funds. Reread stored results with read_result.',
    tools: [{ name: 'fetch', description: 'Fetch a document', input_schema: { type: 'object', properties: { q: { type: 'string' } } } }],
    runTool: async (_name, input) => {
      const roll = r.next();
      if (roll < 0.04) throw new Error('upstream refused');
      if (roll < 0.07) throw Object.assign(new Error('timed out after the request was sent'), { name: 'TimeoutError' });
      const script = r.pick(['latin', 'latin', 'cjk', 'emoji', 'binary'] as const);
      const bytes = resultSize(r);
      resultsByScript[script] = (resultsByScript[script] ?? 0) + 1;
      largestResultBytes = Math.max(largestResultBytes, bytes);
      return text(r, script, bytes, `R(${JSON.stringify(input).slice(0, 40)}) `);
    },
    summarizer: gateway,
    policy,
    maxTokens: MAX_TOKENS,
  };

  const timing = { create: 0, tool: 0, step: 0 };
  if (process.env.RUN_SOAK_PROFILE) {
    const create = loop.client.messages.create.bind(loop.client.messages);
    (loop.client.messages as { create: unknown }).create = async (...a: unknown[]) => {
      const t = performance.now();
      try {
        return await (create as (...x: unknown[]) => unknown)(...a);
      } finally {
        timing.create += performance.now() - t;
      }
    };
    const tool = loop.runTool;
    loop.runTool = async (n, i) => {
      const t = performance.now();
      try {
        return await tool(n, i);
      } finally {
        timing.tool += performance.now() - t;
      }
    };
  }
  let calls = 0;
  let steps = 0;
  let requests = 0;
  let cannotFit = 0;
  let largestRequestBytes = 0;
  let largestSentBytes = 0;
  let corrections = 0;
  let id = 0;
  const knownResults: { resultId: string; version: number }[] = [];
  while (calls < o.toolCalls) {
    steps++;
    if (steps % 60 === 0) {
      const correction = r.chance(0.5)
        ? `Correction ${steps / 60}: use only funds with fees under the median.`
        : `訂正${steps / 60}：先月のNAVは使わないこと。`;
      await recordCorrection({ pool: o.pool, runId, scope, text: correction });
      protectedTexts.push(correction);
      corrections++;
    }
    // The scripted model: some narration (sometimes none), sometimes thinking, 1-6 tool calls.
    const content: WireBlock[] = [];
    if (r.chance(0.1)) content.push({ type: 'thinking', thinking: `Step ${steps}: plan the next reads.`, signature: `sig-${steps}` });
    if (r.chance(0.8))
      content.push({
        type: 'text',
        text: text(r, r.pick(['latin', 'cjk'] as const), r.int(20, 2 * KIB), `Step ${steps}: `),
        citations: null,
      });
    const n = Math.min(r.int(1, 6), o.toolCalls - calls);
    for (let k = 0; k < n; k++) {
      const callId = `toolu_${++id}`;
      if (knownResults.length > 0 && r.chance(0.06)) {
        const ref = r.pick(knownResults);
        content.push({
          type: 'tool_use',
          id: callId,
          name: 'read_result',
          input: r.chance(0.5) ? { ...ref, fromLine: 1, toLine: 50 } : { ...ref, startByte: r.int(0, 1000) },
        });
      } else if (r.chance(0.02)) {
        content.push({ type: 'tool_use', id: callId, name: 'read_result', input: { catalog: { offset: 0 } } });
      } else {
        content.push({ type: 'tool_use', id: callId, name: 'fetch', input: { q: `${r.pick(['fees', '基金', '📈', 'NAV "q"'])} ${id}` } });
      }
    }
    calls += n;
    server.enqueue(behaviours.blocks(content, 'tool_use'));
    const t0 = performance.now();
    const outcome = await step(loop);
    timing.step += performance.now() - t0;
    if (outcome.kind === 'cannot_fit') {
      cannotFit++;
      fail(`step ${steps}: cannot fit: ${outcome.cannotFit.holders.map((h) => `${h.what} ${h.bytes}`).join(', ')}`);
      break;
    }
    requests++;
    const sent = server.requests.at(-1)!;
    const { rows } = await o.pool.query<{ bytes: number }>(
      'select request_bytes as bytes from sourcebound.run_model_requests where run_id = $1 order by id desc limit 1',
      [runId],
    );
    const measured = rows[0]!.bytes;
    if (sent.bytes - MAX_TOKENS_FIELD + reserve !== measured)
      fail(`step ${steps}: sent ${sent.bytes} bytes, measured ${measured} (reserve ${reserve})`);
    if (measured > threshold) fail(`step ${steps}: measured ${measured} > ${threshold}`);
    largestRequestBytes = Math.max(largestRequestBytes, measured);
    largestSentBytes = Math.max(largestSentBytes, sent.bytes);
    checkBody(sent.body as Anthropic.MessageCreateParams, protectedTexts, (what) => fail(`step ${steps}: ${what}`));
    server.reset();
    if (steps % 25 === 0) {
      const { rows: results } = await o.pool.query<{ resultId: string; version: number }>(
        `select id as "resultId", version from sourcebound.run_results where run_id = $1 order by random() limit 5`,
        [runId],
      );
      knownResults.splice(0, knownResults.length, ...results);
      o.log?.(`soak: ${calls} tool calls, ${steps} steps, largest request ${largestRequestBytes} B`);
    }
  }

  // The next request, then the same from a cold process.
  const input = { pool: o.pool, runId, scope, model: loop.model, system: loop.system, tools: [...loop.tools, READ_RESULT_TOOL], policy };
  const next = await prepareRunRequest({ ...input, summarizer: gateway });
  let recoveredSame = false;
  if (next.ok) {
    const body = JSON.stringify(next.body);
    const cold = await recoverInColdProcess(o.url, runId, scope, { model: loop.model, system: loop.system, tools: input.tools, policy });
    recoveredSame = cold.sha256 === sha256(body) && cold.bytes === Buffer.byteLength(body);
    if (!recoveredSame)
      fail(`cold recovery rebuilt ${cold.bytes} bytes (${cold.sha256}), the request is ${Buffer.byteLength(body)} (${sha256(body)})`);
  } else {
    fail('the last request cannot fit');
  }
  const final = next.ok ? next.request : next.cannotFit.unsent;
  const {
    rows: [cp],
  } = await o.pool.query<{ n: number }>('select count(*)::int as n from sourcebound.run_checkpoints where run_id = $1', [runId]);
  let summaryBytes = 0;
  let compacted = 0;
  for (const item of final.messages) {
    if (item.kind !== 'checkpoint_summary') continue;
    summaryBytes += Buffer.byteLength(
      JSON.stringify(toAnthropicRequest({ ...final, messages: [item], resultCatalog: [], resultCatalogOmitted: 0 }).messages),
    );
    compacted += item.toolUnits;
  }
  await server.close();
  if (process.env.RUN_SOAK_PROFILE) o.log?.(`soak timing (ms): ${JSON.stringify(timing)}`);
  return {
    toolCalls: calls,
    steps,
    requests,
    largestRequestBytes,
    largestSentBytes,
    cannotFit,
    checkpoints: cp!.n,
    compactedToolCalls: compacted,
    bytesPerCompactedToolCall: compacted === 0 ? 0 : Math.round(summaryBytes / compacted),
    summaryOutcomes,
    resultsByScript,
    largestResultBytes,
    corrections,
    recoveredSame,
    seconds: (performance.now() - started) / 1000,
    failures,
  };
}

/** Tool units never split; protected texts verbatim and in order. */
function checkBody(body: Anthropic.MessageCreateParams, protectedTexts: readonly string[], fail: (what: string) => void): void {
  const messages = body.messages;
  if (messages[0]?.role !== 'user') fail("the first message is not the user's");
  const userTexts: string[] = [];
  for (const [i, m] of messages.entries()) {
    if (i > 0 && messages[i - 1]!.role === m.role) fail(`messages ${i - 1} and ${i} have the same role`);
    const blocks = typeof m.content === 'string' ? [] : m.content;
    if (m.role === 'user') for (const b of blocks) if (b.type === 'text') userTexts.push(b.text);
    if (m.role !== 'assistant') continue;
    const uses = blocks.filter((b) => b.type === 'tool_use').map((b) => (b as { id: string }).id);
    if (uses.length === 0) continue;
    const next = messages[i + 1];
    const answers =
      next && typeof next.content !== 'string'
        ? next.content.slice(0, uses.length).map((b) => (b.type === 'tool_result' ? b.tool_use_id : null))
        : [];
    if (answers.join() !== uses.join()) fail(`tool calls ${uses.join(',')} are not answered first in the next message`);
  }
  let at = 0;
  for (const t of protectedTexts) {
    const found = userTexts.indexOf(t, at);
    if (found < 0) {
      fail(`protected text missing or out of order: ${t.slice(0, 40)}`);
      return;
    }
    at = found + 1;
  }
}

function sha256(s: string): string {
  return createHash('sha256').update(s, 'utf8').digest('hex');
}
