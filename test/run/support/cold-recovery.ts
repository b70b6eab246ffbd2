/**
 * recoverRunContext in a fresh process (test/run/support/recover-child.ts): nothing of the
 * preparing process is shared but the database.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const RECOVER_CHILD = fileURLToPath(new URL('./recover-child.ts', import.meta.url));

/** The sha256 and UTF-8 bytes of the body a cold process rebuilds; `input` is spread into recoverRunContext's options (model, system, tools, policy). */
export async function recoverInColdProcess(
  url: string,
  runId: string,
  scope: string,
  input: unknown,
): Promise<{ sha256: string; bytes: number }> {
  const child = spawn(process.execPath, ['--import', 'tsx', RECOVER_CHILD, url, runId, scope, JSON.stringify(input)], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (err += d));
  const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
  if (code !== 0) throw new Error(`recover child exited ${code}: ${err}`);
  return JSON.parse(out.trim()) as { sha256: string; bytes: number };
}
