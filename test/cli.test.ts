import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { describe, expect, it } from 'vitest';
import { redact } from '../src/db/database.ts';
import { spawnSourcebound } from './support/processes.ts';

/** The CLI as a person runs it (real processes), for what every command shares. */

/** A port nothing listens on (bound, then released). */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

describe('sourcebound CLI', () => {
  it('redact() masks the userinfo password and every query parameter naming a password, secret or key', () => {
    expect(redact('postgres://postgres:S3cretPW@127.0.0.1:5999/db?password=Other')).toBe(
      'postgres://postgres:***@127.0.0.1:5999/db?password=***',
    );
    expect(
      redact(
        'postgres://app@db/app?sslmode=require&sslpassword=x%20y&application_name=a%20b&PassWord=1&client_secret=2&sslkey=/k&api%5Fkey=3&flag',
      ),
    ).toBe(
      'postgres://app@db/app?sslmode=require&sslpassword=***&application_name=a%20b&PassWord=***&client_secret=***&sslkey=***&api%5Fkey=***&flag',
    );
    expect(redact('socket:/var/run/postgresql?db=app&password=p')).toBe('socket:/var/run/postgresql?db=app&password=***');
    expect(redact('postgres://app@db:5432/app')).toBe('postgres://app@db:5432/app');
  });

  it('a password in the query of DATABASE_URL is never printed', async () => {
    const port = await closedPort();
    const url = `postgres://postgres:S3cretPW@127.0.0.1:${port}/db?password=Other&sslpassword=Third&application_name=shown`;
    const migrate = spawnSourcebound(['migrate'], { DATABASE_URL: url });
    expect(await migrate.exited).toBe(1);
    // Before: `cannot reach PostgreSQL at postgres://postgres:***@127.0.0.1:<port>/db?password=Other&sslpassword=Third...`
    expect(migrate.stderr).toBe(
      `sourcebound migrate: cannot reach PostgreSQL at postgres://postgres:***@127.0.0.1:${port}/db?password=***&sslpassword=***&application_name=shown: connect ECONNREFUSED 127.0.0.1:${port}\n`,
    );
    for (const secret of ['S3cretPW', 'Other', 'Third']) expect(JSON.stringify(migrate.logs) + migrate.stderr).not.toContain(secret);
  });

  it('LOG_LEVEL= (empty) is unset for the demo too: its warn default, no pino crash', async () => {
    const port = await closedPort();
    // Reaching the database comes after the logger: before, pino threw `default level:'' must be included in custom levels`.
    const demo = spawnSourcebound(['demo'], { DATABASE_URL: `postgres://postgres@127.0.0.1:${port}/db`, LOG_LEVEL: '' });
    expect(await demo.exited).toBe(1);
    expect(demo.stderr).toBe(
      `sourcebound demo: cannot reach PostgreSQL at postgres://postgres@127.0.0.1:${port}/db: connect ECONNREFUSED 127.0.0.1:${port}\n`,
    );
  });

  it('a numeric setting that is not plain decimal digits stops a command with a message naming it', async () => {
    const cli = spawnSourcebound(['migrate'], { DATABASE_URL: 'postgres://postgres@127.0.0.1:1/db', SOURCEBOUND_FLEET_CONCURRENCY: ' ' });
    expect(await cli.exited).toBe(1);
    expect(cli.stderr).toMatch(
      /^sourcebound migrate: invalid configuration; fix these environment variables:\n {2}SOURCEBOUND_FLEET_CONCURRENCY: must be a whole number, got ' ' \(plain decimal digits 0-9 only/,
    );
  });

  it('sourcebound --version prints the package version', async () => {
    const { version } = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string };
    const cli = spawnSourcebound(['--version'], {});
    expect(await cli.exited).toBe(0);
    expect(cli.logs.map((l) => l.msg)).toEqual([`sourcebound ${version}`]);
  });
});
