import { describe, expect, it } from 'vitest';
import {
  BlankTextError,
  prepareRunRequest,
  readResult,
  recordCorrection,
  recordModelTurn,
  recordToolCall,
  recordToolResult,
  recoverRunContext,
  startRun,
  storeResult,
  toAnthropicRequest,
} from '../../src/run/index.ts';
import { createTestDatabase } from '../support/db.ts';
import { buildRun, createConversation, forbiddenSummarizer, INPUT, ok, prepareChecked, recordingSummarizer } from './support/fixtures.ts';

/**
 * The library's own guarantee at the default policy (256 KiB): bodies over a
 * byte limit never go inline, fitting reaches into the newest groups before
 * it gives up, what is measured is the body sent, and a request that cannot
 * fit is a typed result (issue 12, defects 1, 2 and 5); summaries in any
 * script (3); hooks that never hold a request (4); open tool units named (8).
 */
const db = await createTestDatabase();
const pool = db.pool;
const scope = 'limits';
const KIB = 1024;

/** `bytes` of text in one script, with no newline (a line range would return it whole). */
function body(script: 'latin' | 'cjk' | 'emoji' | 'binary', bytes: number, tag: string): string {
  const unit = { latin: 'abcdefghij', cjk: '基金費用重疊', emoji: '📈📉💹', binary: '\u0001"\\\u001f\u007f\ufffd' }[script];
  const per = Buffer.byteLength(unit);
  return tag + unit.repeat(Math.ceil(bytes / per));
}

async function turn(runId: string, id: string, content: string, text = `calling ${id}`) {
  await recordModelTurn({ pool, runId, scope, text, toolCalls: [{ id, name: 'fetch', input: { q: `"${id}"\n\\` } }] });
  await recordToolCall({ pool, runId, scope, proposalId: id, dispatchId: `d-${id}` });
  await recordToolResult({ pool, runId, scope, proposalId: id, settlement: 'settled', content });
}

describe('the inline limit (defect 1)', () => {
  it('never shows a body over inlineResultBytes whole, in any script, even in the newest group', async () => {
    const { runId } = await startRun({ pool, scope, conversationId: await createConversation(pool, scope), request: 'Compare the funds.' });
    // 282 KB with no newline: before, a line-range reread or a length check in UTF-16 units let it inline.
    for (const [i, script] of (['cjk', 'emoji', 'binary', 'latin'] as const).entries())
      await turn(runId, `big_${i}`, body(script, 282 * KIB, `BODY-${i}-`));
    const { ok, request, report } = await prepareChecked({ pool, runId, scope, ...INPUT, summarizer: forbiddenSummarizer() });
    expect(ok).toBe(true);
    expect(report.bytes).toBeLessThanOrEqual(256 * KIB);
    const results = request.messages.filter((m) => m.kind === 'tool_result');
    expect(results).toHaveLength(4);
    for (const [i, r] of results.entries()) {
      if (r.kind !== 'tool_result') continue;
      expect(r.body).toBeUndefined();
      // Older groups by reference; the newest three by excerpt and reference.
      if (i === 0) {
        expect(r.excerpt).toBeUndefined();
        expect(r.reference!.bytes).toBeGreaterThan(282 * KIB);
        continue;
      }
      expect(Buffer.byteLength(r.excerpt!)).toBeLessThanOrEqual(2 * KIB);
      expect(r.excerpt).toMatch(/^BODY-\d-/);
      // The excerpt's reference rereads the whole body.
      const back = await readResult({
        pool,
        runId,
        scope,
        resultId: r.reference!.resultId,
        version: r.reference!.version,
        range: { bytes: { start: 0 } },
        maxBytes: 300 * KIB,
      });
      expect(back.content.startsWith(r.excerpt!.replace(/…$/, ''))).toBe(true);
    }
  });

  it('reaches into the newest groups (excerpt and reference) before it gives up', async () => {
    const { runId } = await startRun({ pool, scope, conversationId: await createConversation(pool, scope), request: 'Compare the funds.' });
    // Three groups (all "recent"), each with four bodies just under the inline limit: 384 KiB of bodies.
    for (let g = 0; g < 3; g++) {
      const ids = [0, 1, 2, 3].map((u) => `r_${g}_${u}`);
      await recordModelTurn({ pool, runId, scope, text: `group ${g}`, toolCalls: ids.map((id) => ({ id, name: 'fetch', input: {} })) });
      for (const id of ids) {
        await recordToolCall({ pool, runId, scope, proposalId: id, dispatchId: `d-${id}` });
        await recordToolResult({
          pool,
          runId,
          scope,
          proposalId: id,
          settlement: 'settled',
          content: body('latin', 32 * KIB - 100, `B-${id}-`),
        });
      }
    }
    const { ok, report } = await prepareChecked({ pool, runId, scope, ...INPUT, summarizer: forbiddenSummarizer() });
    expect(ok).toBe(true);
    expect(report.steps.map((s) => s.step)).toContain('excerpt_recent');
    expect(report.bytes).toBeLessThanOrEqual(report.targetBytes);
    // Oldest first, and only as many as needed: the newest bodies stay whole.
    expect(report.references.every((r) => r.form === 'excerpt')).toBe(true);
    expect(report.references[0]!.proposalId).toBe('r_0_0');
    expect(report.references.length).toBeLessThan(12);
  });

  it('bounds a reread by bytes, whatever range is asked for', async () => {
    const { runId } = await startRun({ pool, scope, conversationId: await createConversation(pool, scope), request: 'Read it.' });
    const stored = await storeResult({ pool, runId, scope, content: body('cjk', 300 * KIB, 'DOC-') });
    const lines = await readResult({ pool, runId, scope, ...stored, range: { lines: { from: 1, to: 10 } } });
    expect(Buffer.byteLength(lines.content)).toBeLessThanOrEqual(32 * KIB);
    expect(lines.truncated).toBe(true);
    // The way on ends where the lines asked for end (here the end of the one line, the whole body).
    expect(lines.next).toEqual({ bytes: { start: Buffer.byteLength(lines.content), end: stored.bytes } });
    const next = await readResult({ pool, runId, scope, ...stored, range: lines.next! });
    expect(next.range).toMatchObject({ kind: 'bytes', start: Buffer.byteLength(lines.content) });
    expect(Buffer.byteLength(next.content)).toBeLessThanOrEqual(32 * KIB);
    const whole = await readResult({ pool, runId, scope, ...stored });
    expect(whole.truncated).toBe(true);
    expect(Buffer.byteLength(whole.content)).toBeLessThanOrEqual(32 * KIB);
  });

  it('returns a typed cannot_fit naming what holds the bytes, never a request to send', async () => {
    const { runId } = await startRun({
      pool,
      scope,
      conversationId: await createConversation(pool, scope),
      request: `Keep every word. ${'a verbatim instruction, '.repeat(12_000)}`,
    });
    await turn(runId, 'c1', 'small');
    const prepared = await prepareRunRequest({ pool, runId, scope, ...INPUT, summarizer: recordingSummarizer() });
    expect(prepared.ok).toBe(false);
    if (prepared.ok) return;
    expect(prepared.request).toBeNull();
    expect(prepared.body).toBeNull();
    expect(prepared.cannotFit.holders[0]).toMatchObject({ what: 'protected_originals' });
    expect(prepared.cannotFit.holders.reduce((n, h) => n + h.bytes, 0)).toBe(prepared.cannotFit.bytes);
    expect(prepared.report.reason).toMatch(/^cannot_fit: .*most held by protected_originals \d+/);
    expect(prepared.cannotFit.bytes).toBe(
      Buffer.byteLength(JSON.stringify(toAnthropicRequest(prepared.cannotFit.unsent))) + prepared.cannotFit.unsent.responseReserveBytes,
    );
  });
});

describe('the measure (defect 2)', () => {
  it('is the exact UTF-8 length of the body sent, with escaping in catalog labels, tool inputs and bodies', async () => {
    const { runId } = await buildRun(pool, { scope, groups: 6, turnBytes: 3000, resultBytes: 9000, unitsPerGroup: 2 });
    for (let i = 0; i < 30; i++)
      await storeResult({ pool, runId, scope, content: `doc ${i}`, label: `label "${i}" \\ with\nnewline\u0001 and 基金` });
    await turn(runId, 'esc', body('binary', 20 * KIB, 'ESC-'));
    for (const policy of [{}, { targetBytes: 40 * KIB, thresholdBytes: 48 * KIB }]) {
      // prepareChecked throws unless report.bytes is the body's exact size plus the reserve.
      const { report, request } = await prepareChecked({ pool, runId, scope, ...INPUT, policy });
      expect(report.bytes).toBe(Buffer.byteLength(JSON.stringify(toAnthropicRequest(request))) + request.responseReserveBytes);
    }
  });
});

describe('user text (defect 5)', () => {
  it('refuses an empty or whitespace-only request or correction with a typed error, and the database refuses it too', async () => {
    const conversationId = await createConversation(pool, scope);
    for (const blank of ['', ' ', '\n\t', '\u3000\u00a0\ufeff']) {
      await expect(startRun({ pool, scope, conversationId, request: blank })).rejects.toBeInstanceOf(BlankTextError);
    }
    const { runId } = await startRun({ pool, scope, conversationId, request: 'Compare the funds.' });
    for (const blank of ['', ' ', '\u2028\u3000']) {
      await expect(recordCorrection({ pool, runId, scope, text: blank })).rejects.toBeInstanceOf(BlankTextError);
    }
    await expect(
      pool.query(`insert into sourcebound.run_turns (run_id, kind, revision, text) values ($1, 'correction', 1, ' \u3000 ')`, [runId]),
    ).rejects.toMatchObject({ code: '23514' });
    // Nothing blank was recorded: every later request is still valid.
    const { request } = await prepareChecked({ pool, runId, scope, ...INPUT });
    const texts = toAnthropicRequest(request)
      .messages.flatMap((m) => m.content)
      .filter((b) => b.type === 'text');
    expect(texts.every((b) => b.type === 'text' && b.text.trim() !== '')).toBe(true);
  });
});

describe('summaries in any script (defect 3)', () => {
  it('tells the summarizer a character limit it can obey in the script of its material, and commits an obedient CJK summary', async () => {
    const conversationId = await createConversation(pool, scope);
    const { runId } = await startRun({ pool, scope, conversationId, request: '比較してください。' });
    for (let g = 0; g < 12; g++)
      await turn(runId, `cjk_${g}`, body('cjk', 3000, `結果${g}`), `第${g}段：${'基金の重複と費用を調べる。'.repeat(180)}`);
    // An obedient model: exactly as many characters as it was told, all CJK (3 bytes each).
    const summarizer = recordingSummarizer((req) => ok('長'.repeat(req.maxChars!)));
    const policy = {
      thresholdBytes: 48 * KIB,
      targetBytes: 40 * KIB,
      minSavingBytes: 1024,
      keepRecentGroups: 2,
      responseReserveBytes: 1024,
    };
    const { report } = await prepareChecked({ pool, runId, scope, ...INPUT, summarizer, policy });
    const c = report.compactions[0]!;
    expect(c.summaryMaxChars).toBe(Math.floor(c.summaryAllowance! / 3));
    expect(c.decision).toBe('committed');
    expect(c.summaryBytes).toBeLessThanOrEqual(c.summaryAllowance!);
    expect(summarizer.calls[0]!.maxChars).toBe(c.summaryMaxChars);
    expect(report.fits).toBe(true);
  });

  it('keeps the whole allowance in characters for Latin material', async () => {
    const { runId } = await buildRun(pool, { scope, groups: 12, turnBytes: 2500, resultBytes: 100, request: 'Compare the funds.' });
    const summarizer = recordingSummarizer((req) => ok('s'.repeat(Math.min(req.maxChars!, 300))));
    const { report } = await prepareChecked({
      pool,
      runId,
      scope,
      ...INPUT,
      summarizer,
      policy: { thresholdBytes: 24 * KIB, targetBytes: 20 * KIB, minSavingBytes: 1024, keepRecentGroups: 2, responseReserveBytes: 1024 },
    });
    const c = report.compactions[0]!;
    expect(c.summaryMaxChars).toBeGreaterThanOrEqual(Math.floor(c.summaryAllowance! / 2));
  });
});

describe('an open tool unit (defect 8)', () => {
  it('is named as the reason nothing after it is compacted, is listed by recovery, and once settled compaction goes on', async () => {
    const { runId } = await buildRun(pool, { scope, groups: 2, turnBytes: 2500, resultBytes: 100, request: 'Compare the funds.' });
    // A crash between recording the turn and dispatching its call: the unit stays proposed.
    await recordModelTurn({ pool, runId, scope, text: 'z'.repeat(2500), toolCalls: [{ id: 'lost', name: 'search', input: { q: 1 } }] });
    for (let g = 0; g < 10; g++) await turn(runId, `after_${g}`, 'r'.repeat(100), 'w'.repeat(2500));
    const summarizer = recordingSummarizer();
    const policy = {
      thresholdBytes: 24 * KIB,
      targetBytes: 20 * KIB,
      minSavingBytes: 1024,
      keepRecentGroups: 2,
      responseReserveBytes: 1024,
      summaryCapBytes: 800,
      minSummaryBytes: 64,
    };
    const blocked = await prepareChecked({ pool, runId, scope, ...INPUT, summarizer, policy });
    expect(blocked.ok).toBe(false);
    expect(blocked.report.compaction.reason).toMatch(/^open_tool_unit:lost: tool call lost in turn \d+ is proposed, not settled/);
    const recovered = await recoverRunContext({ pool, runId, scope, ...INPUT, policy });
    expect(recovered.report.openUnits).toEqual([
      { seq: expect.any(Number), proposalId: 'lost', tool: 'search', status: 'proposed', dispatchId: null },
    ]);
    // The application settles it after the crash (it may have run: unknown).
    await recordToolResult({
      pool,
      runId,
      scope,
      proposalId: 'lost',
      dispatchId: 'd-lost',
      settlement: 'unknown',
      error: 'lost in a crash',
    });
    const after = await prepareChecked({ pool, runId, scope, ...INPUT, summarizer, policy });
    expect(after.ok).toBe(true);
    expect(after.report.compactions.some((c) => c.decision === 'committed')).toBe(true);
    expect((await recoverRunContext({ pool, runId, scope, ...INPUT, policy })).report.openUnits).toEqual([]);
  });
});

describe('hooks (defect 4)', () => {
  it('never hold a summary request: a slow hook causes no false unknown and no second request for one identity', async () => {
    const { runId } = await buildRun(pool, { scope, groups: 12, turnBytes: 2500, resultBytes: 100, request: 'Compare the funds.' });
    const policy = {
      thresholdBytes: 24 * KIB,
      targetBytes: 20 * KIB,
      minSavingBytes: 1024,
      keepRecentGroups: 2,
      responseReserveBytes: 1024,
      summaryCapBytes: 800,
      minSummaryBytes: 64,
      summaryDeadlineMs: 1000,
      leaseGraceMs: 200,
    };
    let inFlight = 0;
    let most = 0;
    const summarizer = recordingSummarizer(async (_req, n) => {
      most = Math.max(most, ++inFlight);
      inFlight--;
      return ok(`Summary ${n}.`);
    });
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const seen: string[] = [];
    // The hook is far slower than the deadline and the lease.
    const hooks = {
      onBeforeCompaction: async (o: { phase: string }) => {
        seen.push(o.phase);
        await held;
      },
    };
    const first = prepareRunRequest({ pool, runId, scope, ...INPUT, summarizer, policy, hooks, hookTimeoutMs: 60_000 });
    // The first preparer's summary request is sent and settled while its hook still runs.
    const settled = async () =>
      (
        await pool.query(`select count(*)::int as n from sourcebound.run_summary_requests where run_id = $1 and status <> 'dispatched'`, [
          runId,
        ])
      ).rows[0].n > 0;
    for (let i = 0; i < 100 && !(await settled()); i++) await new Promise((r) => setImmediate(r));
    // Another preparer, its clock far past the first receipt's lease.
    const other = await prepareRunRequest({ pool, runId, scope, ...INPUT, summarizer, policy, clock: () => Date.now() + 60_000 });
    release();
    const done = await first;
    expect(seen).toEqual(['before']);
    expect(done.report.hookErrors).toEqual([]);
    expect(other.report.expiredReceipts).toEqual([]);
    const { rows } = await pool.query(
      `select status, attempt from sourcebound.run_summary_requests where run_id = $1 order by dispatched_at`,
      [runId],
    );
    expect(rows.every((r) => r.status === 'ok' && r.attempt === 1)).toBe(true);
    expect(most).toBe(1);
  });

  it('bounds a hook that never returns', async () => {
    const { runId } = await buildRun(pool, { scope, groups: 12, turnBytes: 2500, resultBytes: 100, request: 'Compare the funds.' });
    const policy = {
      thresholdBytes: 24 * KIB,
      targetBytes: 20 * KIB,
      minSavingBytes: 1024,
      keepRecentGroups: 2,
      responseReserveBytes: 1024,
      summaryCapBytes: 800,
      minSummaryBytes: 64,
    };
    const { report } = await prepareRunRequest({
      pool,
      runId,
      scope,
      ...INPUT,
      summarizer: recordingSummarizer(),
      policy,
      hooks: { onAfterCompaction: () => new Promise<void>(() => {}) },
      hookTimeoutMs: 50,
    });
    expect(report.compaction.decision).toBe('committed');
    expect(report.hookErrors).toEqual(['onAfterCompaction: still running after 50 ms; not waited for']);
  });
});
