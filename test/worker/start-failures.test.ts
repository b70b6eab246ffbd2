import { createServer, type Server } from 'node:net';
import pg from 'pg';
import { afterAll, afterEach, describe, expect, inject, it } from 'vitest';
import { withDatabase } from '../../src/db/database.ts';
import { createTestDatabase } from '../support/db.ts';
import { addPairs, createConversation } from '../support/fixtures.ts';
import { spawnSourcebound, type WorkerProcess } from '../support/processes.ts';

/**
 * A worker that cannot start must say why in one line and exit 1 before it
 * takes a job (DESIGN: "exits non-zero if it cannot, never hangs"): its
 * /healthz and /metrics port cannot be opened, or (with --no-migrate) the
 * database was never migrated.
 */
const db = await createTestDatabase();
const running: WorkerProcess[] = [];
afterEach(async () => {
  for (const w of running.splice(0)) {
    if (w.child.exitCode === null && w.child.signalCode === null) w.child.kill('SIGKILL');
    await w.exited;
  }
});

/** The exit code, or 'hung' when the process is still running after `ms`. */
async function exitWithin(w: WorkerProcess, ms: number): Promise<number | string> {
  let timer: NodeJS.Timeout | undefined;
  const result = await Promise.race([
    w.exited,
    new Promise<string>((resolve) => {
      timer = setTimeout(() => resolve('hung'), ms);
    }),
  ]);
  clearTimeout(timer);
  return result;
}

function worker(env: Record<string, string>, url = db.url): WorkerProcess {
  const w = spawnSourcebound(['worker', '--no-migrate'], {
    DATABASE_URL: url,
    SOURCEBOUND_POLL_INTERVAL_MS: '200',
    SOURCEBOUND_FLEET_CONCURRENCY: '0',
    ...env,
  });
  running.push(w);
  return w;
}

describe('a worker that cannot start exits 1 with one line, taking no job', () => {
  let taken: Server | undefined;
  afterAll(() => new Promise<void>((resolve) => (taken ? taken.close(() => resolve()) : resolve())));

  it('SOURCEBOUND_METRICS_PORT in use, or SOURCEBOUND_METRICS_HOST that does not resolve', async () => {
    // A port another process listens on.
    taken = createServer();
    await new Promise<void>((resolve) => taken!.listen(0, '127.0.0.1', resolve));
    const port = (taken.address() as { port: number }).port;
    // A job waiting to be taken: the conversation crossed 30 pairs.
    const c = await createConversation(db.pool);
    await addPairs(db.pool, c, 30);
    const jobs = async () =>
      (
        await db.pool.query<{ locked: boolean; attempts: number }>(
          `select locked_at is not null as locked, attempts from graphile_worker.jobs where task_identifier = 'compact_conversation'`,
        )
      ).rows;
    expect(await jobs()).toEqual([{ locked: false, attempts: 0 }]);

    for (const [env, where, why] of [
      [{ SOURCEBOUND_METRICS_PORT: String(port) }, `127.0.0.1:${port}`, 'the port is already in use (EADDRINUSE)'],
      [
        { SOURCEBOUND_METRICS_PORT: '0', SOURCEBOUND_METRICS_HOST: 'no-such-host.invalid' },
        'no-such-host.invalid:0',
        'the host name does not resolve',
      ],
    ] as const) {
      const w = worker(env);
      // Before: "worker started", a stack trace, and a process that never exits with its runner taking jobs.
      expect(await exitWithin(w, 30_000)).toBe(1);
      const lines = w.stderr.trim().split('\n');
      expect(lines).toHaveLength(1);
      expect(lines[0]).toContain(
        `sourcebound worker: cannot serve /healthz and /metrics on ${where} (SOURCEBOUND_METRICS_HOST, SOURCEBOUND_METRICS_PORT): ${why}`,
      );
      expect(w.logs.map((l) => l.msg)).not.toContain('worker started');
      expect(w.logs.some((l) => /Worker connected and looking for jobs/.test(l.msg))).toBe(false);
    }
    // No job was claimed, tried or failed; no summary record was made.
    expect(await jobs()).toEqual([{ locked: false, attempts: 0 }]);
    const {
      rows: [records],
    } = await db.pool.query('select count(*)::int as n from sourcebound.conversation_summaries where conversation_id = $1', [c]);
    expect(records.n).toBe(0);
  });

  it('--no-migrate on a database never migrated: one line telling to run `sourcebound migrate`; the other commands add that hint', async () => {
    const adminUrl = inject('adminUrl');
    const name = `${inject('runPrefix')}empty_${process.pid}`;
    const admin = new pg.Client({ connectionString: adminUrl });
    await admin.connect();
    await admin.query(`create database ${name}`);
    try {
      const url = withDatabase(adminUrl, name);
      const w = worker({ SOURCEBOUND_METRICS_PORT: '0' }, url);
      // Before: "worker started", /healthz 200, and the sweep failing every minute.
      expect(await exitWithin(w, 30_000)).toBe(1);
      expect(w.stderr).toBe(
        'sourcebound worker: the database is not migrated (schemas "graphile_worker" and "sourcebound" do not exist): ' +
          'run `sourcebound migrate` first (or start the worker without --no-migrate)\n',
      );
      expect(w.logs.map((l) => l.msg)).not.toContain('worker started');

      const id = '00000000-0000-4000-8000-000000000000';
      for (const args of [
        ['inspect', id, '--scope', 's'],
        ['project', id, '--scope', 's', '--budget', '1000'],
        ['enqueue', id, '--scope', 's'],
        ['repair', id, '--scope', 's'],
      ]) {
        const cli = spawnSourcebound(args, { DATABASE_URL: url });
        running.push(cli);
        expect(await exitWithin(cli, 30_000), args[0]).toBe(1);
        expect(cli.stderr, args[0]).toMatch(
          new RegExp(
            `^sourcebound ${args[0]}: the database refused: .* does not exist \\(SQLSTATE (42P01|3F000)\\); is the database migrated\\? run \`sourcebound migrate\` first\\n$`,
          ),
        );
      }
    } finally {
      await admin.query(`drop database if exists ${name} with (force)`);
      await admin.end();
    }
  });
});
