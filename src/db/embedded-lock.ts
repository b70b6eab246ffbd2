import { open, readFile, rm, stat } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { ConfigError } from '../support/config.ts';
import type { Logger } from '../support/logger.ts';

/**
 * Who is using an embedded PostgreSQL data folder, across processes. Two
 * processes starting the embedded server in one folder at once (a worker and
 * the app, two test runs, `dev-db` and a worker) used to race: both ran
 * initdb, or both started a server, and the loser failed with PostgreSQL's
 * `lock file "postmaster.pid" already exists` and the advice to change the
 * port, when the fix was to wait for the other or to use its server.
 */

/** The PostgreSQL server running in a data folder, read from its `postmaster.pid`. */
export interface DataFolderHolder {
  pid: number;
  port: number;
  /** `starting`, `ready`, `stopping` or `standby` (PostgreSQL's own words), or '' when not written yet. */
  status: string;
}

/**
 * The live server that holds `dataDir`, or null. PostgreSQL writes
 * postmaster.pid (pid, data folder, start time, port, ..., status) when it
 * starts and removes it when it stops; a file left by a killed server names a
 * dead process, or a process that is no longer a postgres (its pid reused).
 */
export async function dataFolderHolder(dataDir: string): Promise<DataFolderHolder | null> {
  const text = await readFile(join(dataDir, 'postmaster.pid'), 'utf8').catch(() => null);
  if (text === null) return null;
  const lines = text.split('\n');
  const pid = Number(lines[0]);
  const port = Number(lines[3]);
  if (!Number.isSafeInteger(pid) || pid <= 0 || !(await isPostgresProcess(pid))) return null;
  return { pid, port: Number.isSafeInteger(port) ? port : 0, status: (lines[7] ?? '').trim() };
}

async function isPostgresProcess(pid: number): Promise<boolean> {
  if (!isAlive(pid)) return false;
  // Linux names the program; elsewhere a live pid is taken at its word, as PostgreSQL itself does.
  const name = await readFile(`/proc/${pid}/comm`, 'utf8').catch(() => null);
  return name === null || name.trim().startsWith('postgres');
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: it exists, owned by another user (the `postgres` user, when this process is not root).
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** How often a process waiting for another one's start looks again. */
const POLL_MS = 100;

/**
 * Takes the start lock of `dataDir`: a file beside it, created exclusively,
 * holding this process's pid. Only its holder checks, initialises and starts
 * the folder's server; another process waits here, and then finds that
 * server running. A lock whose process is gone is taken over.
 * @returns the release function.
 * @throws ConfigError when another live process holds it for longer than `timeoutMs`.
 */
export async function acquireStartLock(dataDir: string, logger: Logger, timeoutMs: number): Promise<() => Promise<void>> {
  const path = join(dirname(dataDir), `.${basename(dataDir)}.starting`);
  const deadline = Date.now() + timeoutMs;
  let told = false;
  for (;;) {
    try {
      const file = await open(path, 'wx');
      await file.writeFile(String(process.pid));
      await file.close();
      return () => rm(path, { force: true });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
    const holder = Number((await readFile(path, 'utf8').catch(() => '')).trim());
    const known = Number.isSafeInteger(holder) && holder > 0;
    // No pid yet: its holder is between creating and writing the file, or died there (then the file stays old).
    const age = Date.now() - ((await stat(path).catch(() => null))?.mtimeMs ?? Date.now());
    if (known ? !isAlive(holder) : age > 5000) {
      await rm(path, { force: true });
      continue;
    }
    if (Date.now() > deadline) {
      throw new ConfigError(
        `another process (pid ${holder}) has been starting the embedded PostgreSQL in ${dataDir} for ${Math.round(timeoutMs / 1000)} s. ` +
          `Wait for it and use its server, or stop that process (and remove ${path} if it is not a sourcebound process).`,
      );
    }
    if (!told) {
      logger.info({ dataDir, pid: holder }, 'waiting for another process starting the embedded PostgreSQL in this data folder');
      told = true;
    }
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}

/**
 * Waits until the server holding the folder is ready (it may be starting),
 * up to `timeoutMs`; the holder as it is then (null if it stopped).
 */
export async function readyHolder(dataDir: string, timeoutMs: number): Promise<DataFolderHolder | null> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const holder = await dataFolderHolder(dataDir);
    if (holder === null || holder.status === 'ready' || Date.now() > deadline) return holder;
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}
