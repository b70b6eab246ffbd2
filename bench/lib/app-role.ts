import { benchClient } from './server.ts';

/**
 * The application's condition, beside the owner's (P1, P2, P2b): sessions
 * that are `sourcebound_app` on a database with row security on, each naming
 * the scope it works in (`sourcebound.scope`). The owner's condition is the
 * benchmark's own connection as before: the owner bypasses row security, so
 * it measures what it measured before the roles existed, and the two can run
 * interleaved on the same database with row security on throughout.
 *
 * The sessions become the role and name the scope in their startup packet
 * (`options=-c role=... -c sourcebound.scope=...`), so every connection of a
 * pool is the app's from its first statement, and RESET ALL would not undo it.
 * Row security is per table, hence per database: it cannot reach another
 * benchmark's database; `close()` switches it off again all the same (call it
 * in a finally), and revokes the one membership it may have granted.
 */
export interface AppRole {
  /** A connection string whose sessions are `sourcebound_app` with `sourcebound.scope` set. */
  url: string;
  /** Row security off again (ours and `tables`'), any membership granted here revoked; safe to call twice. */
  close(): Promise<void>;
}

const ROLE = 'sourcebound_app';

/**
 * The goal of each figure measured both ways: as the app / as the owner,
 * median of the per-round ratios (docs/benchmarks.md, "P1, P2, P2b as the
 * app role with row security", says why this bound).
 */
export const APP_GOAL = 1.15;

/**
 * Turns row security on in the database at `ownerUrl` (as its owner) and
 * returns the app's connection string. `tables`: the benchmark's own tables
 * (an application's, with their own policies) to switch with sourcebound's.
 * @throws Error when the role does not exist (the migration needs CREATEROLE to make it).
 */
export async function appRole(ownerUrl: string, scope: string, tables: readonly string[] = []): Promise<AppRole> {
  // A startup option's value ends at a space; a scope the benchmarks choose never has one.
  if (!/^[\w.-]+$/.test(scope)) throw new RangeError(`appRole: scope ${JSON.stringify(scope)} must be letters, digits, '.', '-' or '_'`);
  const owner = await benchClient(ownerUrl);
  let granted = false;
  let on = false;
  const close = async () => {
    try {
      if (on) {
        await owner.query('select sourcebound.row_security(false)');
        for (const t of tables) await owner.query(`alter table ${t} disable row level security`);
        on = false;
      }
      if (granted) {
        await owner.query(`revoke ${ROLE} from current_user`);
        granted = false;
      }
    } finally {
      await owner.end().catch(() => {});
    }
  };
  try {
    const {
      rows: [who],
    } = await owner.query<{ exists: boolean; member: boolean | null }>(
      `select to_regrole($1) is not null as exists,
              case when to_regrole($1) is not null then pg_has_role(current_user, $1, 'MEMBER') end as member`,
      [ROLE],
    );
    if (!who!.exists)
      throw new Error(`${ROLE} does not exist: the migrating role could not create it (needs CREATEROLE); see docs/trust-boundaries.md`);
    // A superuser may become any role; an owner that is not one needs the membership (undone by close()).
    if (!who!.member) {
      await owner.query(`grant ${ROLE} to current_user`);
      granted = true;
    }
    on = true;
    await owner.query('select sourcebound.row_security(true)');
    for (const t of tables) await owner.query(`alter table ${t} enable row level security`);
  } catch (error) {
    await close();
    throw error;
  }
  const url = new URL(ownerUrl);
  url.searchParams.set('options', `-c role=${ROLE} -c sourcebound.scope=${scope}`);
  let closed = false;
  return {
    url: url.toString(),
    async close() {
      if (closed) return;
      closed = true;
      await close();
    },
  };
}
