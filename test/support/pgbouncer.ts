import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir, userInfo } from 'node:os';
import { delimiter, join } from 'node:path';
import pg from 'pg';
import { freePort } from '../../src/db/embedded.ts';

/**
 * A real PgBouncer (Debian's package, 1.18) on a free 127.0.0.1 port in
 * `pool_mode = transaction` in front of a PostgreSQL server, the way Supabase,
 * Neon and friends put one in front of theirs. Few server connections
 * (`default_pool_size`) serve many clients, so every session-scoped feature
 * that leaks through it (named prepared statements, LISTEN, session advisory
 * locks) actually breaks here, as it does in production.
 *
 * Starting it never skips: when the binary is missing or it does not listen,
 * this throws with the reason (and `.ci/run` installs it).
 */
export interface PgBouncer {
  port: number;
  /** The server URL's database `name`, through PgBouncer. */
  url(name: string): string;
  /** Server connections PgBouncer holds for `name` (SHOW SERVERS), to prove clients are multiplexed. */
  serverConnections(name: string): Promise<number>;
  /**
   * Runs one command on PgBouncer's admin console (`PAUSE <db>`, `RESUME <db>`, `SET ...`).
   * `PAUSE` returns once PgBouncer let go of the database's server connections; from then on
   * every query on it waits (a pooler that hangs, not one that refuses) until `RESUME`.
   */
  admin(command: string): Promise<void>;
  /** Its log so far (stderr). */
  log(): string;
  stop(): Promise<void>;
}

export function pgbouncerBinary(): string | null {
  const dirs = [...(process.env.PATH ?? '').split(delimiter), '/usr/sbin', '/usr/bin', '/usr/local/sbin', '/usr/local/bin'];
  for (const dir of dirs) {
    if (dir && existsSync(join(dir, 'pgbouncer'))) return join(dir, 'pgbouncer');
  }
  return null;
}

export async function startPgBouncer(options: { serverUrl: string; poolSize?: number }): Promise<PgBouncer> {
  const binary = pgbouncerBinary();
  if (binary === null) {
    throw new Error(
      'pgbouncer is not installed (looked in PATH and /usr/sbin): run `apt-get install -y pgbouncer` (.ci/run does this when it is absent)',
    );
  }
  const server = new URL(options.serverUrl);
  const port = await freePort();
  const folder = mkdtempSync(join(tmpdir(), 'sourcebound-pgbouncer-'));
  // PgBouncer refuses to run as root; it then runs as `postgres`, which must read the folder.
  chmodSync(folder, 0o755);
  const target = [
    `host=${server.hostname}`,
    `port=${server.port || '5432'}`,
    `user=${decodeURIComponent(server.username || 'postgres')}`,
    ...(server.password ? [`password=${decodeURIComponent(server.password)}`] : []),
  ].join(' ');
  const ini = join(folder, 'pgbouncer.ini');
  writeFileSync(
    ini,
    [
      '[databases]',
      // Any database name the client asks for, on the one server.
      `* = ${target}`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      'unix_socket_dir =',
      // Clients are not authenticated (the test server is local); PgBouncer logs in to the server as `user`.
      'auth_type = any',
      'pool_mode = transaction',
      `default_pool_size = ${options.poolSize ?? 6}`,
      'max_client_conn = 1000',
      'admin_users = postgres',
      'stats_users = postgres',
      'ignore_startup_parameters = extra_float_digits',
      // After a failed server login PgBouncer waits this long before the next one (default 15 s):
      // across a PostgreSQL restart that wait, not the server, would decide how soon work resumes.
      'server_login_retry = 1',
      'logfile =',
      'pidfile =',
      '',
    ].join('\n'),
  );
  chmodSync(ini, 0o644);

  const asRoot = userInfo().uid === 0;
  const child: ChildProcess = spawn(binary, [...(asRoot ? ['-u', 'postgres'] : []), ini], { stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  child.stdout!.setEncoding('utf8').on('data', (c: string) => {
    log += c;
  });
  child.stderr!.setEncoding('utf8').on('data', (c: string) => {
    log += c;
  });
  const exited = new Promise<number | string>((resolve) => child.on('exit', (code, signal) => resolve(code ?? signal ?? 'unknown')));
  let exitedWith: number | string | null = null;
  void exited.then((c) => {
    exitedWith = c;
  });

  const base = new URL(options.serverUrl);
  base.host = `127.0.0.1:${port}`;
  const url = (name: string) => {
    const u = new URL(base);
    u.pathname = `/${name}`;
    return u.toString();
  };

  const deadline = Date.now() + 10_000;
  for (;;) {
    if (exitedWith !== null) {
      rmSync(folder, { recursive: true, force: true });
      throw new Error(`pgbouncer exited (${exitedWith}) before listening on port ${port}: ${log.trim().slice(-2000)}`);
    }
    if (await answers(url('postgres'))) break;
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      rmSync(folder, { recursive: true, force: true });
      throw new Error(`pgbouncer did not answer on port ${port} within 10 s: ${log.trim().slice(-2000)}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }

  return {
    port,
    url,
    async serverConnections(name: string) {
      const admin = new pg.Client({ connectionString: url('pgbouncer') });
      await admin.connect();
      try {
        // The admin console speaks the simple protocol only.
        const result = (await admin.query({ text: 'SHOW SERVERS', rowMode: 'array' } as pg.QueryConfig)) as unknown as pg.QueryResult<
          unknown[]
        >;
        const dbColumn = result.fields.findIndex((f) => f.name === 'database');
        return result.rows.filter((r) => r[dbColumn] === name).length;
      } finally {
        await admin.end();
      }
    },
    async admin(command: string) {
      const admin = new pg.Client({ connectionString: url('pgbouncer') });
      await admin.connect();
      try {
        await admin.query({ text: command, rowMode: 'array' } as pg.QueryConfig);
      } finally {
        await admin.end();
      }
    },
    log: () => log,
    async stop() {
      if (exitedWith === null) {
        child.kill('SIGINT');
        const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
        await exited;
        clearTimeout(timer);
      }
      rmSync(folder, { recursive: true, force: true });
    },
  };
}

async function answers(connectionString: string): Promise<boolean> {
  const client = new pg.Client({ connectionString, connectionTimeoutMillis: 1000 });
  client.on('error', () => {});
  try {
    await client.connect();
    await client.query('select 1');
    await client.end();
    return true;
  } catch {
    await client.end().catch(() => {});
    return false;
  }
}
