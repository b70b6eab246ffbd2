import { existsSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { DEMO_DATA, readThreads } from '../../src/cli/demo-threads.ts';
import { extractiveSummary } from '../../src/gateway/offline.ts';
import { extractFacts, groundSummary, normalizeText } from '../../src/grounding/index.ts';
import { plannableRanges } from '../../src/conversation/plan.ts';
import * as reference from './grounding-reference.ts';

/**
 * The grounding check was made faster (patterns that need a digit tried
 * only at the runs of digits that can start a match, tags looked up in the
 * items' ids first); what it finds must not change. grounding-reference.ts is the module before that work: on the real
 * threads and on generated hostile text, the facts, the normalized text and
 * the grounding must be identical.
 */

const SHARED = '/work/shared/data/oasst1-threads.jsonl';

function same(summary: string, material: { id: string; text: string }[]): void {
  expect(extractFacts(summary)).toEqual(reference.extractFacts(summary));
  expect(normalizeText(summary)).toBe(reference.normalizeText(summary));
  expect(groundSummary(summary, material)).toEqual(reference.groundSummary(summary, material));
}

describe('grounding equals the reference implementation', () => {
  it.each([SHARED, DEMO_DATA].filter((p) => existsSync(p)))(
    'on every plannable range of %s (offline summaries, against their own and other ranges)',
    (path) => {
      const ranges: { id: string; text: string }[][] = [];
      for (const thread of readThreads(path)) {
        for (const r of plannableRanges(thread.pairs.length)) {
          ranges.push(
            thread.pairs.slice(r.fromPair, r.toPair + 1).map((p, i) => ({ id: `${thread.id}-${r.fromPair + i}`, text: p.assistant })),
          );
        }
      }
      expect(ranges.length).toBeGreaterThan(0);
      ranges.forEach((items, i) => {
        const summary = extractiveSummary(items, 6000)!;
        same(summary, items);
        // Against another range: most facts ungrounded, every slow path taken.
        same(summary, ranges[(i + 1) % ranges.length]!);
        // The material's own text as a summary: every fact of the material, on itself and upper-cased.
        const joined = items.map((m) => m.text).join('\n');
        same(joined, items);
        same(joined.toUpperCase(), items);
      });
    },
  );

  // Pieces of every rule's edge: separators, percent words, units, dates, times, money, versions,
  // identifiers, URLs, e-mails, paths, code, truncation, white space of every kind, NFKC forms.
  const PIECES = [
    '0',
    '1',
    '7',
    '12',
    '100',
    '250',
    '1999',
    '2024',
    '12345',
    '0.5',
    '1.50',
    '3,5',
    '1,234',
    '1,234,567',
    "1'234",
    '1’234',
    '1_000',
    '1\u00a0234',
    '1\u202f234',
    '1\u2009234',
    '2023 100',
    '１２３',
    '１,２３４',
    '%',
    ' %',
    '50%',
    '50 %',
    'per cent',
    'percent',
    'percentage',
    'cent',
    ' per',
    'Cent',
    '‰',
    'kg',
    'KG',
    ' km',
    'km/h',
    'MB/s',
    'ms',
    ' s',
    'm',
    'x',
    '×',
    '°C',
    '°',
    'in',
    'am',
    'pm',
    'a.m.',
    'p.m.',
    ' days',
    '-day',
    'basis points',
    'million',
    'bn',
    'k',
    'January',
    'jan',
    'Mar.',
    'March',
    'may',
    'May',
    'Sept',
    'sept.',
    'June',
    'dec',
    'of',
    '5th',
    '1st',
    '22nd',
    '3rd',
    'th',
    '2024-03-05',
    '2024-3-5',
    '2024-13-40',
    '03/05/2024',
    '5.3.24',
    '14:30',
    '2:30 pm',
    '2:30pm',
    '24:00',
    '9am',
    '12:00:59',
    '10:61',
    '$',
    'US$',
    'us$',
    '€',
    '£',
    '¥',
    '₹',
    'USD',
    'EUR',
    'usd',
    'dollars',
    'euro',
    'pounds',
    'rupees',
    'CHF',
    'v1.2.3',
    'V2.0',
    '1.2.3',
    '1.2.3-beta.1',
    '1.2.3.4',
    'v',
    'INV-2231',
    'abc123',
    'A1B2',
    'x86_64',
    'e6fdde68',
    'C++17',
    'c#9',
    '0634102a',
    'ABC-123',
    '4-Q10',
    'https://',
    'http://Example.com/a_(b)',
    'www.',
    'www.x.org/',
    'ftp://h/p',
    'ops@example.org',
    'A.B@Ex.co.uk',
    '@',
    'x@y',
    '/etc/nginx.conf',
    '~/a/b',
    './x',
    '../y.ts',
    'src/app.ts',
    'C:\\dir\\f.txt',
    'a\\b.c',
    '/',
    '\\',
    'and/or',
    '24/7',
    '`',
    '`make test`',
    '```',
    '```\ncode 1,234\n```',
    '``',
    '…',
    '...',
    '.',
    ',',
    ';',
    ':',
    '!',
    '?',
    '(',
    ')',
    '[',
    ']',
    '{',
    '}',
    '<',
    '>',
    '"',
    "'",
    '’',
    '”',
    '*',
    '_',
    '-',
    '#',
    '+',
    '=',
    '|',
    ' ',
    ' ',
    ' ',
    '  ',
    '\n',
    '\n\n',
    '\t',
    '\r\n',
    '\u00a0',
    '\u202f',
    '\u2009',
    '\u3000',
    '\u2028',
    '\ufeff',
    '年',
    '月',
    '日',
    '号',
    '년',
    '월',
    '일',
    '共有',
    '个',
    '円',
    '원입니다',
    'ไทย',
    '٩',
    '٢٥',
    '٫',
    '٬',
    '९',
    '๙',
    '𑁧',
    '125th',
    '100TH',
    'mn',
    'MM',
    'mln',
    'T',
    'tn',
    ' t',
    '$1.99',
    '2024/03/06',
    '2024/3/6',
    '2024. 3. 6.',
    '. ',
    '万',
    '亿',
    '億',
    '兆',
    '\u200b',
    '\u200d',
    '\u00ad',
    '\u202e',
    '\ufe0f',
    'T',
    't',
    'Z',
    'z',
    'T10:00',
    '2023-12-25T10:00:00Z',
    '2024-03-05t9:05',
    '10:00:00',
    '10:00:00Z',
    '12:30:00+02:00',
    '50 €',
    '50€',
    '1.234,56 €',
    '20$',
    '1 000 €',
    '12/25/2023',
    '25.12.2023',
    '13/01/2023',
    '31/31/2023',
    'US dollars',
    'us dollar',
    'US',
    'degrees Celsius',
    'degree fahrenheit',
    'celsius',
    'GPT-4',
    'gpt4',
    'SHA-256',
    'x86-64',
    'ISO 8601',
    'RFC',
    'B_12',
    'UTF-8',
    'million km',
    ' billion years',
    'thousand',
    ' tons',
    'Million Miles',
    'percentage points',
    ' pp',
    ' kilograms',
    'milliseconds',
    ' gigabytes',
    'miles per hour',
    'kilowatt hours',
    '2.500.000',
    '1.234.567,89',
    '10k',
    '10K',
    '7B',
    '2.5M',
    'Python',
    'Python3.11',
    ' 3.11',
    'ISO8601',
    '50 000',
    '1 234 567',
    ' 000',
    'mln',
    '5/3/2024',
    '05.03.2024',
    '0.5%',
    '.5',
    '\u2010',
    '\u2011',
    '\u2012',
    '\u2212',
    '\u2013',
    '\u2014',
    'INV\u20102231',
    '2024\u201103\u201105',
    './src/a.ts',
    'a1b2c3d',
    'a1b2c3d4e5f6a7b8c9d0',
    'A1B2C3D4E5F6',
    '18.17.0',
    '18.17',
    '円',
    '元',
    '원',
    '1,200円',
    'KRW',
    'krw',
    '{"amount": 1250.5, ',
    '"currency": "USD"}',
    'size_bytes',
    ' bytes',
    '.5',
    ' .6%',
    '.45 in',
    '...5',
    '"C:\\\\dir\\\\f.txt"',
    '10-20%',
    '10\u201320',
    ' to ',
    ' and ',
    'between ',
    'Between 100',
    '$10-20',
    '$10-$20',
    '1-2 million',
    'Mbit/s',
    'gbit/s',
    ' pounds',
    ' lbs',
    'v18.2',
    'v1.10',
    'March 5-7',
    '5-7 March',
    ' 5 to 7',
    '2-4pm',
    '$1.5-2M',
    '-2 million',
    '20-25°C',
    'Jan 30-Feb 2',
    'é',
    'É',
    'ﬁ',
    'ß',
    'İ',
    'ǅ',
    '\u0301',
    'Ω',
    'Å',
    'Ⅻ',
    '①',
    '½',
    '²',
    'µ',
    'μ',
    'K',
    'ſ',
    '日本',
    '😀',
    'ю',
    'a',
    'Z',
    'the',
    'cost',
    'is',
    'ok',
  ];

  function rng(seed: number): () => number {
    let s = seed >>> 0;
    return () => {
      s = (s + 0x6d2b79f5) >>> 0;
      let t = s;
      t = Math.imul(t ^ (t >>> 15), t | 1);
      t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
  }

  function hostile(next: () => number, pieces: number): string {
    let text = '';
    for (let i = 0; i < pieces; i++) {
      text += PIECES[Math.floor(next() * PIECES.length)]!;
      const r = next();
      if (r < 0.45) text += ' ';
      else if (r < 0.5) text += '\n';
    }
    return text;
  }

  it('on generated hostile text (facts, normalized text; grounded against related and unrelated material)', () => {
    const next = rng(13);
    for (let n = 0; n < 4000; n++) {
      const material = [
        { id: `m${n}`, text: hostile(next, 5 + Math.floor(next() * 80)) },
        { id: 'second', text: hostile(next, Math.floor(next() * 30)) },
      ];
      // A summary made of the material's own pieces (most facts grounded, the fast paths taken),
      // of pieces of it reshuffled, or unrelated.
      const source = material[0]!.text;
      const from = Math.floor(next() * source.length);
      const kind = n % 3;
      const summary =
        kind === 0
          ? source.slice(from, from + Math.floor(next() * 200))
          : kind === 1
            ? `${source.slice(from)} ${hostile(next, 10)} ${source.slice(0, from)}`
            : hostile(next, 5 + Math.floor(next() * 60));
      same(summary, material);
      same(material[0]!.text, material);
    }
    // 8,000 comparisons, about 17 s alone; a loaded CI machine (the whole suite on 2 cores) took 69 s once.
  }, 180_000);

  it('on texts longer than the pieces and loops the check pauses after (normalization in pieces of 16,384 characters, 1,024 matches a loop)', () => {
    const next = rng(36);
    // Marks, invisible characters and digits of other scripts crowded, so that pieces end next to them.
    const crowded = ['\u0301', '\u200b', '\ufe0f', '٩', '𑁧', '1', '\u00ad', 'é', ' ', '12', '\u0302\u0303'];
    for (let n = 0; n < 12; n++) {
      let text = hostile(next, 3000 + Math.floor(next() * 6000));
      if (n % 2 === 0) text = Array.from(text, (c) => (next() < 0.3 ? crowded[Math.floor(next() * crowded.length)]! : c)).join('');
      const material = [
        { id: `long${n}`, text },
        { id: 'second', text: hostile(next, 50) },
      ];
      const from = Math.floor(next() * text.length);
      same(text.slice(from, from + 3000), material);
      same(hostile(next, 80), material);
    }
    // A digit and what a match goes on with after it, astral digits (two UTF-16 units), straddling
    // the end of the first piece at each of their places.
    for (const straddle of ['1\u0301\u0302', '٩\u200b\u0301', '𑁧\u0301', '\u{1D7CE}\u200b', '1\u200b\ufe0f', '\u200b\u200b٩']) {
      for (let shift = 0; shift <= straddle.length + 1; shift++) {
        const text = `${'ab '.repeat(6000).slice(0, 16_384 - shift)}${straddle} 12${straddle}34 ${'٩'.repeat(3)} end`;
        same(text, [{ id: 'm', text }]);
      }
    }
  });

  it("on real replies up to the summarizers' input cap (600,000 characters)", () => {
    const replies = readThreads(existsSync(SHARED) ? SHARED : DEMO_DATA).flatMap((t) => t.pairs.map((p) => p.assistant));
    const material: { id: string; text: string }[] = [];
    for (let i = 0, chars = 0; chars < 590_000; i++) {
      material.push({ id: String(i), text: replies[i % replies.length]! });
      chars += material[i]!.text.length + String(i).length;
    }
    const summary = extractiveSummary(material, 6000)!;
    same(summary, material);
    same(normalizeText(summary).toUpperCase(), material);
  });

  it('for digits next to marks, invisible characters and digits of other scripts, in every order', () => {
    const parts = ['9', '٩', '𑁧', '\u0301', '\u0302', '\u200b', '\u00ad', '\ufe0f', '٫', '٬', 'a', ' ', '1'];
    const texts: string[] = [];
    for (const a of parts) for (const b of parts) for (const c of parts) texts.push(`x 12${a}${b}${c}34 y`);
    for (const text of texts) same(text, [{ id: 'm', text: texts[(text.length * 7) % texts.length]! }]);
  });

  it('for a fact found at more places than are tried one by one (the regex search, the normalized material)', () => {
    const runs = (unit: string, times: number, tail: string) => [{ id: 'm1', text: `${unit.repeat(times)}${tail}` }];
    const summaries = ['It holds 1001 and 1001… and 100100 items, v1.0.1, 1,001 kg, `1001`, /a/1001.ts, x1001.'];
    const materials = [
      runs('a1001', 200, ''),
      runs('a1001', 200, ' 1001.'),
      runs('a1001', 200, ' 1001'),
      runs('1001.5 ', 200, '1001'),
      runs('é1001', 200, ' 1001 '),
      runs('\u{10400}1001 ', 200, ''),
      runs('\u{10400}1001', 200, ''),
      runs('共1001x', 200, ''),
      runs('1001a', 200, ' a1001 '),
      runs('/a/1001.ts/', 100, '/a/1001.ts'),
      runs('x1001.', 100, ' x1001'),
      runs('1,001kg ', 100, '1,001 kg'),
    ];
    for (const material of materials) for (const summary of summaries) same(summary, material);
  });
});
