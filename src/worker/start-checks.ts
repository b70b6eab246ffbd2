import type pg from 'pg';
import { missingSchemasList } from '../db/queries/server.ts';
import type { Summarizer } from '../support/summary-contract.ts';
import { WorkerStartError } from './worker-errors.ts';

/**
 * With migrations skipped (`--no-migrate`), the schemas must be there: a
 * worker on an unmigrated database would look healthy while every job and
 * sweep failed. @throws WorkerStartError naming what to run.
 */
export async function assertMigrated(pool: pg.Pool): Promise<void> {
  const missing = (await missingSchemasList(pool)).map((m) => `"${m}"`);
  if (missing.length > 0) {
    throw new WorkerStartError(
      `the database is not migrated (${missing.length > 1 ? `schemas ${missing.join(' and ')} do` : `schema ${missing[0]} does`} not exist): ` +
        'run `sourcebound migrate` first (or start the worker without --no-migrate)',
    );
  }
}

/** A summarizer handed in by code must be one: a model identity and a summarize function. @throws WorkerStartError */
export function assertSummarizer(value: unknown): asserts value is Summarizer {
  const s = value as Partial<Summarizer> | null;
  if (s === null || typeof s !== 'object' || typeof s.summarize !== 'function' || typeof s.model !== 'string' || s.model.trim() === '') {
    throw new WorkerStartError(
      'the summarizer given to the worker is not one: it needs a non-empty `model` (the identity its summaries record) and a `summarize(request)` function',
    );
  }
}
