import { defineConfig } from 'vitest/config';

/**
 * `npm run test:topology`: the production topology suite (test/topology/),
 * kept out of `npm test` because it needs a system program beside Node: a
 * real PgBouncer (Debian's `pgbouncer` package; `.ci/run` installs it) in
 * front of the test database. Same database setup as `npm test`: each file
 * clones its own database from the migrated template.
 */
export default defineConfig({
  test: {
    include: ['test/topology/**/*.test.ts'],
    globalSetup: ['test/support/global-setup.ts'],
    pool: 'forks',
    maxWorkers: 2,
    testTimeout: 60_000,
    hookTimeout: 120_000,
  },
});
