import type pg from 'pg';
import type { Figure } from './report.ts';
import type { TimedStatement } from './statements.ts';
import { percentile, spread } from './stats.ts';

/**
 * Where a request-path call's time goes (P2b): its p50 split into the round
 * trip every statement pays (`select 1` on the same pool), the server's
 * execution of the projection's statement (EXPLAIN ANALYZE of the very
 * statement and parameters it sent: the function runs whole, output not
 * included), what is left of the statement as the client sees it (sending
 * and parsing the rows), and the JavaScript around it. Beside it, the plain
 * read's own server execution, the floor the projection is compared with.
 * Statements are run again here, interleaved, after the measured rounds.
 */
export interface SplitCall {
  ms: number;
  statements: TimedStatement[];
}

export async function requestSplit(
  pool: pg.Pool,
  label: string,
  calls: readonly SplitCall[],
  plain: { text: string; values: readonly unknown[] },
): Promise<{ note: string; short: string; figures: Figure[] }> {
  const p50 = (xs: number[]) =>
    percentile(
      [...xs].sort((a, b) => a - b),
      50,
    );
  const main = calls.map((c) =>
    c.statements.reduce((best, s) => (best === null || s.ms > best.ms ? s : best), null as TimedStatement | null),
  );
  const sent = main.find((s) => s !== null) ?? null;
  const roundTrip: number[] = [];
  const server: number[] = [];
  const plainServer: number[] = [];
  for (let i = 0; i < calls.length; i++) {
    const t0 = performance.now();
    await pool.query('select 1');
    roundTrip.push(performance.now() - t0);
    if (sent !== null) server.push(await executionMs(pool, sent.text, sent.values));
    plainServer.push(await executionMs(pool, plain.text, plain.values));
  }
  const total = p50(calls.map((c) => c.ms));
  const statement = p50(main.map((s) => s?.ms ?? 0));
  const js = p50(calls.map((c) => c.ms - c.statements.reduce((n, s) => n + s.ms, 0)));
  const rt = p50(roundTrip);
  const srv = p50(server);
  const plainSrv = p50(plainServer);
  const rest = Math.max(0, statement - rt - srv);
  const note =
    `${label}, the split (p50 of ${calls.length} calls): ${total.toFixed(2)} ms a call = round trip ${rt.toFixed(3)} ms (select 1) ` +
    `+ ${sent?.kind ?? 'its statement'} on the server ${srv.toFixed(3)} ms (EXPLAIN ANALYZE; the plain read's: ${plainSrv.toFixed(3)} ms) ` +
    `+ sending and parsing the rows ${rest.toFixed(3)} ms + JavaScript and pool ${js.toFixed(3)} ms` +
    `${calls[0]!.statements.length > 1 ? ` (and ${calls[0]!.statements.length - 1} more statements)` : ''}.`;
  return {
    note,
    short: `split: round trip ${rt.toFixed(2)}, server ${srv.toFixed(2)} (plain ${plainSrv.toFixed(2)}), rows ${rest.toFixed(2)}, JS ${js.toFixed(2)} ms`,
    figures: [
      { label: `${label}: round trip (select 1), p50`, unit: 'ms', value: spread([rt]) },
      { label: `${label}: projection statement, server execution (EXPLAIN ANALYZE), p50`, unit: 'ms', value: spread([srv]) },
      { label: `${label}: plain read, server execution (EXPLAIN ANALYZE), p50`, unit: 'ms', value: spread([plainSrv]) },
      {
        label: `${label}: projection statement, sending and parsing its rows (client time less round trip and server), p50`,
        unit: 'ms',
        value: spread([rest]),
      },
    ],
  };
}

/** Execution and planning time of a statement as the server reports it (EXPLAIN ANALYZE, timing off). */
async function executionMs(pool: pg.Pool, text: string, values: readonly unknown[]): Promise<number> {
  const { rows } = await pool.query<{ 'QUERY PLAN': [{ 'Execution Time': number; 'Planning Time': number }] }>(
    `explain (analyze, timing off, format json) ${text}`,
    values as unknown[],
  );
  const plan = rows[0]!['QUERY PLAN'][0];
  return plan['Execution Time'] + plan['Planning Time'];
}
