import type pg from 'pg';
import type { MaterialItem, Outcome, Summarizer, SummaryRequest } from '../../../src/support/summary-contract.ts';
import {
  prepareRunRequest,
  toAnthropicRequest,
  type PreparedRunRequest,
  type PrepareRunRequestOptions,
  type RunRequest,
} from '../../../src/run/index.ts';

export async function createConversation(pool: pg.Pool, scope = 'tenant-a'): Promise<string> {
  const { rows } = await pool.query<{ id: string }>('insert into sourcebound.conversations (scope) values ($1) returning id', [scope]);
  return rows[0]!.id;
}

/** A small seeded PRNG (mulberry32): the same seed gives the same history. */
export function prng(seed: number) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return {
    next,
    /** Integer in [min, max]. */
    int: (min: number, max: number) => min + Math.floor(next() * (max - min + 1)),
    chance: (p: number) => next() < p,
    pick: <T>(items: readonly T[]) => items[Math.floor(next() * items.length)]!,
  };
}
export type Prng = ReturnType<typeof prng>;

const WORDS = [
  'fund',
  'overlap',
  'fee',
  'NAV',
  'holding',
  'ratio',
  'sector',
  'report',
  'citation',
  'table',
  'price',
  'yield',
  'Ünïcode',
  '基金',
  'η',
  '📈',
];

/** Text of about `bytes` UTF-8 bytes (mixed scripts, quotes and newlines, to exercise escaping). */
export function filler(r: Prng, bytes: number, tag = ''): string {
  const parts: string[] = tag ? [tag] : [];
  let n = Buffer.byteLength(tag);
  while (n < bytes) {
    const w = r.chance(0.05) ? '"quoted"\n' : r.pick(WORDS);
    parts.push(w);
    n += Buffer.byteLength(w) + 1;
  }
  return parts.join(' ');
}

export interface RecordingSummarizer extends Summarizer {
  calls: SummaryRequest[];
}

/**
 * An in-process summarizer that records every request it gets. `reply`
 * decides the outcome; by default an ok summary that names its input.
 */
export function recordingSummarizer(
  reply?: (request: SummaryRequest, call: number) => Outcome | Promise<Outcome>,
  model = 'test/recorder@1',
): RecordingSummarizer {
  const calls: SummaryRequest[] = [];
  return {
    model,
    calls,
    async summarize(request) {
      calls.push({ ...request, items: request.items.map((i) => ({ ...i })) });
      if (reply) return reply(request, calls.length);
      return ok(`Summary ${calls.length}: ${request.items.length} items, ${firstIds(request.items)}.`);
    },
  };
}

export function ok(text: string, model = 'test/recorder@1'): Outcome {
  return { kind: 'ok', text, model, usage: { inputTokens: 100, outputTokens: 20 }, requestId: null };
}

function firstIds(items: readonly MaterialItem[]): string {
  return items
    .slice(0, 3)
    .map((i) => i.id)
    .join(', ');
}

/** A summarizer that fails the test if it is ever called. */
export function forbiddenSummarizer(): Summarizer & { calls: number } {
  const s = {
    model: 'test/forbidden@1',
    calls: 0,
    async summarize(): Promise<Outcome> {
      s.calls++;
      throw new Error('no model call is allowed here');
    },
  };
  return s;
}

/** A small policy so tests create pressure with little data. */
export const SMALL_POLICY = {
  thresholdBytes: 24 * 1024,
  targetBytes: 20 * 1024,
  minSavingBytes: 1024,
  summaryCapBytes: 800,
  minSummaryBytes: 64,
  keepRecentGroups: 2,
  responseReserveBytes: 1024,
  maxSummaryInputBytes: 10 * 1024 * 1024,
} as const;

export const INPUT = {
  model: 'main-model@1',
  system: 'You are a research agent.',
  tools: [{ name: 'search', input_schema: { type: 'object' } }],
} as const;

export interface BuiltRun {
  runId: string;
  conversationId: string;
  /** Tool proposal ids per group, in order. */
  proposals: string[][];
}

/**
 * Records a Run the way an application would: the request, then `groups`
 * model turns, each with `unitsPerGroup` tool calls dispatched and settled
 * with a body of `resultBytes`.
 */
export async function buildRun(
  pool: pg.Pool,
  o: {
    scope?: string;
    groups: number;
    turnBytes: number;
    resultBytes: number;
    unitsPerGroup?: number;
    request?: string;
    budget?: { requests?: number | null; tokens?: number | null };
    settlement?: (group: number, unit: number) => 'settled' | 'failed' | 'unknown' | 'pending';
  },
): Promise<BuiltRun> {
  const { startRun, recordModelTurn, recordToolCall, recordToolResult } = await import('../../../src/run/index.ts');
  const scope = o.scope ?? 'tenant-a';
  const conversationId = await createConversation(pool, scope);
  const r = prng(o.groups * 7919 + o.turnBytes);
  const { runId } = await startRun({
    pool,
    scope,
    conversationId,
    request: o.request ?? 'USER-CANARY-REQUEST: compare the funds.',
    budget: o.budget,
  });
  const proposals: string[][] = [];
  for (let g = 0; g < o.groups; g++) {
    const ids = Array.from({ length: o.unitsPerGroup ?? 1 }, (_, u) => `tu_${g}_${u}`);
    proposals.push(ids);
    await recordModelTurn({
      pool,
      runId,
      scope,
      text: filler(r, o.turnBytes, `MODEL-TURN-${g}`),
      toolCalls: ids.map((id) => ({ id, name: 'search', input: { q: `query ${id}` } })),
    });
    for (const [u, id] of ids.entries()) {
      const s = o.settlement?.(g, u) ?? 'settled';
      await recordToolCall({ pool, runId, scope, proposalId: id, dispatchId: `dispatch-${id}` });
      if (s === 'pending') continue;
      await recordToolResult({
        pool,
        runId,
        scope,
        proposalId: id,
        settlement: s,
        content: s === 'unknown' ? undefined : filler(r, o.resultBytes, `RESULT-${id}`),
        error: s === 'settled' ? undefined : `${s} in test`,
      });
    }
  }
  return { runId, conversationId, proposals };
}

/** The request of a prepared result: the sendable one, or the one that could not be sent (for inspection). */
export function requestOf(p: { ok: true; request: RunRequest } | { ok: false; cannotFit: { unsent: RunRequest } }): RunRequest {
  return p.ok ? p.request : p.cannotFit.unsent;
}

/** Measured requests, for tests that want to count them. */
export const measured = { requests: 0 };

/**
 * prepareRunRequest, with the check every prepared request must pass: the
 * reported size is exactly the UTF-8 length of the body sent to the provider
 * plus the reserve, the body is toAnthropicRequest of the request, and a
 * request over the threshold is never handed out as sendable.
 */
export async function prepareChecked(options: PrepareRunRequestOptions): Promise<PreparedRunRequest & { request: RunRequest }> {
  const p = await prepareRunRequest(options);
  const request = requestOf(p);
  const body = JSON.stringify(toAnthropicRequest(request));
  const bytes = Buffer.byteLength(body, 'utf8') + request.responseReserveBytes;
  if (bytes !== p.report.bytes) throw new Error(`measured ${p.report.bytes} bytes, but the body sent is ${bytes} bytes with the reserve`);
  if (p.ok && JSON.stringify(p.body) !== body) throw new Error('the body handed out is not toAnthropicRequest(request)');
  if (p.ok !== p.report.bytes <= p.report.thresholdBytes)
    throw new Error(`ok is ${p.ok} for ${p.report.bytes} bytes against ${p.report.thresholdBytes}`);
  measured.requests++;
  return { ...p, request } as PreparedRunRequest & { request: RunRequest };
}
