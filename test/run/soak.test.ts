import { describe, expect, it } from 'vitest';
import { createTestDatabase } from '../support/db.ts';
import { runSoak } from './support/soak.ts';

/**
 * The README's agent loop for 1,000 tool calls (FAULTS_FULL=1 or RUN_SOAK_CALLS:
 * 10,000), through the real SDK and the real gateway: every request measured
 * as sent and at most 256 KiB, tool units never split, originals and
 * corrections verbatim, a cold process rebuilding the next request byte for
 * byte (issue 12: the soak).
 */
const db = await createTestDatabase();
const FULL = process.env.FAULTS_FULL === '1';
const TOOL_CALLS = Number(process.env.RUN_SOAK_CALLS ?? (FULL ? 10_000 : 1_000));

describe('the run-compaction soak', () => {
  it(
    `keeps every request of ${TOOL_CALLS} tool calls under the threshold, in any script, with an unreliable summarizer`,
    async () => {
      const figures = await runSoak({
        pool: db.pool,
        url: db.url,
        toolCalls: TOOL_CALLS,
        log: process.env.RUN_SOAK_LOG ? console.log : undefined,
      });
      if (process.env.RUN_SOAK_LOG) console.log(JSON.stringify({ ...figures, failures: figures.failures.length }));
      expect(figures.failures).toEqual([]);
      expect(figures.toolCalls).toBe(TOOL_CALLS);
      expect(figures.cannotFit).toBe(0);
      expect(figures.largestRequestBytes).toBeLessThanOrEqual(256 * 1024);
      expect(figures.recoveredSame).toBe(true);
      // The soak does exercise what it claims to.
      expect(figures.checkpoints).toBeGreaterThan(0);
      expect(figures.largestResultBytes).toBeGreaterThan(250 * 1024);
      expect(Object.keys(figures.resultsByScript).sort()).toEqual(['binary', 'cjk', 'emoji', 'latin']);
      // The summarizer was asked, and was not always good (the full soak sees every kind: ok, slow, bad, down).
      expect(figures.summaryOutcomes.ok ?? 0).toBeGreaterThan(0);
      if (FULL) for (const k of ['slow', 'bad', 'down']) expect(figures.summaryOutcomes[k] ?? 0).toBeGreaterThan(0);
    },
    FULL ? 3_600_000 : 300_000,
  );
});
