import { existsSync } from 'node:fs';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { readThreads } from '../../src/cli/demo-threads.ts';
import { createOfflineSummarizer, extractiveSummary, MIN_TARGET_BYTES, OFFLINE_MODEL } from '../../src/gateway/offline.ts';
import { DEFAULT_MAX_INPUT_CHARS } from '../../src/gateway/contract.ts';
import { SEGMENT_WINDOW, splitSentences } from '../../src/gateway/sentences.ts';
import { groundSummary } from '../../src/grounding/index.ts';
import { plannableRanges } from '../../src/conversation/plan.ts';
import { codePointLength } from '../../src/gateway/text.ts';
import type { MaterialItem } from '../../src/support/summary-contract.ts';

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

const replies: MaterialItem[] = [
  {
    id: '0b6f1c2e-4d3a-4f7e-9a1b-2c3d4e5f6a7b',
    text:
      'Thanks for asking. The invoice INV-2024-001 totals 1,234.56 EUR as of 2024-03-05. ' +
      'I hope that helps. Payment is due on 2024-04-01 via IBAN DE89 3704 0044 0532 0130 00. ' +
      'Let me know if you need anything else.',
  },
  { id: 'msg_02', text: 'Deployment v2.3.1 finished at 14:05 UTC.\nLatency p99 dropped from 240 ms to 180 ms. Nothing else changed.' },
  { id: 'msg_03', text: '数据已更新。总数为 42 条。请确认。' },
];

/** Through a version that names items by id (@4): the tags show each item's id. */
async function summarize(items: readonly MaterialItem[], maxChars: number) {
  return createOfflineSummarizer({ maxChars }).summarize({ promptVersion: 'conversation-compaction@4', items });
}

function okText(outcome: Awaited<ReturnType<typeof summarize>>): string {
  if (outcome.kind !== 'ok') throw new Error(`expected ok, got ${JSON.stringify(outcome)}`);
  return outcome.text;
}

describe('offline extractive summarizer', () => {
  it('has its own model identity and no usage or request id', async () => {
    expect(await summarize(replies, 6000)).toMatchObject({ kind: 'ok', model: OFFLINE_MODEL, usage: null, requestId: null });
    expect(OFFLINE_MODEL).toBe('sourcebound/extractive@3');
  });

  it('keeps every item in order, tagged with its short id, and whole but for its pleasantries when it fits', async () => {
    const text = okText(await summarize(replies, 6000));
    expect(text.split('\n')).toEqual([
      // `Thanks for asking.`, `I hope that helps.` and `Let me know if you need anything else.` say nothing.
      '[0b6f1c2e] The invoice INV-2024-001 totals 1,234.56 EUR as of 2024-03-05. Payment is due on 2024-04-01 via IBAN DE89 3704 0044 0532 0130 00.',
      '[msg_02] Deployment v2.3.1 finished at 14:05 UTC. Latency p99 dropped from 240 ms to 180 ms. Nothing else changed.',
      '[msg_03] 数据已更新。总数为 42 条。请确认。',
    ]);
  });

  it('keeps the sentences with facts in their order, copied byte-exact', async () => {
    const text = okText(await summarize([replies[0]!], 150));
    expect(codePointLength(text)).toBeLessThanOrEqual(150);
    expect(text).toBe(
      '[0b6f1c2e] The invoice INV-2024-001 totals 1,234.56 EUR as of 2024-03-05. Payment is due on 2024-04-01 via IBAN DE89 3704 0044 0532 0130 00.',
    );
    expect(text).not.toContain('I hope that helps');
  });

  it('never alters a figure: every token with a digit in the summary appears verbatim in its source', async () => {
    const sources = replies.map((r) => r.text).join('\n');
    for (const cap of [60, 120, 250, 6000]) {
      const text = okText(await summarize(replies, cap));
      for (const token of text.match(/\S*\d\S*/g) ?? []) {
        expect(sources, `cap ${cap}: ${token}`).toContain(token.replace(/^\[[^\]]*\]/, '').replace(/…$/, ''));
      }
    }
  });

  it('cuts a single over-long sentence at a word boundary and marks it with …', async () => {
    const sentence = Array.from({ length: 200 }, (_, i) => `word${i}`).join(' ');
    const text = okText(await summarize([{ id: 'm', text: sentence }], 80));
    expect(codePointLength(text)).toBeLessThanOrEqual(80);
    expect(text.endsWith('…')).toBe(true);
    const kept = text.slice('[m] '.length, -1).split(' ');
    // Every kept word is a whole word of the source, in order.
    expect(kept).toEqual(sentence.split(' ').slice(0, kept.length));
  });

  it('is stable: same input, same output, across runs and instances', async () => {
    const a = okText(await summarize(replies, 200));
    const b = okText(
      await createOfflineSummarizer({ maxChars: 1 }).summarize({
        promptVersion: 'conversation-compaction@4',
        items: replies,
        maxChars: 200,
      }),
    );
    expect(b).toBe(a);
    expect(extractiveSummary(replies, 200)).toBe(a);
  });

  it('stays within the cap for every cap, even below one tag per item', async () => {
    const many = Array.from({ length: 10 }, (_, i) => ({
      id: `assistant-message-${i}`,
      text: `Reply ${i} says ${i * 17} units shipped. It also says more things here.`,
    }));
    for (const cap of [1, 2, 3, 5, 10, 24, 30, 50, 100, 333, 1000]) {
      const text = okText(await summarize(many, cap));
      expect(codePointLength(text), `cap ${cap}`).toBeLessThanOrEqual(cap);
      expect(text.trim().length, `cap ${cap}`).toBeGreaterThan(0);
    }
  });

  it('handles odd text up to the input cap (lone surrogates, RTL and zero-width marks, CJK, emoji), twice the same; over the cap it is input_too_large', async () => {
    const pieces = [
      'Total 1,234.56 EUR on 2024-03-05.',
      '\u202Eטקסט הפוך\u202C',
      'zero\u200Bwidth\u200Djoin\uFEFF',
      '数据已更新。',
      '👩‍👩‍👧‍👦 family 🇩🇪 flag.',
      'lone \uD800 high',
      'lone \uDC00 low.',
      'ID sb_7f3a-9c! ',
      '\u200F\u200E',
    ];
    let big = '';
    for (let i = 0; big.length < 380_000; i++) big += pieces[i % pieces.length]! + (i % 7 === 6 ? '\n' : ' ');
    const items = [{ id: 'big', text: big }, { id: 'nospace', text: 'x'.repeat(200_000) }, ...replies];
    const over = [{ id: 'huge', text: 'y'.repeat(DEFAULT_MAX_INPUT_CHARS) }, ...replies];
    expect(await summarize(over, 6000)).toEqual({
      kind: 'invalid',
      reason: 'input_too_large',
      model: OFFLINE_MODEL,
      usage: null,
      requestId: null,
    });
    const first = okText(await summarize(items, 6000));
    const second = okText(await summarize(items, 6000));
    expect(second).toBe(first);
    expect(codePointLength(first)).toBeLessThanOrEqual(6000);
    expect(first).not.toMatch(LONE_SURROGATE);
    expect(first).toContain('[big] ');
    expect(first).toContain('[msg_03] ');
  });

  it('turns lone surrogates into U+FFFD', async () => {
    expect(okText(await summarize([{ id: 'm', text: 'a \uD800 b.' }], 100))).toBe('[m] a \uFFFD b.');
  });

  it('is invalid empty_input when no item has text', async () => {
    for (const items of [
      [],
      [
        { id: 'a', text: '' },
        { id: 'b', text: ' \n\t ' },
      ],
    ]) {
      expect(await summarize(items, 6000)).toEqual({
        kind: 'invalid',
        reason: 'empty_input',
        model: OFFLINE_MODEL,
        usage: null,
        requestId: null,
      });
    }
  });

  it('rejects an unknown prompt version as config and honours an aborted signal', async () => {
    const s = createOfflineSummarizer({ maxChars: 100 });
    expect(await s.summarize({ promptVersion: 'nope@1', items: replies })).toMatchObject({ kind: 'config' });
    expect(await s.summarize({ promptVersion: 'run-compaction@2', items: replies, signal: AbortSignal.abort() })).toMatchObject({
      kind: 'deferred',
      reason: 'aborted_before_send',
    });
  });

  it('aims at a quarter of a long input, at least 400 bytes for a short one, whole when that is all there is, never above the cap', () => {
    const long = Array.from({ length: 10 }, (_, i) => ({
      id: `m${i}`,
      text: Array.from({ length: 30 }, (_, j) => `Reply ${i} sentence ${j} talks about fund ${j % 7} and its fee of ${j}.${i}%.`).join(' '),
    }));
    const input = long.reduce((n, it) => n + Buffer.byteLength(it.text), 0);
    const quarter = Buffer.byteLength(extractiveSummary(long, 6000)!);
    expect(quarter).toBeLessThanOrEqual(Math.ceil(input / 4));
    expect(quarter).toBeGreaterThan(input / 4 - 120); // whole sentences fill it to within about one
    expect(Buffer.byteLength(extractiveSummary(long, 1000)!)).toBeLessThanOrEqual(1000);
    const short = [{ id: 'a', text: Array.from({ length: 30 }, (_, i) => `Sentence number ${i} is here.`).join(' ') }];
    const s = extractiveSummary(short, 6000)!;
    expect(Buffer.byteLength(s)).toBeGreaterThan(MIN_TARGET_BYTES - 60);
    expect(Buffer.byteLength(s)).toBeLessThanOrEqual(MIN_TARGET_BYTES);
    expect(extractiveSummary([{ id: 'a', text: 'Only this.' }], 6000)).toBe('[a] Only this.');
  });

  it('splits sentences with Intl.Segmenter, never inside code or after an abbreviation followed by lower case', () => {
    const text = (t: string) => splitSentences(t).map((s) => s.text);
    expect(text('Use e.g. this one. The U.S. and Canada agree. Dr. Smith said so.')).toEqual([
      'Use e.g. this one.',
      'The U.S. and Canada agree.',
      'Dr.',
      'Smith said so.',
    ]);
    expect(text('local d = (a.Position - b).Magnitude')).toEqual(['local d = (a.Position - b).Magnitude']);
    expect(text('Run `x = 1. y = 2.` first. Then go.')).toEqual(['Run `x = 1. y = 2.` first.', 'Then go.']);
    expect(text('数据已更新。总数为 42 条。请确认。')).toEqual(['数据已更新。', '总数为 42 条。', '请确认。']);
    expect(text('👩‍👩‍👧‍👦 family 🇩🇪 flag. Next one!\nA new line')).toEqual(['👩‍👩‍👧‍👦 family 🇩🇪 flag.', 'Next one!', 'A new line']);
  });

  it('is grounded: on the real demo threads every fact of its summaries is in the replies', () => {
    let ranges = 0;
    for (const thread of readThreads()) {
      for (const range of plannableRanges(thread.pairs.length)) {
        const items = thread.pairs
          .slice(range.fromPair, range.toPair + 1)
          .map((p, i) => ({ id: `${thread.id}-${range.fromPair + i}`, text: p.assistant }));
        expect(groundSummary(extractiveSummary(items, 6000)!, items).ungrounded, `${thread.id} ${range.fromPair}`).toEqual([]);
        ranges++;
      }
    }
    expect(ranges).toBeGreaterThan(0);
  });
});

describe('sentences of long lines', () => {
  const SHARED = '/work/shared/data/oasst1-threads.jsonl';
  const texts = (t: string, window?: number) => splitSentences(t, window).map((s) => s.text);
  afterEach(() => vi.restoreAllMocks());

  it.each([SHARED].filter((p) => existsSync(p)))(
    'gives the sentences of whole lines when segmented in windows, on the real threads (%s)',
    (path) => {
      let lines = 0;
      for (const thread of readThreads(path)) {
        // Every reply as it is, and a thread's replies joined into one line of about 30,000 characters.
        const joined = thread.pairs.map((p) => p.assistant.replace(/\s*\r?\n\s*/g, ' ')).join(' ');
        for (const text of [...thread.pairs.map((p) => p.assistant), joined]) {
          expect(texts(text, 1_000)).toEqual(texts(text, Number.POSITIVE_INFINITY));
          lines++;
        }
      }
      expect(lines).toBeGreaterThan(1000);
    },
  );

  it('never hands the segmenter a whole long line (its time is quadratic in the string it walks)', () => {
    const segment = vi.spyOn(Intl.Segmenter.prototype, 'segment');
    const prose = 'The quick fox jumps. '.repeat(20_000);
    // A table of figures has no two adjacent letters: its windows grow, up to twice their size.
    const figures = '| 1.0 | .654 | 5.8 | '.repeat(5_000) + 'End of the table.';
    expect(texts(prose)).toHaveLength(20_000);
    expect(texts(figures).at(-1)).toMatch(/End of the table\.$/);
    const walked = segment.mock.calls.map(([input]) => String(input).length);
    expect(Math.max(...walked)).toBeLessThanOrEqual(2 * SEGMENT_WINDOW);
    expect(walked.filter((n) => n <= SEGMENT_WINDOW).length).toBeGreaterThan(100);
  });

  it('splits a 600,000-character line of short sentences (minutes with one segmenter walk)', () => {
    const line = '数据已更新。'.repeat(50_000) + 'Done. ' + 'Word word. '.repeat(20_000);
    const sentences = texts(line);
    expect(sentences).toHaveLength(70_001);
    expect(sentences.slice(49_999, 50_002)).toEqual(['数据已更新。', 'Done.', 'Word word.']);
  }, 10_000);
});
