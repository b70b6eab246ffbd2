import type pg from 'pg';

/**
 * Every statement a pool's connections send, timed as the client sees it
 * (from the call to the result), while recording is on. For the benchmarks'
 * breakdowns only (P2b): where a call's time goes, statement by statement,
 * and what is left outside them (JavaScript, the pool's checkout).
 *
 * Installed before the pool opens its first connection (it wraps `query` of
 * each new client). While recording is off the wrapper only tests a flag.
 */
export interface TimedStatement {
  /** The statement's kind: a sourcebound function's name, or the first words of its text. */
  kind: string;
  ms: number;
  /** Rows returned (or affected). */
  rows: number;
  /** The statement as sent, with its parameters (to run it again, e.g. under EXPLAIN ANALYZE). */
  text: string;
  values: readonly unknown[];
}

export interface StatementTimer {
  /** Starts a new recording (drops what the last one held). */
  start(): void;
  /** Stops recording; the statements sent since start(), in order. */
  stop(): TimedStatement[];
}

export function timeStatements(pool: pg.Pool): StatementTimer {
  let recording: TimedStatement[] | null = null;
  pool.on('connect', (client) => {
    const original = client.query as (...args: unknown[]) => unknown;
    (client as { query: unknown }).query = function wrapped(this: pg.ClientBase, ...args: unknown[]): unknown {
      const into = recording;
      if (into === null) return original.apply(this, args);
      const first = args[0] as string | { text?: string } | undefined;
      const text = typeof first === 'string' ? first : (first?.text ?? '');
      const values = (Array.isArray(args[1]) ? args[1] : (first as { values?: unknown[] } | undefined)?.values) ?? [];
      const t0 = performance.now();
      const done = (result: { rowCount?: number | null; rows?: unknown[] } | undefined) => {
        into.push({ kind: kindOf(text), ms: performance.now() - t0, rows: result?.rowCount ?? result?.rows?.length ?? 0, text, values });
      };
      // pg.Pool#query passes a callback; a checked-out client is awaited.
      const callbackAt = args.findIndex((a) => typeof a === 'function');
      if (callbackAt >= 0) {
        const callback = args[callbackAt] as (error: unknown, result: unknown) => void;
        args[callbackAt] = (error: unknown, result: { rowCount?: number | null } | undefined) => {
          done(result);
          callback(error, result);
        };
        return original.apply(this, args);
      }
      const returned = original.apply(this, args) as Promise<{ rowCount?: number | null }> | undefined;
      returned?.then(done, () => done(undefined));
      return returned;
    };
  });
  return {
    start: () => {
      recording = [];
    },
    stop: () => {
      const out = recording ?? [];
      recording = null;
      return out;
    },
  };
}

/** `projection_pairs_page` for `select * from sourcebound.projection_pairs_page(...)`; `begin`, `rollback`, `insert into sourcebound.projection_layouts`... */
function kindOf(text: string): string {
  const fn = /sourcebound\.(\w+)\s*\(/.exec(text);
  if (fn) return fn[1]!;
  const into = /^\s*(insert into|update|delete from)\s+([\w.]+)/i.exec(text);
  if (into) return `${into[1]!.toLowerCase()} ${into[2]}`;
  return text.trim().split(/\s+/).slice(0, 2).join(' ').toLowerCase();
}
