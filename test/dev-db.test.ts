import { existsSync } from 'node:fs';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { freePort } from '../src/db/embedded.ts';
import { beginTurn, completeTurn } from '../src/turns/index.ts';
import { spawnSourcebound, type WorkerProcess } from './support/processes.ts';

/**
 * `sourcebound dev-db` runs the embedded PostgreSQL as a server of its own:
 * it prints the URL, outlives the workers and apps that use it, and stops on
 * SIGTERM. A data folder already in use is named with the URL of the server
 * using it, not answered with advice to change the port. Every process here
 * is a real CLI process (node, tsx registered in-process, so signals reach it).
 */
const folders: string[] = [];
const children: WorkerProcess[] = [];
afterAll(async () => {
  for (const c of children) if (c.child.exitCode === null && c.child.signalCode === null) c.child.kill('SIGKILL');
  await Promise.all(children.map((c) => c.exited));
  await Promise.all(folders.map((f) => rm(f, { recursive: true, force: true })));
});

/** A fresh data folder under a folder others may enter (as root the server runs as `postgres`). */
async function dataFolder(): Promise<string> {
  const parent = await mkdtemp(join(tmpdir(), 'sourcebound-devdb-'));
  await chmod(parent, 0o755);
  folders.push(parent);
  return join(parent, 'pgdata');
}

function cli(args: string[], env: Record<string, string>): WorkerProcess {
  const child = spawnSourcebound(args, env);
  children.push(child);
  return child;
}

async function answers(url: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5000 });
  client.on('error', () => {});
  try {
    await client.connect();
    await client.query('select 1');
    return true;
  } catch {
    return false;
  } finally {
    await client.end().catch(() => {});
  }
}

describe('sourcebound dev-db', () => {
  it('prints a DATABASE_URL to a migrated server that outlives a worker using it, refuses a second owner, and stops on SIGTERM', async () => {
    const dataDir = await dataFolder();
    const port = await freePort();
    const env = { SOURCEBOUND_DATA_DIR: dataDir, SOURCEBOUND_EMBEDDED_PORT: String(port) };
    const devDb = cli(['dev-db'], env);
    const line = await devDb.waitForLog((l) => l.msg.startsWith('DATABASE_URL='), 120_000);
    const url = line.msg.slice('DATABASE_URL='.length);
    expect(url).toBe(`postgres://postgres:sourcebound@127.0.0.1:${port}/postgres`);

    // Migrated: an app writes a turn at once.
    const pool = new pg.Pool({ connectionString: url, max: 2 });
    try {
      const turn = await beginTurn({ pool, scope: 'dev', userText: 'hello' });
      await completeTurn({ pool, scope: 'dev', runId: turn.runId, assistantText: 'hi' });
      expect((await pool.query('select count(*)::int as n from sourcebound.pairs')).rows[0].n).toBe(1);
    } finally {
      await pool.end();
    }

    // A worker with DATABASE_URL unset and the same folder and port uses the running server, and leaves it running.
    const worker = cli(['worker', '--no-migrate'], env);
    await worker.waitForLog((l) => l.msg === 'worker started', 60_000);
    expect(worker.logs.some((l) => l.msg === 'using the embedded PostgreSQL already running')).toBe(true);
    worker.child.kill('SIGTERM');
    expect(await worker.exited).toBe(0);
    expect(await answers(url)).toBe(true);

    // A second dev-db on the folder, and anything else pointed at it on another port: the URL to use, exit 1.
    const inUse = `the data folder ${dataDir} is in use by the embedded PostgreSQL another process started`;
    const second = cli(['dev-db'], env);
    expect(await second.exited).toBe(1);
    expect(second.stderr).toContain(`sourcebound dev-db: ${inUse}`);
    expect(second.stderr).toContain(`Use that server: DATABASE_URL=${url}`);
    const otherPort = await freePort();
    const migrate = cli(['migrate'], { ...env, SOURCEBOUND_EMBEDDED_PORT: String(otherPort) });
    expect(await migrate.exited).toBe(1);
    expect(migrate.stderr).toContain(`sourcebound migrate: ${inUse} (server pid `);
    expect(migrate.stderr).toContain(
      `port ${port}, not ${otherPort} as SOURCEBOUND_EMBEDDED_PORT says). Use that server: DATABASE_URL=${url}`,
    );
    expect(migrate.stderr).not.toContain('free port');
    expect(await answers(url)).toBe(true);

    devDb.child.kill('SIGTERM');
    expect(await devDb.exited).toBe(0);
    expect(devDb.logs.at(-1)?.msg).toBe('sourcebound dev-db: stopped (SIGTERM).');
    expect(await answers(url)).toBe(false);
    expect(existsSync(join(dataDir, 'postmaster.pid'))).toBe(false);
  }, 240_000);

  it("two dev-db at once on a new folder: one runs it, the other names its URL (it got initdb's or the port's error)", async () => {
    const dataDir = await dataFolder();
    const port = await freePort();
    const env = { SOURCEBOUND_DATA_DIR: dataDir, SOURCEBOUND_EMBEDDED_PORT: String(port) };
    const both = [cli(['dev-db', '--no-migrate'], env), cli(['dev-db', '--no-migrate'], env)];
    const loser = await Promise.race(both.map((p) => p.exited.then(() => p)));
    const winner = both.find((p) => p !== loser)!;
    expect(await loser.exited, loser.stderr).toBe(1);
    expect(loser.stderr).toContain(`the data folder ${dataDir} is in use by the embedded PostgreSQL another process started`);
    expect(loser.stderr).toContain(`DATABASE_URL=postgres://postgres:sourcebound@127.0.0.1:${port}/postgres`);
    await winner.waitForLog((l) => l.msg.startsWith('DATABASE_URL='), 120_000);
    winner.child.kill('SIGINT');
    expect(await winner.exited).toBe(0);
    expect(existsSync(join(dataDir, '..', '.pgdata.starting'))).toBe(false);
  }, 240_000);

  it("two workers starting it at once on a new folder: one waits and uses the other's server (one failed on initdb or the lock file, advised to change the port)", async () => {
    const dataDir = await dataFolder();
    const env = { SOURCEBOUND_DATA_DIR: dataDir, SOURCEBOUND_EMBEDDED_PORT: String(await freePort()) };
    const both = [cli(['worker'], env), cli(['worker'], env)];
    await Promise.all(both.map((w) => w.waitForLog((l) => l.msg === 'worker started', 120_000)));
    const reusing = both.filter((w) => w.logs.some((l) => l.msg === 'using the embedded PostgreSQL already running'));
    expect(reusing).toHaveLength(1);
    // The one using the other's server stops first: the owner stops the server when it exits.
    const owner = both.find((w) => w !== reusing[0])!;
    reusing[0]!.child.kill('SIGTERM');
    expect(await reusing[0]!.exited).toBe(0);
    owner.child.kill('SIGTERM');
    expect(await owner.exited).toBe(0);
    expect(existsSync(join(dataDir, 'postmaster.pid'))).toBe(false);
  }, 240_000);
});
