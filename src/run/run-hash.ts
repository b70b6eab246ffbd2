import { createHash, type Hash } from 'node:crypto';

/**
 * Source hashes of run work (the binding between a checkpoint and the turns it
 * replaced). SHA-256 over a versioned, length-prefixed encoding, so no two
 * different sources encode to the same bytes. Computed at candidate selection,
 * stored on the receipt and the checkpoint, recomputed at every projection:
 * a checkpoint whose sources no longer hash the same is not used.
 *
 * Encoding, version 1 (every field = u32be(UTF-8 byte length) || UTF-8 bytes;
 * numbers as decimal text; absent values as the empty string):
 *   group hash  = SHA-256("sourcebound/run-work\0" || u32be(1) || seq || turn text
 *                 || u32be(unit count) || for each unit in position order:
 *                    proposal id, tool name, JSON of input, status, dispatch id,
 *                    result id, result version, result sha256, error)
 *   source hash = SHA-256("sourcebound/run-source\0" || u32be(1) || u32be(group count)
 *                 || each group hash as a field)
 *   identity    = SHA-256("sourcebound/run-candidate\0" || u32be(1) || run id,
 *                 predecessor checkpoint id, from seq, to seq, source hash,
 *                 summarizer model, prompt version)
 */
export const RUN_HASH_VERSION = 1;

export interface HashedUnit {
  proposalId: string;
  tool: string;
  input: unknown;
  status: string;
  dispatchId: string | null;
  resultId: string | null;
  resultVersion: number | null;
  resultSha256: string | null;
  error: string | null;
}

export interface HashedGroup {
  seq: number;
  text: string;
  units: readonly HashedUnit[];
}

/** Hex SHA-256 of one work group. */
export function groupHash(group: HashedGroup): string {
  const hash = start('sourcebound/run-work\0');
  field(hash, String(group.seq));
  field(hash, group.text);
  hash.update(u32(group.units.length));
  for (const u of group.units) {
    field(hash, u.proposalId);
    field(hash, u.tool);
    field(hash, JSON.stringify(u.input) ?? '');
    field(hash, u.status);
    field(hash, u.dispatchId ?? '');
    field(hash, u.resultId ?? '');
    field(hash, u.resultVersion === null ? '' : String(u.resultVersion));
    field(hash, u.resultSha256 ?? '');
    field(hash, u.error ?? '');
  }
  return hash.digest('hex');
}

/** Hex SHA-256 over the group hashes of a range, in order. */
export function sourceHashOf(groupHashes: readonly string[]): string {
  const hash = start('sourcebound/run-source\0');
  hash.update(u32(groupHashes.length));
  for (const h of groupHashes) field(hash, h);
  return hash.digest('hex');
}

export interface CandidateIdentity {
  runId: string;
  predecessorId: string | null;
  fromSeq: number;
  toSeq: number;
  sourceHash: string;
  model: string;
  promptVersion: string;
}

/** Hex SHA-256 naming one candidate: the key attempts are counted against. */
export function identityKeyOf(c: CandidateIdentity): string {
  const hash = start('sourcebound/run-candidate\0');
  for (const value of [
    c.runId.toLowerCase(),
    c.predecessorId?.toLowerCase() ?? '',
    String(c.fromSeq),
    String(c.toSeq),
    c.sourceHash,
    c.model,
    c.promptVersion,
  ]) {
    field(hash, value);
  }
  return hash.digest('hex');
}

function start(domain: string): Hash {
  const hash = createHash('sha256');
  hash.update(domain, 'utf8');
  hash.update(u32(RUN_HASH_VERSION));
  return hash;
}

function field(hash: Hash, value: string): void {
  hash.update(u32(Buffer.byteLength(value, 'utf8')));
  hash.update(value, 'utf8');
}

// update() copies its input before returning, so one scratch buffer serves every length prefix.
const scratch = Buffer.alloc(4);
function u32(n: number): Buffer {
  scratch.writeUInt32BE(n);
  return scratch;
}
