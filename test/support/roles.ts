import pg from 'pg';
import { afterAll } from 'vitest';
import type { TestDatabase } from './db.ts';

/**
 * Login roles that are members of the runtime roles a deployment uses
 * (sourcebound_app, sourcebound_worker, sourcebound_reader), for probing the
 * trust boundaries as they are and never as the owner. Roles are the
 * server's, not the database's: their names carry the process and the time,
 * and after the file's tests their pools are ended, `beforeDrop` runs and the
 * roles are dropped.
 */
export interface RuntimeRoles {
  names: { app: string; worker: string; reader: string };
  password: string;
  urlAs(role: string): string;
  /** A pool of `role` (ended after the file's tests). */
  poolAs(role: string): pg.Pool;
}

export async function createRuntimeRoles(
  db: TestDatabase,
  prefix: string,
  options: { beforeDrop?: () => Promise<unknown> } = {},
): Promise<RuntimeRoles> {
  const suffix = `${process.pid}_${Date.now() % 100000}`;
  const password = 'probe-secret';
  const names = { app: `${prefix}_app_${suffix}`, worker: `${prefix}_worker_${suffix}`, reader: `${prefix}_reader_${suffix}` };
  for (const [group, role] of [
    ['sourcebound_app', names.app],
    ['sourcebound_worker', names.worker],
    ['sourcebound_reader', names.reader],
  ]) {
    await db.pool.query(`create role ${role} login password '${password}' in role ${group}`);
  }
  const pools: pg.Pool[] = [];
  const urlAs = (role: string) => {
    const u = new URL(db.url);
    u.username = role;
    u.password = password;
    return u.toString();
  };
  afterAll(async () => {
    await Promise.all(pools.map((p) => p.end()));
    await options.beforeDrop?.();
    for (const role of Object.values(names)) {
      await db.pool.query(`drop owned by ${role}`).catch(() => {});
      await db.pool.query(`drop role if exists ${role}`).catch(() => {});
    }
  });
  return {
    names,
    password,
    urlAs,
    poolAs(role) {
      const pool = new pg.Pool({ connectionString: urlAs(role), max: 4 });
      pool.on('error', () => {});
      pools.push(pool);
      return pool;
    },
  };
}
