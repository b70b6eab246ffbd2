import type { BenchServer } from './server.ts';

/** What every benchmark gets from bench/run.ts. */
export interface BenchContext {
  server: BenchServer;
  /** --full: larger sizes and more repetitions. */
  full: boolean;
  /** Progress line on stderr (the table goes to stdout). */
  log(message: string): void;
}
