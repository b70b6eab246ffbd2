import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';

/**
 * Figures of one scenario. Each scenario file writes its own part file
 * (results/parts/<id>.json) before it asserts, so a failing scenario still
 * shows its numbers; the suite's global teardown (report.ts) joins the parts
 * into results/latest.{md,json}.
 */

export const RESULTS_DIR = fileURLToPath(new URL('../results/', import.meta.url));
export const PARTS_DIR = join(RESULTS_DIR, 'parts');

/** The figures that must be 0 in every scenario (asserted). */
export const ZERO_KEYS = [
  'duplicateCompleted',
  'overTwoSpent',
  'invariantViolations',
  'stuckClaims',
  'crossScopeRows',
  'acceptedBadSummaries',
  'completedRowMutations',
  'settledRowMutations',
  'completedWithoutOk',
  'ledgerMismatch',
  'openAttemptMismatch',
  'foreignSources',
  'pairsDrift',
] as const;
export type ZeroKey = (typeof ZERO_KEYS)[number];

export interface ScenarioFigures {
  /** e.g. `1-sigkill-storm`. */
  id: string;
  title: string;
  size: 'quick' | 'full';
  wallSeconds: number;
  conversations: number;
  pairs: number;
  /** Plannable ranges at the end. */
  ranges: number;
  completedRanges: number;
  failedRanges: number;
  /** Messages API requests the server received. */
  modelRequests: number;
  attempts: number;
  spentAttempts: number;
  /** Attempt rows by outcome, e.g. { ok: 80, unknown: 3, deferred: 12 }. */
  outcomes: Record<string, number>;
  /** What was done to the system: kills, terminations, outage seconds... */
  faults: Record<string, number | string>;
  /** Worker processes that exited without being told to. */
  unexpectedExits: number;
  zero: Record<ZeroKey, number>;
  /** Whether TRUNCATE ... CASCADE of the summaries table went through (rolled back at once). */
  truncateAccepted: boolean;
  notes: string[];
}

export function writeScenarioFigures(figures: ScenarioFigures): void {
  mkdirSync(PARTS_DIR, { recursive: true });
  writeFileSync(join(PARTS_DIR, `${figures.id}.json`), `${JSON.stringify(figures, null, 2)}\n`);
}

export function readScenarioFigures(): ScenarioFigures[] {
  let files: string[];
  try {
    files = readdirSync(PARTS_DIR)
      .filter((f) => f.endsWith('.json'))
      .sort(byNumber);
  } catch {
    return [];
  }
  return files.map((f) => JSON.parse(readFileSync(join(PARTS_DIR, f), 'utf8')) as ScenarioFigures);
}

function byNumber(a: string, b: string): number {
  return Number.parseInt(a, 10) - Number.parseInt(b, 10) || a.localeCompare(b);
}

const ZERO_LABELS: Record<ZeroKey, string> = {
  duplicateCompleted: 'dup completed',
  overTwoSpent: '>2 spent',
  invariantViolations: 'invariant viol. (pairs)',
  stuckClaims: 'stuck claims',
  crossScopeRows: 'cross-scope rows',
  acceptedBadSummaries: 'bad accepted',
  completedRowMutations: 'completed-row UPDATE/DELETE ok',
  settledRowMutations: 'failed/attempt-row UPDATE/DELETE ok',
  completedWithoutOk: 'completed w/o ok attempt',
  ledgerMismatch: 'ledger mismatch',
  openAttemptMismatch: 'open-attempt mismatch',
  foreignSources: 'foreign sources',
  pairsDrift: 'pairs drift',
};

/** The Markdown report: one table of workload and outcomes, one of the figures that must be 0. */
export function renderMarkdown(all: ScenarioFigures[], meta: { wallSeconds: number; size: string; date: string }): string {
  const lines: string[] = [];
  lines.push(`# Fault-injection figures (${meta.size} sizes, ${meta.date})`, '');
  lines.push(`Suite wall time: ${meta.wallSeconds.toFixed(0)} s.`, '');
  lines.push(
    '| # | scenario | conv | pairs | ranges | completed | failed | model req | attempts (spent) | outcomes | faults injected | unexpected exits | wall s |',
  );
  lines.push('|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---:|');
  for (const f of all) {
    const outcomes = Object.entries(f.outcomes)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ');
    const faults = Object.entries(f.faults)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ');
    lines.push(
      `| ${f.id.split('-')[0]} | ${f.title} | ${f.conversations} | ${f.pairs} | ${f.ranges} | ${f.completedRanges} | ${f.failedRanges} | ${f.modelRequests} | ${f.attempts} (${f.spentAttempts}) | ${outcomes} | ${faults} | ${f.unexpectedExits} | ${f.wallSeconds.toFixed(0)} |`,
    );
  }
  lines.push('', 'Figures that must be 0 (asserted after every scenario):', '');
  lines.push(`| figure | ${all.map((f) => f.id.split('-')[0]).join(' | ')} |`);
  lines.push(`|---|${all.map(() => '---:').join('|')}|`);
  for (const key of ZERO_KEYS) lines.push(`| ${ZERO_LABELS[key]} | ${all.map((f) => f.zero[key] ?? '-').join(' | ')} |`);
  lines.push(`| TRUNCATE ... CASCADE accepted | ${all.map((f) => (f.truncateAccepted ? 'yes' : 'no')).join(' | ')} |`);
  const notes = all.filter((f) => f.notes.length > 0);
  if (notes.length > 0) {
    lines.push('', 'Notes:', '');
    for (const f of notes) for (const n of f.notes) lines.push(`- ${f.id}: ${n}`);
  }
  return `${lines.join('\n')}\n`;
}
