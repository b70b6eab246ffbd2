import { inject } from 'vitest';

/**
 * The PostgreSQL server for admission tests (advisory locks need no schema,
 * so the server's maintenance database will do): the shared harness's
 * `adminUrl` (test/support/global-setup.ts) when it provides one, else
 * DATABASE_URL, else a local server.
 */
export function databaseUrl(): string {
  return inject('adminUrl') ?? process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
}

let next = 0;

/**
 * A fresh advisory-lock namespace for one test. Each test file passes its own
 * base, so files running in parallel against one server never share a lock.
 */
export function namespaceFor(fileBase: number): number {
  return fileBase + next++;
}
