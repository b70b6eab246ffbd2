import { describe, expect, it } from 'vitest';
import { CACHE_PRICES, expectedTurns, ledgerAllows, requestCost, rewritePays, savedBefore, wholeHistoryCost } from '../../src/projection/index.ts';

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

  it('the ledger: a layout saves the reads of what it leaves out on every request that extends it', () => {
    const ledger = { savedCost: -500, savesBytes: 20_000, endPair: 40 };
    // The request that made the layout (count 40) and the next one (41, which extends it) add nothing
    // before them; each request after that saved a read of 20,000 bytes.
    expect(savedBefore(ledger, 40)).toBe(-500);
    expect(savedBefore(ledger, 41)).toBe(-500);
    expect(savedBefore(ledger, 44)).toBeCloseTo(-500 + 3 * 20_000 * CACHE_PRICES.read);
    expect(savedBefore(null, 44)).toBe(0);
    // The whole history on a turn that extends the previous one: its older bytes read, the newest exchange written.
    expect(wholeHistoryCost(30_000, 1000)).toBeCloseTo(29_000 * CACHE_PRICES.read + 1000 * CACHE_PRICES.write);
    expect(wholeHistoryCost(500, 1000)).toBeCloseTo(500 * CACHE_PRICES.write);
  });

  it('a rewrite that is not forced is taken only while the ledger stays in credit after paying for it', () => {
    // Writing 30,000 bytes where the whole history would read 40,000 and write 1,000.
    const cost = requestCost({ read: 0, written: 30_000, uncached: 0 });
    const wholeCost = wholeHistoryCost(41_000, 1000);
    const needed = cost - wholeCost;
    expect(ledgerAllows({ saved: 0, wholeCost, cost })).toBe(false);
    expect(ledgerAllows({ saved: needed - 1, wholeCost, cost })).toBe(false);
    expect(ledgerAllows({ saved: needed, wholeCost, cost })).toBe(true);
    // A rewrite cheaper than the whole history's request needs no savings.
    expect(ledgerAllows({ saved: 0, wholeCost, cost: wholeCost - 1 })).toBe(true);
  });
});
