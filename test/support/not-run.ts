import { readdirSync } from 'node:fs';

/**
 * `npm test` runs what needs Node alone (PostgreSQL comes embedded). Suites
 * that need more have their own command; this says so once at the end of the
 * run, so a green `npm test` is never taken for the whole of them.
 */
const SEPARATE = [
  { folder: 'topology', why: 'they need the system program pgbouncer', command: 'npm run test:topology' },
  { folder: 'faults', why: 'about 5 minutes of real worker processes', command: 'npm run test:faults' },
];

export default function setup() {
  return () => {
    const parts = SEPARATE.map(({ folder, why, command }) => {
      const files = readdirSync(new URL(`../${folder}/`, import.meta.url)).filter((f) => f.endsWith('.test.ts')).length;
      return `test/${folder}/ (${files} files; ${why}): \`${command}\``;
    });
    process.stdout.write(`\nNot run by \`npm test\`: ${parts.join('; ')}.\n`);
  };
}
