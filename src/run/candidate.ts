import type { RunState, ToolResultRefRow, UnitRow } from '../db/queries/run.ts';
import { RUN_PROMPT_VERSION } from '../gateway/prompts.ts';
import type { MaterialItem } from '../gateway/types.ts';
import { identityKeyOf, sourceHashOf } from './hash.ts';
import { cutBytes, hashGroup, isSettled, type Group, type Projection } from './project.ts';
import type { RunCompactionPolicy } from './types.ts';

/**
 * Candidate selection: which older work of the Run one summary may replace.
 *
 * - Only work groups (a model turn and all its tool units): a tool call is
 *   never separated from its result.
 * - Only groups after the newest checkpoint, so ranges never overlap, taken
 *   oldest first and contiguously: the first group that is not settled ends
 *   the candidate (a pending effect is never summarized, nor skipped over).
 * - Never the newest `keepRecentGroups` groups.
 * - The material is model text, tool proposals, settlements and result
 *   excerpts. Never the user's request or corrections, never an earlier
 *   summary. A failed or unknown effect is labelled so, never "completed".
 */
export interface Candidate {
  groups: Group[];
  seqs: number[];
  fromSeq: number;
  toSeq: number;
  groupHashes: string[];
  sourceHash: string;
  identityKey: string;
  predecessorId: string | null;
  segment: number;
  /** Upper estimate of the summarizer input (excerpts at their cap); exact once the material is built. */
  inputBytes: number;
  toolResultRefs: ToolResultRefRow[];
}

export type Selection = { ok: true; candidate: Candidate } | { ok: false; reason: string };

/** The largest candidate the policy allows now, or why there is none. */
export function selectCandidate(state: RunState, projection: Projection, policy: Readonly<RunCompactionPolicy>, model: string): Selection {
  if (projection.brokenCheckpoints.length > 0) return { ok: false, reason: 'broken_checkpoint' };
  const after = state.checkpoints.at(-1)?.toSeq ?? 0;
  const open = projection.visibleGroups.filter((g) => g.seq > after);
  const eligible = open.length - policy.keepRecentGroups;
  if (eligible <= 0) return { ok: false, reason: 'only_recent_work' };
  const chosen: Group[] = [];
  let inputBytes = 0;
  for (const g of open.slice(0, eligible)) {
    if (!isSettled(g)) {
      if (chosen.length === 0) return { ok: false, reason: `unsettled_work:${g.seq}` };
      break;
    }
    const bytes = materialBytes(materialOf(g, policy, null));
    if (chosen.length > 0 && inputBytes + bytes > policy.maxSummaryInputBytes) break;
    chosen.push(g);
    inputBytes += bytes;
  }
  return { ok: true, candidate: build(state, chosen, inputBytes, model) };
}

/**
 * The candidate over exactly `seqs` (a pinned identity: an earlier dispatch
 * with an unknown outcome), or null when those groups are no longer a valid
 * candidate here.
 */
export function candidateOver(state: RunState, projection: Projection, policy: Readonly<RunCompactionPolicy>, model: string, seqs: readonly number[]): Candidate | null {
  const after = state.checkpoints.at(-1)?.toSeq ?? 0;
  const open = projection.visibleGroups.filter((g) => g.seq > after);
  if (seqs.length === 0 || seqs.length > open.length - policy.keepRecentGroups) return null;
  const chosen: Group[] = [];
  let inputBytes = 0;
  for (let i = 0; i < seqs.length; i++) {
    const g = open[i];
    if (!g || g.seq !== seqs[i] || !isSettled(g)) return null;
    chosen.push(g);
    inputBytes += materialBytes(materialOf(g, policy, null));
  }
  return build(state, chosen, inputBytes, model);
}

function build(state: RunState, groups: Group[], inputBytes: number, model: string): Candidate {
  const last = state.checkpoints.at(-1) ?? null;
  const seqs = groups.map((g) => g.seq);
  const groupHashes = groups.map(hashGroup);
  const sourceHash = sourceHashOf(groupHashes);
  const fromSeq = seqs[0]!;
  const toSeq = seqs[seqs.length - 1]!;
  const predecessorId = last?.id ?? null;
  return {
    groups,
    seqs,
    fromSeq,
    toSeq,
    groupHashes,
    sourceHash,
    identityKey: identityKeyOf({ runId: state.run.id, predecessorId, fromSeq, toSeq, sourceHash, model, promptVersion: RUN_PROMPT_VERSION }),
    predecessorId,
    segment: (last?.segment ?? 0) + 1,
    inputBytes,
    toolResultRefs: groups.flatMap((g) => g.units.map(refOf)),
  };
}

function refOf(u: UnitRow): ToolResultRefRow {
  return {
    proposalId: u.proposalId,
    tool: u.tool,
    settlement: u.status as ToolResultRefRow['settlement'],
    dispatchId: u.dispatchId,
    resultId: u.resultId,
    version: u.resultVersion,
  };
}

/** The result versions whose excerpts the candidate's material shows. */
export function excerptRefs(c: Candidate): { resultId: string; version: number }[] {
  return c.groups.flatMap((g) => g.units.filter((u) => u.resultId !== null && u.inline).map((u) => ({ resultId: u.resultId!, version: u.resultVersion! })));
}

/** The summarizer input of a candidate, with result excerpts (keyed `id:version`, see runResultExcerpts). */
export function summaryMaterial(c: Candidate, policy: Readonly<RunCompactionPolicy>, excerpts: ReadonlyMap<string, string>): { items: MaterialItem[]; inputBytes: number } {
  const items = c.groups.flatMap((g) => materialOf(g, policy, excerpts));
  return { items, inputBytes: materialBytes(items) };
}

/**
 * Summarizer material of one settled group: the turn, then one item per tool
 * unit. With `excerpts` null, each excerpt is taken at its largest possible
 * size (an upper estimate of the input).
 */
function materialOf(g: Group, policy: Readonly<RunCompactionPolicy>, excerpts: ReadonlyMap<string, string> | null): MaterialItem[] {
  const items: MaterialItem[] = [{ id: `turn:${g.seq}`, text: `Model turn ${g.seq}:\n${cutBytes(g.text, policy.turnExcerptBytes)}` }];
  for (const u of g.units) items.push({ id: `tool:${u.proposalId}`, text: unitText(u, policy.toolExcerptBytes, excerpts) });
  return items;
}

function unitText(u: UnitRow, excerpt: number, excerpts: ReadonlyMap<string, string> | null): string {
  const lines = [
    `Tool call ${u.tool} (proposal ${u.proposalId}, dispatch ${u.dispatchId ?? 'none'})`,
    `Input: ${cutBytes(JSON.stringify(u.input) ?? 'null', excerpt)}`,
  ];
  if (u.status === 'settled') {
    lines.push('Settlement: settled (a result was recorded).');
  } else if (u.status === 'failed') {
    lines.push(`Settlement: FAILED${u.error ? `: ${cutBytes(u.error, excerpt)}` : ''}. This call did not complete.`);
  } else {
    lines.push('Settlement: UNKNOWN. The effect of this call is unknown; it must not be described as completed.');
  }
  if (u.resultId !== null) {
    lines.push(`Result ${u.resultId} version ${u.resultVersion}, ${u.bytes} bytes (rereadable by id).`);
    if (u.inline) {
      const body = excerpts === null ? 'x'.repeat(Math.min(u.bytes ?? 0, excerpt)) : excerpts.get(`${u.resultId}:${u.resultVersion}`) ?? '';
      lines.push(`Result excerpt: ${cutBytes(body, excerpt)}`);
    }
  }
  return lines.join('\n');
}

function materialBytes(items: readonly MaterialItem[]): number {
  let n = 0;
  for (const i of items) n += Buffer.byteLength(i.id, 'utf8') + Buffer.byteLength(i.text, 'utf8');
  return n;
}
