import pg from 'pg';
import { afterAll, inject } from 'vitest';
import { withDatabase } from '../../src/db/database.ts';

export interface TestDatabase {
  /** Connection string of this file's own database. */
  url: string;
  pool: pg.Pool;
  /** The server's maintenance connection string (for pg_terminate_backend and the like). */
  adminUrl: string;
}

let counter = 0;

/**
 * A fresh database cloned from the migrated template, dropped after the file's
 * tests. Call it in a test file's top level or beforeAll.
 */
export async function createTestDatabase(): Promise<TestDatabase> {
  const adminUrl = inject('adminUrl');
  const name = `${inject('runPrefix')}${process.pid}_${counter++}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    await createFromTemplate(admin, name, inject('templateDb'));
  } finally {
    await admin.end();
  }
  const url = withDatabase(adminUrl, name);
  const pool = new pg.Pool({ connectionString: url, max: 10 });
  pool.on('error', () => {});
  afterAll(async () => {
    await pool.end();
    const cleanup = new pg.Client({ connectionString: adminUrl });
    await cleanup.connect();
    await cleanup.query(`drop database if exists ${name} with (force)`);
    await cleanup.end();
  });
  return { url, pool, adminUrl };
}

async function createFromTemplate(admin: pg.Client, name: string, template: string): Promise<void> {
  // Cloning fails while another session is connected to the template (a
  // concurrent clone's brief check connection): retry a few times.
  for (let attempt = 0; ; attempt++) {
    try {
      await admin.query(`create database ${name} template ${template}`);
      return;
    } catch (error) {
      if (attempt >= 20 || (error as { code?: string }).code !== '55006') throw error;
      await new Promise((r) => setTimeout(r, 50 * (attempt + 1)));
    }
  }
}
