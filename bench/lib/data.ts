import { existsSync } from 'node:fs';
import { DEMO_DATA, readThreads, type Thread } from '../../src/cli/demo-threads.ts';

/** The real conversations (oasst1, Apache-2.0; /work/shared/data/README.md). */
export const SHARED_THREADS = '/work/shared/data/oasst1-threads.jsonl';

export interface Dataset {
  threads: Thread[];
  /** Where they came from, and whether it is the fallback. */
  source: string;
  /** Every pair of every thread, in file order: texts of real sizes for synthetic loads. */
  pairs: { user: string; assistant: string }[];
}

let cached: Dataset | undefined;

/** The 100 shared threads, or the demo sample when /work/shared is missing (said so in `source`). */
export function dataset(): Dataset {
  if (cached) return cached;
  const shared = existsSync(SHARED_THREADS);
  const path = shared ? SHARED_THREADS : DEMO_DATA;
  const threads = readThreads(path);
  const source = shared
    ? `${path} (${threads.length} threads)`
    : `${path} (${threads.length} threads; FALLBACK: ${SHARED_THREADS} is missing)`;
  cached = { threads, source, pairs: threads.flatMap((t) => t.pairs) };
  return cached;
}

/** The i-th text pair of the pool, cycling. */
export function textAt(i: number): { user: string; assistant: string } {
  const { pairs } = dataset();
  return pairs[((i % pairs.length) + pairs.length) % pairs.length]!;
}
