import { defineConfig } from 'vitest/config';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/** Scenario files are numbered (01-..., 02-...): run them in that order, not by cached duration. */
class ByName extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    return [...files].sort((a, b) => a.moduleId.localeCompare(b.moduleId));
  }
}

/**
 * `npm run test:faults`: the fault-injection suite (test/faults/README.md).
 * Real worker processes against a real PostgreSQL and a local Messages API
 * server. Files run one at a time (each scenario starts several worker
 * processes; two cores are not enough for two scenarios at once); each file
 * still clones its own database from the migrated template. FAULTS_FULL=1
 * selects the full sizes. The second global setup gathers every scenario's
 * figures into test/faults/results/latest.{md,json} and prints the table.
 */
export default defineConfig({
  test: {
    include: ['test/faults/**/*.test.ts'],
    globalSetup: ['test/support/global-setup.ts', 'test/faults/support/report.ts'],
    pool: 'forks',
    fileParallelism: false,
    maxWorkers: 1,
    sequence: { sequencer: ByName },
    testTimeout: 30 * 60_000,
    hookTimeout: 5 * 60_000,
    teardownTimeout: 120_000,
  },
});
