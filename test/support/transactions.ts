import pg from 'pg';

/** One statement and its parameters. */
export type Statement = [sql: string, params?: unknown[]];

/**
 * Two sessions race on one conversation, each in its own transaction:
 * `first` runs, `second` starts (and may block on the locks `first` took),
 * `first` commits, then `second` completes and commits. What the triggers must
 * survive: two writers crossing a threshold at the same time.
 */
export async function inTwoTransactions(connectionString: string, first: Statement, second: Statement): Promise<void> {
  const a = new pg.Client({ connectionString });
  const b = new pg.Client({ connectionString });
  await Promise.all([a.connect(), b.connect()]);
  try {
    await Promise.all([a.query('begin'), b.query('begin')]);
    await a.query(...first);
    // b blocks on a's conversation lock until a commits, then counts a's write.
    const bDone = b.query(...second);
    await a.query('commit');
    await bDone;
    await b.query('commit');
  } finally {
    await Promise.all([a.end(), b.end()]);
  }
}
