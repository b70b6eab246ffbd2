import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Each has its own command (the last line of the run names them): test/support/not-run.ts.
    exclude: ['test/faults/**', 'test/topology/**', 'node_modules/**'],
    globalSetup: ['test/support/global-setup.ts', 'test/support/not-run.ts'],
    pool: 'forks',
    // Two cores: two files at a time; each file has its own cloned database.
    maxWorkers: 2,
    testTimeout: 60_000,
    hookTimeout: 120_000,
  },
});
