import { mkdir, readFile, writeFile } from 'node:fs/promises';
import type { Spread } from './stats.ts';

/**
 * Terminology
 * - Figure: one measured quantity (pairs/s, ms, bytes), median/min/max over repetitions.
 * - Headline: a ratio of a figure to its baseline measured in the same run,
 *   round by round, with the goal it is held to (if any).
 * - Result: what one benchmark (P1..P6) produced, or why it was skipped.
 */

export interface Figure {
  label: string;
  unit: string;
  value: Spread;
}

export interface Goal {
  op: '>=' | '<=';
  target: number;
}

export interface Headline {
  label: string;
  ratio: Spread;
  /** Null for an informational ratio. */
  goal: Goal | null;
  /** What the goal is held against, measured in the same run (the floor a cheaper implementation could not go below), printed beside it. */
  floor?: string;
}

export interface BenchResult {
  id: string;
  title: string;
  status: 'ok' | 'skipped' | 'error';
  /** Why it was skipped or failed. */
  reason?: string;
  seconds: number;
  params: Record<string, unknown>;
  figures: Figure[];
  headlines: Headline[];
  notes: string[];
  /** When the run that measured it started (a run with --only keeps the other benchmarks' last results). */
  measuredAt?: string;
}

export interface RunInfo {
  date: string;
  mode: 'quick' | 'full';
  node: string;
  postgres: string;
  postgresSettings: Record<string, string>;
  server: 'embedded' | 'DATABASE_URL';
  package: { name: string; version: string; graphileWorker: string; pg: string };
  machine: { cores: number; cpu: string; memoryMiB: number; platform: string };
  dataset: string;
  seconds: number;
}

/** Whether a headline meets its goal (null when it has none). Compared on the median; a goal whose ratio could not be measured is missed. */
export function met(h: Headline): boolean | null {
  if (h.goal === null) return null;
  if (!Number.isFinite(h.ratio.median)) return false;
  return h.goal.op === '>=' ? h.ratio.median >= h.goal.target : h.ratio.median <= h.goal.target;
}

/** The headlines that have a goal and miss it. */
export function missed(results: readonly BenchResult[]): { id: string; headline: Headline }[] {
  return results.flatMap((r) => r.headlines.filter((h) => met(h) === false).map((headline) => ({ id: r.id, headline })));
}

/** A figure as printed; '-' for none (NaN, which the results file keeps as null). */
function fmt(x: number | null): string {
  if (x === null || Number.isNaN(x)) return '-';
  const abs = Math.abs(x);
  if (abs >= 1000) return Math.round(x).toLocaleString('en-US');
  if (abs >= 100) return x.toFixed(0);
  if (abs >= 10) return x.toFixed(1);
  if (abs >= 1) return x.toFixed(2);
  return x.toFixed(3);
}

const goalText = (g: Goal | null) => (g === null ? '' : `${g.op} ${g.target}`);
const metText = (m: boolean | null) => (m === null ? '' : m ? 'met' : 'MISSED');

/** The results as rows: one per figure and one per headline (ratios marked with x). */
export function rows(results: readonly BenchResult[]): string[][] {
  const out: string[][] = [];
  for (const r of results) {
    if (r.status !== 'ok') {
      out.push([r.id, `${r.status}: ${r.reason ?? ''}`, '', '', '', '', '', '', '']);
      continue;
    }
    for (const f of r.figures) {
      out.push([r.id, `${f.label} (${f.unit})`, fmt(f.value.median), fmt(f.value.min), fmt(f.value.max), String(f.value.n), '', '', '']);
    }
    for (const h of r.headlines) {
      out.push([
        r.id,
        `**${h.label}** (ratio)`,
        `${fmt(h.ratio.median)}x`,
        `${fmt(h.ratio.min)}x`,
        `${fmt(h.ratio.max)}x`,
        String(h.ratio.n),
        goalText(h.goal),
        metText(met(h)),
        h.floor ?? '',
      ]);
    }
  }
  return out;
}

const HEADER = ['bench', 'measure', 'median', 'min', 'max', 'n', 'goal', 'status', 'floor (same run)'];

/** A plain-text table for the terminal. */
export function textTable(results: readonly BenchResult[]): string {
  const all = [HEADER, ...rows(results).map((r) => r.map((c) => c.replace(/\*\*/g, '')))];
  const widths = HEADER.map((_, i) => Math.max(...all.map((r) => r[i]!.length)));
  const line = (r: string[]) =>
    r
      .map((c, i) => (i >= 2 && i <= 5 ? c.padStart(widths[i]!) : c.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(all[0]!), widths.map((w) => '-'.repeat(w)).join('  '), ...all.slice(1).map(line)].join('\n');
}

/** A Markdown table. */
export function markdownTable(results: readonly BenchResult[]): string {
  const esc = (c: string) => c.replace(/\|/g, '\\|');
  return [
    `| ${HEADER.join(' | ')} |`,
    `|${HEADER.map((_, i) => (i >= 2 && i <= 5 ? '---:' : '---')).join('|')}|`,
    ...rows(results).map((r) => `| ${r.map(esc).join(' | ')} |`),
  ].join('\n');
}

/** The whole report as Markdown: run information, table, notes per benchmark. */
export function markdownReport(info: RunInfo, results: readonly BenchResult[]): string {
  const settings = Object.entries(info.postgresSettings)
    .map(([k, v]) => `${k}=${v}`)
    .join(', ');
  const lines = [
    `# sourcebound benchmarks (${info.mode} mode)`,
    '',
    `- date: ${info.date}`,
    `- ${info.package.name} ${info.package.version}, graphile-worker ${info.package.graphileWorker}, pg ${info.package.pg}`,
    `- node ${info.node}, PostgreSQL ${info.postgres} (${info.server}; ${settings})`,
    `- machine: ${info.machine.cores} cores (${info.machine.cpu}), ${info.machine.memoryMiB} MiB, ${info.machine.platform}`,
    `- data: ${info.dataset}`,
    `- total time: ${info.seconds.toFixed(0)} s`,
    '',
    'Figures: median of the repetitions, with min and max. Ratios: per-round ratio to a baseline measured in the same run, interleaved.',
    '',
    markdownTable(results),
    '',
  ];
  for (const r of results) {
    lines.push(`## ${r.id}: ${r.title}`, '');
    if (r.status !== 'ok') lines.push(`${r.status}: ${r.reason ?? ''}`, '');
    const params = Object.entries(r.params)
      .map(([k, v]) => `${k}=${typeof v === 'object' ? JSON.stringify(v) : String(v)}`)
      .join(', ');
    if (params) lines.push(`Parameters: ${params}. Took ${r.seconds.toFixed(1)} s.`, '');
    if (r.measuredAt !== undefined && r.measuredAt !== info.date)
      lines.push(`Measured in an earlier run (${r.measuredAt}); this run did not include it.`, '');
    for (const n of r.notes) lines.push(`- ${n}`);
    if (r.notes.length > 0) lines.push('');
  }
  return lines.join('\n');
}

/**
 * The results to write: this run's, and for the benchmarks it did not run
 * (--only) the last ones written in `dir`, in `order`.
 */
export async function withEarlierResults(dir: string, run: readonly BenchResult[], order: readonly string[]): Promise<BenchResult[]> {
  let earlier: BenchResult[] = [];
  try {
    const json = JSON.parse(await readFile(`${dir}/latest.json`, 'utf8')) as {
      info: RunInfo;
      results: (BenchResult & { headlines: (Headline & { met?: unknown })[] })[];
    };
    earlier = json.results.map((r) => ({
      ...r,
      measuredAt: r.measuredAt ?? json.info.date,
      headlines: r.headlines.map(({ label, ratio, goal, floor }) => ({ label, ratio, goal, ...(floor === undefined ? {} : { floor }) })),
    }));
  } catch {
    // No earlier results (or unreadable): this run's alone.
  }
  const ran = new Set(run.map((r) => r.id));
  const all = [...run, ...earlier.filter((r) => !ran.has(r.id))];
  return all.sort((a, b) => order.indexOf(a.id) - order.indexOf(b.id));
}

/** Writes latest.json and latest.md into `dir`. */
export async function writeResults(dir: string, info: RunInfo, results: readonly BenchResult[]): Promise<void> {
  await mkdir(dir, { recursive: true });
  const json = {
    info,
    results: results.map((r) => ({ ...r, headlines: r.headlines.map((h) => ({ ...h, met: met(h) })) })),
  };
  await writeFile(`${dir}/latest.json`, `${JSON.stringify(json, null, 2)}\n`);
  await writeFile(`${dir}/latest.md`, markdownReport(info, results));
}
