/**
 * Budget statements of run compaction: a Run's request and token limits, what is used and
 * what is reserved by summary requests in flight.
 */
import type { Queryable } from '../queryable.ts';

export interface BudgetRow {
  requestsLimit: number | null;
  tokensLimit: number | null;
  requestsUsed: number;
  tokensUsed: number;
  requestsReserved: number;
  tokensReserved: number;
}

/** Creates the Run's budget row (null limits = unlimited); keeps an existing one. */
export async function runBudgetEnsure(
  db: Queryable,
  runId: string,
  requestsLimit: number | null,
  tokensLimit: number | null,
): Promise<void> {
  await db.query(
    `insert into sourcebound.run_budgets (run_id, requests_limit, tokens_limit) values ($1, $2, $3)
     on conflict (run_id) do nothing`,
    [runId, requestsLimit, tokensLimit],
  );
}

export async function runBudgetGet(db: Queryable, runId: string): Promise<BudgetRow | null> {
  const { rows } = await db.query<BudgetRow>(
    `select requests_limit as "requestsLimit", tokens_limit::float8 as "tokensLimit", requests_used as "requestsUsed",
       tokens_used::float8 as "tokensUsed", requests_reserved as "requestsReserved", tokens_reserved::float8 as "tokensReserved"
     from sourcebound.run_budgets where run_id = $1`,
    [runId],
  );
  return rows[0] ?? null;
}

/**
 * Reserves `requests` and `tokens`, only if at least `keepRequests` and
 * `keepTokens` stay available afterwards (the finalization reserve). One
 * conditional UPDATE: two reservations can never both take the last of it.
 */
export async function runBudgetReserve(
  db: Queryable,
  runId: string,
  requests: number,
  tokens: number,
  keepRequests: number,
  keepTokens: number,
): Promise<boolean> {
  const { rowCount } = await db.query(
    `update sourcebound.run_budgets
     set requests_reserved = requests_reserved + $2, tokens_reserved = tokens_reserved + $3, updated_at = now()
     where run_id = $1
       and (requests_limit is null or requests_limit - requests_used - requests_reserved - $2 >= $4)
       and (tokens_limit is null or tokens_limit - tokens_used - tokens_reserved - $3 >= $5)`,
    [runId, requests, tokens, keepRequests, keepTokens],
  );
  return rowCount === 1;
}

/** Charges what the application's own model request used (it was already sent: never refused). */
export async function runBudgetCharge(db: Queryable, runId: string, requests: number, tokens: number): Promise<void> {
  await db.query(
    `update sourcebound.run_budgets set requests_used = requests_used + $2, tokens_used = tokens_used + $3, updated_at = now()
     where run_id = $1`,
    [runId, requests, tokens],
  );
}
