import { describe, expect, it } from 'vitest';
import { prepareRunRequest, recordCorrection, recordModelTurn, toAnthropicRequest } from '../../src/run/index.ts';
import { createTestDatabase } from '../support/db.ts';
import { buildRun, INPUT, recordingSummarizer, SMALL_POLICY, prepareChecked } from './support/fixtures.ts';

const db = await createTestDatabase();
const pool = db.pool;
const scope = 'tenant-a';

describe('toAnthropicRequest', () => {
  it('alternates roles, answers every tool_use in the next user message, and keeps user text verbatim', async () => {
    const { runId } = await buildRun(pool, {
      groups: 12,
      turnBytes: 2500,
      resultBytes: 100,
      unitsPerGroup: 2,
      settlement: (g, u) => (g === 11 ? (u === 1 ? 'pending' : 'unknown') : 'settled'),
    });
    await recordCorrection({ pool, runId, scope, text: 'Do not treat NAV values from a month ago as current.' });
    await recordModelTurn({ pool, runId, scope, text: 'Noted.' });
    const { request, report } = await prepareChecked({
      pool,
      runId,
      scope,
      ...INPUT,
      policy: SMALL_POLICY,
      summarizer: recordingSummarizer(),
    });
    expect(report.compaction.decision).toBe('committed');
    const out = toAnthropicRequest(request);
    expect(out.messages[0]!.role).toBe('user');
    for (let i = 1; i < out.messages.length; i++) expect(out.messages[i]!.role).not.toBe(out.messages[i - 1]!.role);
    for (const [i, m] of out.messages.entries()) {
      const uses = m.content.filter((b) => b.type === 'tool_use').map((b) => (b as { id: string }).id);
      if (uses.length === 0) continue;
      const next = out.messages[i + 1]!;
      const results = next.content.filter((b) => b.type === 'tool_result').map((b) => (b as { tool_use_id: string }).tool_use_id);
      expect(results).toEqual(uses);
      // tool_result blocks come first in the user message.
      expect(next.content.slice(0, uses.length).every((b) => b.type === 'tool_result')).toBe(true);
    }
    const texts = out.messages.flatMap((m) => m.content.filter((b) => b.type === 'text').map((b) => (b as { text: string }).text));
    expect(texts).toContain('USER-CANARY-REQUEST: compare the funds.');
    expect(texts).toContain('Do not treat NAV values from a month ago as current.');
    expect(texts.some((t) => t.includes('Non-authoritative'))).toBe(true);
    const blocks = out.messages.flatMap((m) => m.content);
    expect(blocks.filter((b) => b.type === 'tool_result' && b.is_error)).toHaveLength(2);
  });
});
