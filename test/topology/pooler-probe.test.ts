import { afterAll, describe, expect, it } from 'vitest';
import { sharesServerSessions } from '../../src/db/pooler-probe.ts';
import { createTestDatabase } from '../support/db.ts';
import { startPgBouncer } from '../support/pgbouncer.ts';

/**
 * The probe that keeps session work (LISTEN, session locks, migrations) off a
 * transaction pooler, against a real PgBouncer in transaction mode and the
 * same database reached directly.
 */
const db = await createTestDatabase();
const bouncer = await startPgBouncer({ serverUrl: db.adminUrl, poolSize: 6 });
const pooledUrl = bouncer.url(new URL(db.url).pathname.slice(1));
afterAll(() => bouncer.stop());

describe('sharesServerSessions', () => {
  it('is true through PgBouncer in transaction mode, every time', async () => {
    for (let i = 0; i < 10; i++) expect(await sharesServerSessions(pooledUrl)).toBe(true);
  });

  it('is false for the database reached directly, every time', async () => {
    for (let i = 0; i < 10; i++) expect(await sharesServerSessions(db.url)).toBe(false);
  });
});
