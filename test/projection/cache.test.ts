import { describe, expect, it } from 'vitest';
import { CACHE_PRICES, expectedTurns, rebuildPays, requestCost, rewritePays } from '../../src/projection/index.ts';

describe('the prompt-cache price model (src/projection/cache.ts)', () => {
  it('prices a request by what it reads, writes and sends uncached', () => {
    expect(requestCost({ read: 1000, written: 100, uncached: 10 })).toBeCloseTo(1000 * CACHE_PRICES.read + 100 * CACHE_PRICES.write + 10);
  });

  it('expects a conversation to go on about as long as it has: s ln(1 + h/s) of the next h turns', () => {
    expect(expectedTurns(10, 0)).toBe(0);
    expect(expectedTurns(0, 50)).toBe(0);
    expect(expectedTurns(10, 10)).toBeCloseTo(10 * Math.log(2));
    // Never more than the horizon; nearly all of it for an old conversation, little of it for a young one.
    expect(expectedTurns(10, 10_000)).toBeLessThan(10);
    expect(expectedTurns(10, 10_000)).toBeGreaterThan(9.99);
    expect(expectedTurns(1000, 2)).toBeLessThan(13);
  });

  it('an optional rewrite pays when the reads it saves in the expected turns exceed the write it costs now', () => {
    const base = { currentBytes: 40_000, rewrittenBytes: 30_000, unchangedBytes: 0, bytesPerTurn: 1000, turnsSoFar: 100 };
    // 10,000 bytes less on each of the turns left, against writing 30,000 bytes instead of reading 40,000.
    const costNow = 30_000 * CACHE_PRICES.write - 40_000 * CACHE_PRICES.read;
    const turnsNeeded = costNow / (10_000 * CACHE_PRICES.read);
    expect(rewritePays({ ...base, budgetBytes: 40_000 + 1000 * Math.floor(turnsNeeded) })).toBe(false);
    expect(rewritePays({ ...base, budgetBytes: 40_000 + 1000 * (turnsNeeded + 10) })).toBe(true);
    // What stays unchanged at the start is read, not written: the same swap pays sooner.
    expect(rewritePays({ ...base, unchangedBytes: 20_000, budgetBytes: 40_000 + 1000 * Math.floor(turnsNeeded) })).toBe(true);
    // Nothing saved, nothing to pay for.
    expect(rewritePays({ ...base, rewrittenBytes: 40_000, budgetBytes: 10_000_000 })).toBe(false);
  });

  it('a fresh layout replaces a cached head only when what the projection saved so far covers its extra price', () => {
    // Writing 30,000 bytes instead of reading 28,000 of them and writing 2,000.
    const extraCost = requestCost({ read: 0, written: 30_000, uncached: 0 }) - requestCost({ read: 28_000, written: 2000, uncached: 0 });
    const args = { extraCost, leftOutBytes: 20_000, leftOutPairs: 20 };
    const turns = extraCost / (20_000 * CACHE_PRICES.read);
    // A layout made last turn, leaving out few pairs (a conversation that has just outgrown the budget), has saved little.
    expect(rebuildPays({ ...args, turnsSoFar: 0 })).toBe(false);
    expect(rebuildPays({ ...args, turnsSoFar: Math.floor(turns) })).toBe(false);
    expect(rebuildPays({ ...args, turnsSoFar: Math.ceil(turns) })).toBe(true);
    // Leaving out 2t pairs, the conversation has been over the budget for about 2t turns, saving half of them on average.
    expect(rebuildPays({ ...args, leftOutPairs: 2 * Math.ceil(turns), turnsSoFar: 0 })).toBe(true);
    expect(rebuildPays({ ...args, leftOutPairs: 2 * Math.floor(turns), turnsSoFar: 0 })).toBe(false);
  });
});
