import { describe, expect, it } from 'vitest';
import { isAlignedRange, plannableRangeCount, plannableRanges } from '../src/conversation/plan.ts';
import { createTestDatabase } from './support/db.ts';

const db = await createTestDatabase();

describe('planning', () => {
  it.each([
    [0, []],
    [29, []],
    [30, [[0, 9]]],
    [31, [[0, 9]]],
    [39, [[0, 9]]],
    [
      40,
      [
        [0, 9],
        [10, 19],
      ],
    ],
    [
      41,
      [
        [0, 9],
        [10, 19],
      ],
    ],
  ])('%i pairs -> %j', (count, ranges) => {
    expect(plannableRanges(count).map((r) => [r.fromPair, r.toPair])).toEqual(ranges);
  });

  it('1,000 pairs -> 98 ranges, the last 970-979, the newest 20 pairs never planned', () => {
    const ranges = plannableRanges(1000);
    expect(ranges).toHaveLength(98);
    expect(ranges.at(-1)).toEqual({ fromPair: 970, toPair: 979 });
    expect(ranges.every((r) => isAlignedRange(r.fromPair, r.toPair))).toBe(true);
  });

  it('every range k satisfies 10k + 9 < count - 20 and no other range does', () => {
    for (let count = 0; count <= 500; count++) {
      const planned = plannableRanges(count).length;
      for (let k = 0; k < 60; k++) expect(k < planned, `count ${count}, k ${k}`).toBe(10 * k + 9 < count - 20);
    }
  });

  it('the SQL twin used by the triggers agrees for every count up to 2,000', async () => {
    const { rows } = await db.pool.query<{ n: number; ranges: number }>(
      'select n, sourcebound.plannable_range_count(n) as ranges from generate_series(0, 2000) n',
    );
    for (const { n, ranges } of rows) expect(ranges, `count ${n}`).toBe(plannableRangeCount(n));
  });

  it('refuses a negative or fractional count', () => {
    expect(() => plannableRangeCount(-1)).toThrow(RangeError);
    expect(() => plannableRangeCount(1.5)).toThrow(RangeError);
  });

  it('only ten pairs aligned on a multiple of ten is a range', () => {
    expect(isAlignedRange(0, 9)).toBe(true);
    expect(isAlignedRange(10, 19)).toBe(true);
    expect(isAlignedRange(5, 14)).toBe(false);
    expect(isAlignedRange(10, 20)).toBe(false);
    expect(isAlignedRange(-10, -1)).toBe(false);
  });
});
