/**
 * The worker's checks of its database, named noun-first: is it there (one
 * round trip), is it the same server (its start time), is it migrated (the
 * schemas exist). Each takes the connection it runs on; the probe keeps its
 * own, so a busy pool never looks like a dead database.
 */
import type { Queryable } from '../queryable.ts';

/** One round trip. @throws when PostgreSQL does not answer. */
export async function selectOne(db: Queryable): Promise<void> {
  await db.query('select 1');
}

/** The server's start time (`pg_postmaster_start_time()`), as text: another value means it restarted or failed over. */
export async function serverStartTimeRead(db: Queryable): Promise<string> {
  const { rows } = await db.query<{ startedAt: string }>('select pg_postmaster_start_time()::text as "startedAt"');
  return rows[0]!.startedAt;
}

/** Which of the schemas a worker needs (graphile_worker's, sourcebound's) do not exist, in that order. */
export async function missingSchemasList(db: Queryable): Promise<string[]> {
  const {
    rows: [found],
  } = await db.query<{ missing: string[] }>(
    `select array_remove(array[
       case when to_regnamespace('graphile_worker') is null then 'graphile_worker' end,
       case when to_regnamespace('sourcebound') is null then 'sourcebound' end], null) as missing`,
  );
  return found!.missing;
}
