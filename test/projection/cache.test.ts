import { describe, expect, it } from 'vitest';
import { CACHE_PRICES, FILL_RATIO, lowWaterBytes, requestCost, roomBytes } from '../../src/projection/index.ts';

describe('the prompt-cache price model (src/projection/cache.ts)', () => {
  it('prices a request by what it reads, writes and sends uncached', () => {
    expect(requestCost({ read: 1000, written: 100, uncached: 10 })).toBeCloseTo(1000 * CACHE_PRICES.read + 100 * CACHE_PRICES.write + 10);
  });

  it('a rewrite fills three quarters of the budget and leaves the rest as room for the turns to come', () => {
    for (const budget of [0, 1, 7, 1000, 16 * 1024, 2 ** 31 - 1]) {
      expect(lowWaterBytes(budget)).toBe(Math.min(budget, Math.ceil(FILL_RATIO * budget)));
      expect(lowWaterBytes(budget) + roomBytes(budget)).toBe(budget);
      expect(roomBytes(budget)).toBeGreaterThanOrEqual(0);
    }
  });
});
