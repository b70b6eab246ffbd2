import pg from 'pg';

/** One statement and its parameters. */
export type Statement = [sql: string, params?: unknown[]];

export interface TwoTransactionsOptions {
  /**
   * Awaited once `second` is sent and before `first` commits, with the second
   * session's client: e.g. until it waits on a lock `first` holds, so the
   * order is known rather than guessed. (Default: none)
   */
  whileSecondRuns?: (second: pg.Client) => Promise<void>;
}

/**
 * Two sessions race on one conversation, each in its own transaction:
 * `first` runs, `second` starts (and may block on the locks `first` took),
 * `first` commits, then `second` completes and commits. What the triggers must
 * survive: two writers crossing a threshold at the same time.
 */
export async function inTwoTransactions(
  connectionString: string,
  first: Statement,
  second: Statement,
  options: TwoTransactionsOptions = {},
): Promise<void> {
  const a = new pg.Client({ connectionString });
  const b = new pg.Client({ connectionString });
  await Promise.all([a.connect(), b.connect()]);
  try {
    await Promise.all([a.query('begin'), b.query('begin')]);
    await a.query(...first);
    // b blocks on a's conversation lock until a commits, then counts a's write.
    const bDone = b.query(...second);
    await options.whileSecondRuns?.(b);
    await a.query('commit');
    await bDone;
    await b.query('commit');
  } finally {
    await Promise.all([a.end(), b.end()]);
  }
}
