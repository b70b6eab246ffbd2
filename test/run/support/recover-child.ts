/**
 * Cold recovery in its own process (test/run/support/soak.ts): rebuilds the
 * Run's next request from records alone and prints the sha256 and UTF-8
 * bytes of the body, one JSON line.
 */
import { createHash } from 'node:crypto';
import pg from 'pg';
import { recoverRunContext } from '../../../src/run/index.ts';

const [url, runId, scope, inputJson] = process.argv.slice(2) as [string, string, string, string];
const pool = new pg.Pool({ connectionString: url, max: 2 });
try {
  const { body } = await recoverRunContext({ pool, runId, scope, ...JSON.parse(inputJson) });
  const json = JSON.stringify(body);
  process.stdout.write(
    `${JSON.stringify({ sha256: createHash('sha256').update(json, 'utf8').digest('hex'), bytes: Buffer.byteLength(json) })}\n`,
  );
} finally {
  await pool.end();
}
