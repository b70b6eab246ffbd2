/**
 * What the sessions of a fleet say about its workers. A worker's sessions
 * carry its summarizer identity in `application_name` (src/gateway/fleet-models.ts),
 * which pg_stat_activity shows to every role: no table, nothing to clean up
 * after a worker dies (its sessions go with it).
 */
import type { Queryable } from '../queryable.ts';

/** The distinct `application_name`s of this database's sessions that start with `prefix`. */
export async function sessionApplicationNamesList(db: Queryable, prefix: string): Promise<string[]> {
  const { rows } = await db.query<{ name: string }>(
    `select distinct application_name as name from pg_stat_activity
     where datname = current_database() and starts_with(application_name, $1)`,
    [prefix],
  );
  return rows.map((r) => r.name);
}
