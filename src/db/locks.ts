/**
 * Advisory-lock namespaces (the first int4 of pg_advisory_*lock(int4, int4)).
 * One place, so two features can never take each other's locks by accident.
 */
export const LOCK_NS = Object.freeze({
  /** Serializes changes to one conversation's pairs (sourcebound.refresh_pair(), sourcebound.pairs_lock()). */
  pairs: 74201,
  /** Serializes claims of one summary range (src/conversation/claim.ts). */
  summaryClaim: 74202,
  /** Serializes migrators (src/db/migrate.ts); key 0. */
  migrate: 74203,
  /** Fleet-wide admission slots (src/gateway/admission.ts); key = slot number. */
  admission: 74204,
  /** Run compaction: one preparer per Run at a time. */
  runCompaction: 74205,
});
