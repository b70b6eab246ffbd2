import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PARTS_DIR, readScenarioFigures, renderMarkdown, RESULTS_DIR } from './figures.ts';

/**
 * Global setup of the fault suite (after test/support/global-setup.ts):
 * clears the previous run's part files; at teardown joins the scenarios'
 * figures into results/latest.{md,json} (latest-full.* with FAULTS_FULL=1,
 * partial.* when only some scenarios ran) and prints the table.
 */

/** Scenario files in test/faults (01-, 01b-, 02- ... 08-). */
const SCENARIO_COUNT = 9;

export default function setup() {
  const started = Date.now();
  rmSync(PARTS_DIR, { recursive: true, force: true });
  mkdirSync(PARTS_DIR, { recursive: true });
  return () => {
    const scenarios = readScenarioFigures();
    if (scenarios.length === 0) return;
    const meta = {
      wallSeconds: (Date.now() - started) / 1000,
      size: process.env.FAULTS_FULL === '1' ? 'full' : 'quick',
      date: new Date().toISOString().slice(0, 16).replace('T', ' ') + ' UTC',
    };
    const markdown = renderMarkdown(scenarios, meta);
    // A run of some scenarios only (a file filter) must not replace the full table.
    // Full sizes keep their own file, so a quick run does not replace the full figures.
    const name = scenarios.length < SCENARIO_COUNT ? 'partial' : meta.size === 'full' ? 'latest-full' : 'latest';
    writeFileSync(join(RESULTS_DIR, `${name}.md`), markdown);
    writeFileSync(join(RESULTS_DIR, `${name}.json`), `${JSON.stringify({ ...meta, scenarios }, null, 2)}\n`);
    rmSync(PARTS_DIR, { recursive: true, force: true });
    process.stdout.write(`\n${markdown}\n`);
  };
}
