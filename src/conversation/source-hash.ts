import { createHash } from 'node:crypto';

/**
 * Source hash (docs/design.md): SHA-256 over a versioned,
 * length-prefixed encoding of all ten pairs of a range, so no two different
 * sources can encode to the same bytes (plain concatenation could: "ab"+"c"
 * and "a"+"bc"). The same function is used at claim, at commit and at
 * projection. Changing the encoding means a new SOURCE_HASH_VERSION; old
 * records keep theirs and are verified with it.
 *
 * Encoding, version 1:
 *   "sourcebound/conversation-source\0" || u32be(1) || u32be(number of pairs)
 *   then for each pair, in pair order, four fields:
 *     user message id, user text, assistant message id, assistant text
 *   each field = u32be(byte length of its UTF-8) || its UTF-8 bytes.
 *   Ids are lowercase canonical UUID text.
 */
export const SOURCE_HASH_VERSION = 1;

export interface SourcePair {
  userMessageId: string;
  userText: string;
  assistantMessageId: string;
  assistantText: string;
}

const DOMAIN = Buffer.from('sourcebound/conversation-source\0', 'utf8');

/**
 * Hex SHA-256 of a range's pairs.
 * @throws RangeError for a hash version this build cannot compute.
 */
export function sourceHash(pairs: readonly SourcePair[], version: number = SOURCE_HASH_VERSION): string {
  if (version !== 1) throw new RangeError(`unknown source hash version ${version}`);
  const hash = createHash('sha256');
  hash.update(DOMAIN);
  hash.update(u32(version));
  hash.update(u32(pairs.length));
  for (const pair of pairs) {
    field(hash, pair.userMessageId.toLowerCase());
    field(hash, pair.userText);
    field(hash, pair.assistantMessageId.toLowerCase());
    field(hash, pair.assistantText);
  }
  return hash.digest('hex');
}

/** The 2 x N message ids of a range in pair order: user, assistant, user, assistant... */
export function sourceMessageIds(pairs: readonly Pick<SourcePair, 'userMessageId' | 'assistantMessageId'>[]): string[] {
  // (A loop: the projection checks every shown range's ids on every call.)
  const ids = new Array<string>(2 * pairs.length);
  for (let i = 0; i < pairs.length; i++) {
    ids[2 * i] = pairs[i]!.userMessageId.toLowerCase();
    ids[2 * i + 1] = pairs[i]!.assistantMessageId.toLowerCase();
  }
  return ids;
}

function field(hash: ReturnType<typeof createHash>, value: string): void {
  const bytes = Buffer.from(value, 'utf8');
  hash.update(u32(bytes.length));
  hash.update(bytes);
}

function u32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n);
  return b;
}
