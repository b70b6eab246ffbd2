import { rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { openDatabase } from '../../src/db/database.ts';
import { freePort } from '../../src/db/embedded.ts';
import { silentLogger } from '../../src/support/logger.ts';
import { createTestDatabase } from '../support/db.ts';
import { spawnSourcebound } from '../support/processes.ts';

/**
 * Closing the database ends its connections before anything else: a CLI
 * command against the embedded server used to stop the server while its pool's
 * clients were still closing (pg-pool's end() resolves once it has asked them
 * to), so their backends were terminated under them and each client logged
 * "terminating connection due to administrator command" on the way out.
 */
const db = await createTestDatabase();

describe('closing the database', () => {
  it('returns once every connection of the pool is gone from the server', async () => {
    const database = await openDatabase({ databaseUrl: db.url, dataDir: '/nonexistent', embeddedPort: 1 }, silentLogger, 5);
    // The clients connected from here on (openDatabase's own check made the first).
    const connected = new Set<unknown>();
    const closed = new Set<unknown>();
    database.pool.on('connect', (client) => {
      connected.add(client);
      client.once('end', () => closed.add(client));
    });
    // Five clients at once, so the pool holds five connections when it is closed.
    const pids = (
      await Promise.all(
        Array.from({ length: 5 }, () => database.pool.query<{ pid: number }>('select pg_backend_pid() as pid, pg_sleep(0.05)')),
      )
    ).map((r) => r.rows[0]!.pid);
    expect(new Set(pids).size).toBe(5);
    expect(connected.size).toBeGreaterThanOrEqual(4);
    await database.close();
    // Every socket had closed when close() returned (before, only their end had been asked for) ...
    expect(closed.size).toBe(connected.size);
    // ... and the server has let go of their backends.
    const { rows } = await db.pool.query<{ n: number }>('select count(*)::int as n from pg_stat_activity where pid = any($1::int[])', [
      pids,
    ]);
    expect(rows[0]!.n).toBe(0);
  });

  it('a CLI command against the embedded server exits without a terminated connection in its output', async () => {
    // Not a mkdtemp folder: the server runs as `postgres` when we are root and must reach the data folder's parent.
    const home = join(tmpdir(), `sourcebound-cli-close-${process.pid}-${Date.now()}`);
    afterAll(() => rm(home, { recursive: true, force: true }));
    const env = { SOURCEBOUND_DATA_DIR: join(home, 'pgdata'), SOURCEBOUND_EMBEDDED_PORT: String(await freePort()), LOG_LEVEL: 'debug' };
    for (const args of [['migrate'], ['enqueue', '00000000-0000-4000-8000-000000000000', '--scope', 's']]) {
      const cli = spawnSourcebound(args, env);
      const code = await cli.exited;
      const output = `${JSON.stringify(cli.logs)}\n${cli.stderr}`;
      expect(code, output.slice(-3000)).toBe(args[0] === 'migrate' ? 0 : 1);
      // At debug level the server's own log is in the output too: a backend it had to terminate shows there.
      expect(cli.logs.some((l) => l.msg === 'embedded PostgreSQL started')).toBe(true);
      expect(output).not.toMatch(/terminating connection/i);
    }
  }, 180_000);
});
