import { randomBytes } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { createTestDatabase } from '../support/db.ts';
import { behaviours, startMessagesServer, type Behaviour, type WireBlock } from '../support/messages-server.ts';
import { Fleet, workerEnv } from './support/fleet.ts';
import {
  assistantMessageWithText,
  expectZeroFigures,
  finalChecks,
  harnessPool,
  quiesce,
  recordFigures,
  requestReplies,
  scopeCanaries,
  seedConversations,
  size,
} from './support/scenario.ts';

/**
 * Scenario 6, bad model answers: the whole `invalid` matrix (tool use with
 * fine prose, max_tokens, refusal, pause_turn, stop_sequence,
 * model_context_window_exceeded, a thinking block, empty, whitespace, 6,001
 * characters, plus a server tool block and a null stop reason) and two
 * `unknown` answers (a 200 that is not JSON, a reset connection), three of
 * each, shuffled among good answers into a normal run. Every bad answer that
 * carries text carries a canary. The server's queue order tells which request
 * got which answer; the request's replies tell which record it was for; so
 * every attempt row is checked against the answer it really got.
 */

// Enough identities that every scripted answer is used whatever the order: 2 x identities >= 2 x good + bad.
const CONVERSATIONS = size(20, 60);
const COPIES = size(3, 8);
const BAD = `BADCANARY-${randomBytes(4).toString('hex')}`;

const db = await createTestDatabase();
const server = await startMessagesServer();
const pool = harnessPool(db.url);
const fleet = new Fleet(2, workerEnv(db.url, server));
afterAll(async () => {
  await fleet.stop();
  await pool.end();
  await server.close();
});

const text = (t: string): WireBlock => ({ type: 'text', text: t, citations: null });
const tooLong = `${BAD} ${'x'.repeat(6001 - BAD.length - 1)}`;

interface Bad {
  name: string;
  behaviour: Behaviour;
  outcome: 'invalid' | 'unknown';
  reason: RegExp;
}

const MATRIX: Bad[] = [
  {
    name: 'tool_use',
    outcome: 'invalid',
    reason: /^block:tool_use$/,
    behaviour: behaviours.blocks(
      [text(`${BAD} a fine summary`), { type: 'tool_use', id: 'toolu_1', name: 'lookup', input: {} }],
      'tool_use',
    ),
  },
  {
    name: 'tool_use+end_turn',
    outcome: 'invalid',
    reason: /^block:tool_use$/,
    behaviour: behaviours.blocks(
      [text(`${BAD} a fine summary`), { type: 'tool_use', id: 'toolu_2', name: 'lookup', input: {} }],
      'end_turn',
    ),
  },
  { name: 'max_tokens', outcome: 'invalid', reason: /^stop_reason:max_tokens$/, behaviour: behaviours.text(`${BAD} cut`, 'max_tokens') },
  { name: 'refusal', outcome: 'invalid', reason: /^stop_reason:refusal$/, behaviour: behaviours.text(`${BAD} I cannot`, 'refusal') },
  {
    name: 'pause_turn',
    outcome: 'invalid',
    reason: /^stop_reason:pause_turn$/,
    behaviour: behaviours.text(`${BAD} working`, 'pause_turn'),
  },
  {
    name: 'stop_sequence',
    outcome: 'invalid',
    reason: /^stop_reason:stop_sequence$/,
    behaviour: behaviours.text(`${BAD} stopped`, 'stop_sequence'),
  },
  {
    name: 'model_context_window_exceeded',
    outcome: 'invalid',
    reason: /^stop_reason:model_context_window_exceeded$/,
    behaviour: behaviours.text(`${BAD} partial`, 'model_context_window_exceeded'),
  },
  {
    name: 'null stop_reason',
    outcome: 'invalid',
    reason: /^stop_reason:unknown:null$/,
    behaviour: behaviours.text(`${BAD} no stop`, null),
  },
  {
    name: 'thinking',
    outcome: 'invalid',
    reason: /^block:thinking$/,
    behaviour: behaviours.blocks([{ type: 'thinking', thinking: 'hmm', signature: 'sig' }, text(`${BAD} after thinking`)]),
  },
  {
    name: 'server_tool_use',
    outcome: 'invalid',
    reason: /^block:server_tool_use$/,
    behaviour: behaviours.blocks([{ type: 'server_tool_use', id: 'srvtoolu_1', name: 'web_search', input: {} }, text(`${BAD} searched`)]),
  },
  { name: 'empty', outcome: 'invalid', reason: /^empty_text$/, behaviour: behaviours.text('') },
  { name: 'whitespace', outcome: 'invalid', reason: /^empty_text$/, behaviour: behaviours.text(' \n\t\u00a0\u3000 ') },
  { name: '6,001 chars', outcome: 'invalid', reason: /^too_long:6001>6000$/, behaviour: behaviours.text(tooLong) },
  { name: 'malformed 200', outcome: 'unknown', reason: /^malformed_response/, behaviour: behaviours.malformed() },
  { name: 'reset', outcome: 'unknown', reason: /^connection_error/, behaviour: behaviours.reset() },
];

function shuffled<T>(items: T[]): T[] {
  const a = [...items];
  for (let i = a.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [a[i], a[j]] = [a[j]!, a[i]!];
  }
  return a;
}

describe('fault scenario 6: bad model answers', () => {
  it('no bad answer becomes a summary; two bad answers fail the identity, whose pairs stay raw', async () => {
    const startedAt = Date.now();
    // null: a good (echo) answer.
    const script = shuffled<Bad | null>([
      ...Array.from({ length: COPIES }, () => MATRIX).flat(),
      ...Array.from({ length: MATRIX.length }, () => null),
    ]);
    server.setDefault(behaviours.echo(100));
    server.enqueue(...script.map((b) => b?.behaviour ?? behaviours.echo(100)));
    const canaries = scopeCanaries(['tenant-a', 'tenant-b']);
    await seedConversations(pool, { count: CONVERSATIONS, pairs: 45, canaries });
    await fleet.start();
    await quiesce(pool, server, { timeoutMs: size(180_000, 600_000), what: 'bad answers' });

    // Which record each request was for (its first reply, found by its text: nothing is edited here), and what it got.
    const { rows: records } = await pool.query<{ id: string; ids: string[]; status: string; summary: string | null }>(
      'select id, source_message_ids::text[] as ids, status, summary from sourcebound.conversation_summaries',
    );
    const recordOf = new Map<string, string>();
    for (const r of records) for (const id of r.ids) recordOf.set(id, r.id);
    const served = new Map<string, (Bad | null)[]>();
    for (const [j, req] of server.requests.entries()) {
      const first = requestReplies(req.body)[0];
      const message = first === undefined ? undefined : await assistantMessageWithText(pool, first.text);
      const record = message === undefined ? undefined : recordOf.get(message.id);
      if (record === undefined) throw new Error(`request ${j} names no known reply`);
      served.set(record, [...(served.get(record) ?? []), j < script.length ? script[j]! : null]);
    }

    const { rows: attempts } = await pool.query<{ summaryId: string; outcome: string; reason: string | null }>(
      `select summary_id as "summaryId", outcome, reason from sourcebound.conversation_summary_attempts order by id`,
    );
    const attemptsOf = new Map<string, { outcome: string; reason: string | null }[]>();
    for (const a of attempts) attemptsOf.set(a.summaryId, [...(attemptsOf.get(a.summaryId) ?? []), a]);

    let misclassified = 0;
    let acceptedBad = 0;
    let failedAfterTwo = 0;
    let completedAfterOne = 0;
    const byKind: Record<string, number> = {};
    for (const r of records) {
      const got = served.get(r.id) ?? [];
      const recorded = attemptsOf.get(r.id) ?? [];
      if (got.length !== recorded.length) misclassified += Math.abs(got.length - recorded.length);
      got.forEach((answer, n) => {
        const a = recorded[n];
        if (!a) return;
        if (answer === null) {
          if (a.outcome !== 'ok') misclassified++;
          return;
        }
        byKind[answer.name] = (byKind[answer.name] ?? 0) + 1;
        if (a.outcome === 'ok') acceptedBad++;
        else if (a.outcome !== answer.outcome || !answer.reason.test(a.reason ?? '')) misclassified++;
      });
      const bads = got.filter((g) => g !== null).length;
      if (bads >= 2 && r.status === 'failed') failedAfterTwo++;
      if (bads >= 2 && r.status !== 'failed') misclassified++;
      if (bads === 1 && r.status === 'completed') completedAfterOne++;
      if (r.status === 'completed' && (r.summary ?? '').trim().length === 0) acceptedBad++;
    }

    const checks = await finalChecks(pool, { canaries, acceptedBad, badCanary: BAD });
    const badServed = Object.values(byKind).reduce((a, b) => a + b, 0);
    const figures = recordFigures({
      id: '6-bad-answers',
      title: 'bad model answers (invalid matrix + unknowns)',
      startedAt,
      checks,
      server,
      fleet,
      faults: {
        'bad answers served': badServed,
        kinds: Object.keys(byKind).length,
        misclassified: misclassified,
        'identities failed after 2 bad': failedAfterTwo,
        'completed after 1 bad': completedAfterOne,
      },
      notes: [
        `served per kind: ${Object.entries(byKind)
          .map(([k, v]) => `${k} ${v}`)
          .join(', ')}`,
      ],
    });

    expectZeroFigures(figures, checks);
    expect(misclassified).toBe(0);
    expect(Object.keys(byKind)).toHaveLength(MATRIX.length);
    expect(failedAfterTwo).toBeGreaterThan(0);
    expect(failedAfterTwo).toBe(figures.failedRanges);
    expect(figures.completedRanges + figures.failedRanges).toBe(figures.ranges);
  });
});
