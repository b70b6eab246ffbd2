import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { createTestDatabase } from '../support/db.ts';
import { behaviours, startMessagesServer } from '../support/messages-server.ts';
import { startPgBouncer } from '../support/pgbouncer.ts';
import { spawnSourcebound, type WorkerProcess } from '../support/processes.ts';

/**
 * Production topology, a pooler that hangs: PgBouncer in transaction mode with
 * the database PAUSEd (its admin console; `query_wait_timeout = 0`, so queries
 * wait forever) answers every connection and never a query. The worker gives
 * up after SOURCEBOUND_RECOVERY_TIMEOUT_MS as when the server is gone, but
 * stopping now hangs on the database too (graphile-worker's runner.stop(), the
 * pool's sockets): the process must still exit 1, within the shutdown deadline
 * of the give-up, and say at error that it did so without a clean stop.
 */
const db = await createTestDatabase();
const bouncer = await startPgBouncer({ serverUrl: db.adminUrl, poolSize: 6 });
await bouncer.admin('SET query_wait_timeout = 0');
const dbName = new URL(db.url).pathname.slice(1);
const server = await startMessagesServer();
const running: WorkerProcess[] = [];
afterEach(async () => {
  for (const w of running.splice(0)) {
    w.child.kill('SIGKILL');
    await w.exited;
  }
});
afterAll(async () => {
  await server.close();
  await bouncer.stop();
});

const RECOVERY_MS = 3000;
const SHUTDOWN_MS = 2000;
/** The exit's allowance past the shutdown deadline (the CLI's own margin plus a busy machine). */
const MARGIN_MS = 4000;
/** A probe query that hangs counts after this long (src/worker/supervisor.ts PROBE_TIMEOUT_MS): the recovery's last check can run this late. */
const PROBE_TIMEOUT_MS = 5000;

describe('behind a PgBouncer that hangs (PAUSE)', () => {
  it('a worker that gives up exits 1 within the shutdown deadline, saying at error it did not stop cleanly, and does not linger', async () => {
    server.setDefault(behaviours.echo());
    const w = spawnSourcebound(['worker', '--no-migrate'], {
      DATABASE_URL: bouncer.url(dbName),
      DATABASE_DIRECT_URL: db.url,
      ANTHROPIC_API_KEY: server.apiKey,
      ANTHROPIC_BASE_URL: server.url,
      SOURCEBOUND_FLEET_CONCURRENCY: '0',
      SOURCEBOUND_POLL_INTERVAL_MS: '200',
      SOURCEBOUND_RECOVERY_TIMEOUT_MS: String(RECOVERY_MS),
      SOURCEBOUND_SHUTDOWN_TIMEOUT_MS: String(SHUTDOWN_MS),
    });
    running.push(w);
    let exitedAt = 0;
    void w.exited.then(() => {
      exitedAt = Date.now();
    });
    const context = () => `stderr: ${w.stderr.slice(-3000)}\nlast logs: ${JSON.stringify(w.logs.slice(-12))}`;
    // Processes loading TypeScript on a loaded two-core machine took over a minute to start.
    await w.waitForLog((l) => l.msg === 'worker started', 120_000);
    try {
      await bouncer.admin(`PAUSE ${dbName}`);
      // The probe's hanging queries time out twice, then a new session cannot answer either.
      const lost = await w.waitForLog((l) => l.msg.startsWith('worker lost its database'), 60_000);
      const lostAt = Date.now();
      const gaveUp = await w.waitForLog((l) => /could not start again within 3000 ms/.test(l.msg), RECOVERY_MS + PROBE_TIMEOUT_MS + 10_000);
      const gaveUpAt = Date.now();
      expect(lost.level).toBe(50);
      expect(gaveUp.level).toBe(50);
      // Before the fix: "worker stopped" only after the retired runner's whole call grace
      // (about 2.5 minutes with the defaults), then the process stayed until RESUME.
      const code = await Promise.race([
        w.exited,
        new Promise<string>((r) => setTimeout(() => r('still running'), SHUTDOWN_MS + MARGIN_MS + 10_000)),
      ]);
      expect(code, context()).toBe(1);
      expect(exitedAt - gaveUpAt, context()).toBeLessThan(SHUTDOWN_MS + MARGIN_MS);
      expect(exitedAt - lostAt, context()).toBeLessThan(RECOVERY_MS + PROBE_TIMEOUT_MS + SHUTDOWN_MS + MARGIN_MS);
      // Gone: no process left holding the pooler's sockets.
      expect(w.child.exitCode ?? w.child.signalCode, context()).toBe(1);
      expect(() => process.kill(w.child.pid!, 0)).toThrow();
      // The last line says, at error, that it exits without a clean stop (flushed before the exit).
      const last = w.logs.at(-1)!;
      expect(last.level, context()).toBe(50);
      expect(last.msg, context()).toMatch(/without a clean stop/);
      // No crash beside it (Node prints its version after an uncaught error).
      expect(w.stderr, context()).not.toMatch(/Node\.js v\d|Unhandled|uncaught/i);
    } finally {
      await bouncer.admin(`RESUME ${dbName}`);
    }
  }, 240_000);
});
