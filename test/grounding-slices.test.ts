import { existsSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { DEMO_DATA, readThreads } from '../src/cli/demo-threads.ts';
import { extractiveSummary } from '../src/gateway/offline.ts';
import { grounding } from '../src/grounding/ground.ts';
import { groundOutcome, groundOutcomeAsync, groundSummary, normalizeText } from '../src/grounding/index.ts';
import { inSlices } from '../src/grounding/slices.ts';
import type { MaterialItem, Outcome } from '../src/support/summary-contract.ts';

/**
 * groundOutcomeAsync runs the check of groundOutcome in slices, letting the
 * event loop in between them: it must find the same thing, on real replies
 * at the summarizers' input cap (600,000 characters) and on hostile material,
 * when it pauses at every step, and when several checks run at once (a pause
 * inside a loop over a shared regex's matches gives the regex to the other
 * checks).
 */

const SHARED = '/work/shared/data/oasst1-threads.jsonl';
const CAP = 600_000;
const HOSTILE_CHARS = 120_000;

/** Real assistant replies, one item each, up to the input cap (the demo sample repeated when the shared data is missing). */
function capMaterial(): MaterialItem[] {
  const replies = readThreads(existsSync(SHARED) ? SHARED : DEMO_DATA).flatMap((t) => t.pairs.map((p) => p.assistant));
  const items: MaterialItem[] = [];
  for (let i = 0, chars = 0; chars < CAP - 10_000; i++) {
    const text = replies[i % replies.length]!;
    items.push({ id: String(i), text });
    chars += text.length + String(i).length;
  }
  return items;
}

/** A summary's worth of shortened commit hashes, none in the material: every form of each is searched for. */
const inventedHashes = Array.from({ length: 80 }, (_, i) => (0xa1b2c30 + i * 7919).toString(16)).join(' ');

const ok = (text: string): Outcome => ({ kind: 'ok', text, model: 'm', usage: null, requestId: null });

/** The check paused at every step (a slice of 0 ms), beside the same check run whole. */
async function sameSliced(summary: string, material: readonly MaterialItem[]): Promise<void> {
  const sliced = await inSlices(grounding(summary, material), 0);
  const whole = groundSummary(summary, material);
  // Compared without printing the material when they differ.
  expect(sliced.checked.length).toBeGreaterThan(0);
  expect(JSON.stringify(sliced)).toBe(JSON.stringify(whole));
}

/** Runs of text that send every loop of the check past its pauses (more than 1,024 matches or places each). */
const HOSTILE_RUNS = [
  '\u200b',
  '٩',
  '1\u0301',
  '٩\u200b',
  'ﬁ1 ',
  'March 5-7 ',
  '5 000 ',
  '1-2% ',
  '$1-2 ',
  'ISO 8601 ',
  'between 10 and 20 kg ',
  '```\n',
  '`a1` ',
  'https://x.io/1 ',
  'a@b.co ',
  '/a/b1 ',
  '2024年3月5日 ',
  'USD 1,234 ',
  '1,234,567 ',
  '12.5 per cent ',
  '\u0301',
];

describe('grounding in slices', () => {
  const items = capMaterial();
  const offline = extractiveSummary(items, 6000, 'pair')!;

  it('finds what the whole check finds on real replies at the input cap', async () => {
    const own = items
      .slice(0, 8)
      .map((m) => m.text)
      .join('\n')
      .slice(0, 6000);
    for (const summary of [offline, normalizeText(offline).toUpperCase(), own, own.toUpperCase(), inventedHashes])
      await sameSliced(summary, items);
  });

  it('finds what the whole check finds on hostile material', async () => {
    const summary =
      'It read 1234 rows on 2024-03-05 (March 6), INV-2231 at 12.5%, 15 kg, $1,250.50, ISO-8601, 50,000 units, GPT4, a1b2c3d.';
    for (const run of HOSTILE_RUNS) {
      // Long enough that every loop over it pauses (a fifth of the cap: each check is run twice).
      const text = run.repeat(Math.ceil(HOSTILE_CHARS / run.length)).slice(0, HOSTILE_CHARS);
      await sameSliced(summary, [{ id: 'm', text }]);
      // The material as its own summary's start: most facts found, the rest looked up in every form.
      await sameSliced(text.slice(0, 400) + summary, [{ id: 'm', text }]);
    }
  });

  it("keeps each check's place in the regexes it shares with others running at the same time", async () => {
    // Materials whose loops pause at different places, each with facts only its last matches ground:
    // a check that resumed at another's place would miss them or read past them.
    const material = (n: number, offset: number): MaterialItem[] => [
      {
        id: `m${n}`,
        text: Array.from({ length: 1500 + n * 700 }, (_, i) => {
          const k = offset + i;
          return (
            `between ${k} and ${k + 1} kg, ISO ${k}, ${k % 1000} ${String(k % 1000).padStart(3, '0')} units, March ${1 + (k % 27)}-${2 + (k % 27)}, 2024, $${k}-${k + 2}, ` +
            `2-4pm, ٩${k}\u200b, https://h${k}.io/p, x${k}@mail.org, /srv/${k}/a.so`
          );
        }).join('; '),
      },
    ];
    const checks = [0, 1, 2, 3].map((n) => {
      const m = material(n, 1000 * (n + 1));
      const last = 1000 * (n + 1) + 1500 + n * 700 - 1;
      const summary =
        `${last} kg and ${last - 1} kg (between), ISO-${last}, March ${2 + (last % 27)}, 2024, $${last + 2}, ${last} kilograms, x${last}@MAIL.ORG, ` +
        `H${last}.IO/P, ${1000 * (n + 1)} kg, 999 kg, /srv/${last}/a.so, 2pm.`;
      return { m, summary };
    });
    const wholes = checks.map(({ m, summary }) => groundSummary(summary, m));
    const sliced = await Promise.all(checks.map(({ m, summary }) => inSlices(grounding(summary, m), 0)));
    expect(sliced).toEqual(wholes);
    // The facts the last matches ground are grounded (the test holds what it says it holds).
    for (const g of wholes) expect(g.checked.length - g.ungrounded.length).toBeGreaterThanOrEqual(8);
  });

  it('lets the event loop run between its steps', async () => {
    let ticks = 0;
    let ticking = true;
    const tick = () => {
      ticks++;
      if (ticking) setImmediate(tick);
    };
    setImmediate(tick);
    const summary = normalizeText(offline).toUpperCase();
    await inSlices(grounding(summary, items), 0);
    ticking = false;
    // The normalized material and its own facts alone are hundreds of steps at the cap.
    expect(ticks).toBeGreaterThan(100);
  });

  it("groundOutcomeAsync gives groundOutcome's outcome under either policy, and passes a non-ok answer through", async () => {
    for (const text of [offline, `${offline} It cost $9,999,999.99 on 2031-02-03.`, inventedHashes]) {
      for (const policy of ['reject', 'flag'] as const)
        expect(await groundOutcomeAsync(ok(text), items, policy)).toEqual(groundOutcome(ok(text), items, policy));
    }
    const invalid: Outcome = { kind: 'invalid', reason: 'empty', model: 'm', usage: null, requestId: null };
    expect(await groundOutcomeAsync(invalid, items)).toBe(invalid);
  });
});
