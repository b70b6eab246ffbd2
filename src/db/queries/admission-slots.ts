/**
 * The fleet-wide admission slots (gateway/fleet-locks.ts), named noun-first:
 * a slot is a session advisory lock (namespace, slot) on the admission's own
 * connection, so a slot frees itself when that connection dies; a release
 * notifies the channel every waiting process listens on.
 */
import type { Queryable } from '../queryable.ts';

/** Listens on the admission channel (a quoted identifier: the name is ours, never user input). */
export async function admissionChannelListen(db: Queryable, channel: string): Promise<void> {
  await db.query(`LISTEN "${channel}"`);
}

/** Takes the slot if it is free; true when it was taken. */
export async function admissionSlotTry(db: Queryable, namespace: number, slot: number): Promise<boolean> {
  const { rows } = await db.query<{ ok: boolean }>('select pg_try_advisory_lock($1::int4, $2::int4) as ok', [namespace, slot]);
  return rows[0]?.ok === true;
}

/** Frees the slot and wakes the waiters of every process. */
export async function admissionSlotRelease(db: Queryable, namespace: number, slot: number, channel: string): Promise<void> {
  await db.query("select pg_advisory_unlock($1::int4, $2::int4), pg_notify($3, '')", [namespace, slot, channel]);
}
