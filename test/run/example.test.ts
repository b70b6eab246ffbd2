import { describe, expect, it } from 'vitest';
import { createOfflineSummarizer } from '../../src/gateway/offline.ts';
import {
  prepareRunRequest, readResult, readRunBudget, recordCorrection, recordModelRequest, recordModelTurn, recordToolCall,
  recordToolResult, recoverRunContext, startRun, storeResult, toAnthropicRequest, type ToolProposal,
} from '../../src/run/index.ts';
import { createTestDatabase } from '../support/db.ts';
import { createConversation, SMALL_POLICY, prepareChecked } from './support/fixtures.ts';

const db = await createTestDatabase();
const pool = db.pool;
const scope = 'tenant-42';

interface ModelReply {
  id: string;
  text: string;
  toolCalls: ToolProposal[];
  usage: { inputTokens: number; outputTokens: number } | null;
}

/** The README's agent loop, against a scripted model and scripted tools. */
describe('the agent loop of src/run/README.md', () => {
  it('runs, compacts under pressure, keeps corrections, rereads stored results and recovers the same context', async () => {
    const input = { model: 'claude-sonnet-4-5', system: 'You research funds. Reread stored results with read_result.', tools: [{ name: 'read_result', input_schema: { type: 'object' } }] };
    const summarizer = createOfflineSummarizer({ maxChars: 6000 });
    const policy = { ...SMALL_POLICY, thresholdBytes: 48 * 1024, targetBytes: 40 * 1024 };
    const conversationId = await createConversation(pool, scope);
    const { runId } = await startRun({ pool, scope, conversationId, budget: { requests: 60, tokens: 3_000_000 }, request: 'Compare the overlap and fees in my technology funds.' });

    let stored: { resultId: string; version: number } | null = null;
    const sentRequests: unknown[] = [];
    const callModel = async (request: unknown, n: number): Promise<ModelReply> => {
      sentRequests.push(request);
      const toolCalls: ToolProposal[] = n >= 14 ? [] : n === 6 && stored
        ? [{ id: `call_${n}_r`, name: 'read_result', input: { ...stored, fromLine: 2, toLine: 3 } }]
        : [{ id: `call_${n}_a`, name: 'fetch_holdings', input: { fund: `F${n}` } }, { id: `call_${n}_b`, name: 'fetch_fees', input: { fund: `F${n}` } }];
      return { id: `msg_${n}`, text: `Step ${n}: ${'reasoning about overlap and fees. '.repeat(150)}`, toolCalls, usage: { inputTokens: 1000, outputTokens: 200 } };
    };
    const runTool = async (name: string, toolInput: { fund: string }, n: number): Promise<string> => {
      if (name === 'fetch_fees' && n === 3) throw Object.assign(new Error('upstream timed out after the request was sent'), { name: 'TimeoutError' });
      const rows = name === 'fetch_holdings' && n === 2 ? 5000 : 60;
      return Array.from({ length: rows }, (_, i) => `${toolInput.fund},holding ${i},weight ${(i % 97) / 10}%`).join('\n');
    };

    const reports = [];
    for (let n = 0; ; n++) {
      if (n === 4) await recordCorrection({ pool, runId, scope, text: 'Do not treat NAV values from a month ago as current.' });
      const { request, report } = await prepareChecked({ pool, runId, scope, ...input, summarizer, policy });
      reports.push(report);
      const reply = await callModel(toAnthropicRequest(request), n);
      await recordModelRequest({ pool, runId, scope, requestKey: reply.id, requestBytes: report.bytes, usage: reply.usage });
      await recordModelTurn({ pool, runId, scope, text: reply.text, toolCalls: reply.toolCalls, modelRequestKey: reply.id });
      for (const call of reply.toolCalls) {
        const dispatchId = `${runId}:${call.id}`;
        await recordToolCall({ pool, runId, scope, proposalId: call.id, dispatchId });
        try {
          if (call.name === 'read_result') {
            const { resultId, version, fromLine, toLine } = call.input as { resultId: string; version: number; fromLine: number; toLine: number };
            const slice = await readResult({ pool, runId, scope, resultId, version, range: { lines: { from: fromLine, to: toLine } } });
            await recordToolResult({ pool, runId, scope, proposalId: call.id, settlement: 'settled', content: slice.content });
            continue;
          }
          const output = await runTool(call.name, call.input as { fund: string }, n);
          if (output.length > 64_000) {
            stored = await storeResult({ pool, runId, scope, content: output, label: `${call.name} output` });
            await recordToolResult({ pool, runId, scope, proposalId: call.id, settlement: 'settled', resultRef: stored });
          } else {
            await recordToolResult({ pool, runId, scope, proposalId: call.id, settlement: 'settled', content: output });
          }
        } catch (error) {
          const settlement = (error as Error).name === 'TimeoutError' ? 'unknown' : 'failed';
          await recordToolResult({ pool, runId, scope, proposalId: call.id, settlement, error: String(error) });
        }
      }
      if (reply.toolCalls.length === 0) break;
    }

    expect(reports.every((r) => r.fits)).toBe(true);
    expect(reports.some((r) => r.compaction.decision === 'committed')).toBe(true);
    expect(reports.some((r) => r.references.length > 0)).toBe(true);
    // The stored result is in the catalog, not the body; the reread slice was recorded.
    const { rows } = await pool.query(`select count(*)::int as n from sourcebound.run_tool_units where run_id = $1 and tool_name = 'read_result' and status = 'settled'`, [runId]);
    expect(rows[0].n).toBe(1);
    expect(JSON.stringify(sentRequests.at(-1))).toContain('Do not treat NAV values from a month ago as current.');
    expect(JSON.stringify(sentRequests.at(-1))).not.toContain('holding 4999');
    expect(await readRunBudget({ pool, runId, scope })).toMatchObject({ requestsUsed: 15 + reports.filter((r) => r.compaction.outcome).length, requestsReserved: 0 });

    // After a crash: the same context from records alone.
    const { request, report } = await recoverRunContext({ pool, runId, scope, ...input, policy });
    const again = await prepareChecked({ pool, runId, scope, ...input, policy });
    expect(request).toEqual(again.request);
    expect(report.checkpointsUsed.length).toBeGreaterThan(0);
    expect(report.receipts.every((r) => r.status === 'ok')).toBe(true);
  });
});
