import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { DEMO_DATA, readThreads } from '../../src/cli/demo-threads.ts';
import { sourceHash, type SourcePair } from '../../src/conversation/source-hash.ts';
import { pairsRangeRead } from '../../src/db/queries/summaries.ts';
import { createTestDatabase } from '../support/db.ts';
import { addPairs, createConversation } from '../support/fixtures.ts';

/**
 * The claim and the commit hash a range's source in SQL (range_source() and
 * its array twin source_hash_v1(), both set-based since 0025); the projection and inspect hash it in
 * TypeScript (src/conversation/source-hash.ts). The two must agree byte for byte, or summaries
 * would never bind: checked on every real conversation and on hostile text.
 */
const db = await createTestDatabase();
const SHARED = '/work/shared/data/oasst1-threads.jsonl';
const threads = readThreads(existsSync(SHARED) ? SHARED : DEMO_DATA);

async function sqlHash(pairs: readonly SourcePair[]): Promise<string> {
  const { rows } = await db.pool.query<{ h: string }>(
    'select sourcebound.source_hash_v1($1::uuid[], $2::text[], $3::uuid[], $4::text[]) as h',
    [
      pairs.map((p) => p.userMessageId),
      pairs.map((p) => p.userText),
      pairs.map((p) => p.assistantMessageId),
      pairs.map((p) => p.assistantText),
    ],
  );
  return rows[0]!.h;
}

const pair = (userText: string, assistantText: string): SourcePair => ({
  userMessageId: randomUUID(),
  userText,
  assistantMessageId: randomUUID(),
  assistantText,
});

// Everything PostgreSQL text can hold that an encoder could get wrong. NUL it cannot hold.
const HOSTILE = [
  '日本語のテキスト、中文字符，한국어 텍스트',
  'emoji 👩‍👩‍👧‍👦 🏳️‍🌈 👍🏽 and a flag 🇯🇵',
  'combining e\u0301 a\u0308 and Hangul jamo \u1100\u1161\u11a8',
  Array.from({ length: 31 }, (_, i) => String.fromCharCode(i + 1)).join('') +
    '\u007f' +
    Array.from({ length: 32 }, (_, i) => String.fromCharCode(0x80 + i)).join(''),
  'right-to-left \u202eevil\u202c and ltr marks \u200e\u200f, zero width \u200b\u200c\u200d, BOM \ufeff inside',
  'astral plane 𝕳𝖊𝖑𝖑𝖔 𓀀 𠜎 and the last code point \u{10ffff}',
  'line\r\nbreaks\u2028and\u2029separators\u0085',
  '\ufffd replacement character itself',
  'x'.repeat(70_000) + '€',
];
// Lone surrogates are not text PostgreSQL can store: node-postgres (like Buffer.from in src/conversation/source-hash.ts) sends them as U+FFFD.
const SURROGATES = ['lone high \ud800 here', 'lone low \udfff here', 'reversed pair \udc00\ud800', 'ends in a high surrogate \udbff'];

describe('source hash: the SQL twin equals src/conversation/source-hash.ts', () => {
  it('on every real conversation (oasst1), ten pairs at a time, through the database', async () => {
    let ranges = 0;
    for (const thread of threads) {
      const pairs = thread.pairs;
      if (pairs.length === 0) continue;
      const c = await createConversation(db.pool);
      await addPairs(db.pool, c, pairs.length, (i) => pairs[i]!);
      for (let from = 0; from < pairs.length; from += 10) {
        const stored = await pairsRangeRead(db.pool, c, from, Math.min(from + 9, pairs.length - 1));
        const { rows } = await db.pool.query<{ h: string }>(
          `select sourcebound.source_hash_v1(array_agg(user_message_id order by pair_index), array_agg(user_text order by pair_index),
                  array_agg(assistant_message_id order by pair_index), array_agg(assistant_text order by pair_index)) as h
           from sourcebound.eligible_pairs where conversation_id = $1 and pair_index between $2 and $2 + 9`,
          [c, from],
        );
        expect(rows[0]!.h).toBe(sourceHash(stored));
        // range_source() (what claim and commit hash) reads the same rows as the view.
        const {
          rows: [src],
        } = await db.pool.query<{ h: string; ids: string[] }>(
          'select source_hash as h, source_message_ids::text[] as ids from sourcebound.range_source($1, $2)',
          [c, from],
        );
        expect(src).toEqual({ h: rows[0]!.h, ids: stored.flatMap((p) => [p.userMessageId, p.assistantMessageId]) });
        // The texts came back exactly as written, so the application's own strings hash the same too.
        if (stored.length === Math.min(10, pairs.length - from))
          expect(
            sourceHash(stored.map((p, i) => ({ ...p, userText: pairs[from + i]!.user, assistantText: pairs[from + i]!.assistant }))),
          ).toBe(sourceHash(stored));
        ranges++;
      }
    }
    expect(ranges).toBeGreaterThan(threads.length);
  });

  it('on hostile text: CJK, emoji sequences, control characters, bidi, astral planes, long text', async () => {
    for (const text of HOSTILE) {
      const pairs = [pair(text, `reply to: ${text}`), pair('plain', text)];
      expect(await sqlHash(pairs)).toBe(sourceHash(pairs));
    }
    const all = HOSTILE.map((t, i) => pair(t, HOSTILE[(i + 1) % HOSTILE.length]!));
    expect(await sqlHash(all)).toBe(sourceHash(all));
  });

  it('on hostile text stored and read back by range_source(), the one query claim and commit hash with', async () => {
    const c = await createConversation(db.pool);
    const texts = HOSTILE.map((t, i) => ({ user: t, assistant: HOSTILE[(i + 3) % HOSTILE.length]! }));
    await addPairs(db.pool, c, 10, (i) => texts[i % texts.length]!);
    const stored = await pairsRangeRead(db.pool, c, 0, 9);
    const {
      rows: [src],
    } = await db.pool.query<{ h: string; ids: string[]; texts: string[] }>(
      'select source_hash as h, source_message_ids::text[] as ids, assistant_texts as texts from sourcebound.range_source($1, 0)',
      [c],
    );
    expect(src!.h).toBe(sourceHash(stored));
    expect(src!.ids).toEqual(stored.flatMap((p) => [p.userMessageId, p.assistantMessageId]));
    expect(src!.texts).toEqual(stored.map((p) => p.assistantText));
    expect(stored.map((p) => p.userText)).toEqual(Array.from({ length: 10 }, (_, i) => texts[i % texts.length]!.user));
  });

  it('on lone surrogates, mapped to U+FFFD on the way in exactly as src/conversation/source-hash.ts maps them', async () => {
    for (const text of SURROGATES) {
      const pairs = [pair(text, text)];
      expect(await sqlHash(pairs)).toBe(sourceHash(pairs));
      const c = await createConversation(db.pool);
      await addPairs(db.pool, c, 1, () => ({ user: text, assistant: text }));
      const [stored] = await pairsRangeRead(db.pool, c, 0, 0);
      expect(stored!.userText).toBe(Buffer.from(text, 'utf8').toString('utf8'));
      expect(sourceHash([stored!])).toBe(
        sourceHash(pairs.map((p) => ({ ...p, userMessageId: stored!.userMessageId, assistantMessageId: stored!.assistantMessageId }))),
      );
    }
  });

  it('on the edge cases of the encoding: no pairs, uppercase ids, fields whose concatenations collide', async () => {
    expect(await sqlHash([])).toBe(sourceHash([]));
    const upper = { ...pair('a', 'b') };
    expect(await sqlHash([upper])).toBe(sourceHash([{ ...upper, userMessageId: upper.userMessageId.toUpperCase() }]));
    const ab = [{ ...upper, userText: 'ab', assistantText: 'c' }];
    const a_bc = [{ ...upper, userText: 'a', assistantText: 'bc' }];
    expect(await sqlHash(ab)).not.toBe(await sqlHash(a_bc));
    expect(await sqlHash(ab)).toBe(sourceHash(ab));
  });
});
