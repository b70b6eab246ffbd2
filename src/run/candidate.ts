import type { ToolResultRefRow } from '../db/queries/run-checkpoints.ts';
import type { UnitRow } from '../db/queries/run-history.ts';
import type { RunState } from '../db/queries/run-state.ts';
import { RUN_PROMPT_VERSION } from '../gateway/prompts.ts';
import type { MaterialItem } from '../support/summary-contract.ts';
import { itemBytes } from './wire.ts';
import { identityKeyOf, sourceHashOf } from './run-hash.ts';
import { floorOf, type Floor } from './fitting.ts';
import { minSummaryRoom, summaryItem, type ProjectedCheckpoint } from './checkpoint-item.ts';
import { cutBytes } from './cut-bytes.ts';
import { hashGroup, isSettled, type Group, type Projection } from './request-slots.ts';
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
 * - At most `maxSummaryInputBytes` of summarizer input (at least one group),
 *   unless it would then save less than `minSavingBytes` even with the
 *   smallest summary worth a request (`minSummaryBytes`): then it takes the
 *   next groups too, until it would (a chunk is never closed small in the
 *   request just because the next group's material is large).
 * - The material is model text, tool proposals, settlements and result
 *   excerpts. Never the user's request or corrections, never an earlier
 *   summary. A failed or unknown effect is labelled so, never "completed".
 */

/** Consecutive work groups one summary covers (a checkpoint to be), without its identity. */
export interface Chunk {
  groups: Group[];
  seqs: number[];
  fromSeq: number;
  toSeq: number;
  /** The checkpoint segment it would become. */
  segment: number;
  /** Upper estimate of the summarizer input (excerpts at their cap); exact once the material is built. */
  inputBytes: number;
  toolResultRefs: ToolResultRefRow[];
}

/** The chunk a summary is requested for now: bound to its sources and its predecessor. */
export interface Candidate extends Chunk {
  groupHashes: string[];
  sourceHash: string;
  identityKey: string;
  predecessorId: string | null;
}

export type Selection =
  | { ok: true; candidate: Candidate; /** Every compactable group now (the candidate's first), oldest first. */ compactable: Group[] }
  | { ok: false; reason: string };

/** Summarizer input sizes by model turn seq (a group's material never changes: settled work is final). */
export type MaterialSizes = Map<number, number>;

/** The largest candidate the policy allows now, or why there is none. `floor` is the projection's (floorOf). */
export function selectCandidate(
  state: RunState,
  projection: Projection,
  policy: Readonly<RunCompactionPolicy>,
  model: string,
  sizes: MaterialSizes = new Map(),
  floor: Floor = floorOf(projection, policy),
): Selection {
  const open = compactableGroups(state, projection, policy);
  if (!open.ok) return open;
  const [first] = cutChunks(open.groups, policy, sizes, floor, (state.checkpoints.at(-1)?.segment ?? 0) + 1);
  return { ok: true, candidate: build(state, first!.groups, first!.inputBytes, model), compactable: open.groups };
}

/**
 * The settled groups a checkpoint may cover now, oldest first: after the
 * newest checkpoint, before the newest `keepRecentGroups`, up to the first
 * group with a pending effect.
 */
function compactableGroups(
  state: RunState,
  projection: Projection,
  policy: Readonly<RunCompactionPolicy>,
): { ok: true; groups: Group[] } | { ok: false; reason: string } {
  if (projection.brokenCheckpoints.length > 0) return { ok: false, reason: 'broken_checkpoint' };
  const after = state.checkpoints.at(-1)?.toSeq ?? 0;
  const open = projection.visibleGroups.filter((g) => g.seq > after);
  const eligible = open.length - policy.keepRecentGroups;
  if (eligible <= 0) return { ok: false, reason: 'only_recent_work' };
  const groups: Group[] = [];
  for (const g of open.slice(0, eligible)) {
    if (!isSettled(g)) break;
    groups.push(g);
  }
  if (groups.length === 0) return { ok: false, reason: openUnitReason(open[0]!) };
  return { ok: true, groups };
}

/**
 * The first tool unit that is not settled in the work compaction could take
 * (after the newest checkpoint, before the newest groups), or null. Nothing
 * after it can be compacted until the application settles it (after a crash
 * between recording a turn and dispatching its calls: as failed or unknown).
 */
export function blockingUnit(
  state: RunState,
  projection: Projection,
  policy: Readonly<RunCompactionPolicy>,
): { seq: number; proposalId: string; status: string } | null {
  const after = state.checkpoints.at(-1)?.toSeq ?? 0;
  const open = projection.visibleGroups.filter((g) => g.seq > after);
  for (const g of open.slice(0, Math.max(0, open.length - policy.keepRecentGroups))) {
    const u = g.units.find((x) => x.status === 'proposed' || x.status === 'dispatched');
    if (u) return { seq: g.seq, proposalId: u.proposalId, status: u.status };
  }
  return null;
}

function openUnitReason(g: Group): string {
  const u = g.units.find((x) => x.status === 'proposed' || x.status === 'dispatched')!;
  return `open_tool_unit:${u.proposalId}: tool call ${u.proposalId} in turn ${g.seq} is ${u.status}, not settled; nothing after it can be compacted until it is settled (recordToolResult: settled, failed or unknown)`;
}

/**
 * `groups` cut oldest first into chunks of at most `maxSummaryInputBytes` of
 * input (at least one group each), a chunk going on past that bound while it
 * would save less than `minSavingBytes` at the floor with a summary of
 * `minSummaryBytes` (its allowance keeps its own saving at the minimum, see
 * Plan.allowance, so a chunk that cannot would never be sent).
 */
export function cutChunks(
  groups: readonly Group[],
  policy: Readonly<RunCompactionPolicy>,
  sizes: MaterialSizes,
  floor: Floor,
  segment: number,
): Chunk[] {
  const chunks: Chunk[] = [];
  let current: { groups: Group[]; inputBytes: number; floorBytes: number } | null = null;
  const savesEnough = (c: NonNullable<typeof current>) =>
    c.floorBytes - summaryBytes(bareCheckpoint(chunk(c.groups, c.inputBytes, segment + chunks.length), 0)) - minSummaryRoom(policy) >=
    policy.minSavingBytes;
  for (const g of groups) {
    let bytes = sizes.get(g.seq);
    if (bytes === undefined) {
      bytes = materialBytes(materialOf(g, policy, null));
      sizes.set(g.seq, bytes);
    }
    if (current !== null && current.inputBytes + bytes > policy.maxSummaryInputBytes && savesEnough(current)) {
      chunks.push(chunk(current.groups, current.inputBytes, segment + chunks.length));
      current = null;
    }
    current ??= { groups: [], inputBytes: 0, floorBytes: 0 };
    current.groups.push(g);
    current.inputBytes += bytes;
    current.floorBytes += floor.groupBytes.get(g.seq) ?? 0;
  }
  if (current !== null) chunks.push(chunk(current.groups, current.inputBytes, segment + chunks.length));
  return chunks;
}

/**
 * The candidate over exactly `seqs` (a pinned identity: an earlier dispatch
 * with an unknown outcome), or null when those groups are no longer a valid
 * candidate here.
 */
export function candidateOver(
  state: RunState,
  projection: Projection,
  policy: Readonly<RunCompactionPolicy>,
  model: string,
  seqs: readonly number[],
): Candidate | null {
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

function chunk(groups: Group[], inputBytes: number, segment: number): Chunk {
  const seqs = groups.map((g) => g.seq);
  return {
    groups,
    seqs,
    fromSeq: seqs[0]!,
    toSeq: seqs[seqs.length - 1]!,
    segment,
    inputBytes,
    toolResultRefs: groups.flatMap((g) => g.units.map(refOf)),
  };
}

function build(state: RunState, groups: Group[], inputBytes: number, model: string): Candidate {
  const last = state.checkpoints.at(-1) ?? null;
  const base = chunk(groups, inputBytes, (last?.segment ?? 0) + 1);
  const groupHashes = groups.map(hashGroup);
  const sourceHash = sourceHashOf(groupHashes);
  const predecessorId = last?.id ?? null;
  return {
    ...base,
    groupHashes,
    sourceHash,
    identityKey: identityKeyOf({
      runId: state.run.id,
      predecessorId,
      fromSeq: base.fromSeq,
      toSeq: base.toSeq,
      sourceHash,
      model,
      promptVersion: RUN_PROMPT_VERSION,
    }),
    predecessorId,
  };
}

/**
 * The least a checkpoint over `c` with the summary `text` would save, as the
 * net-benefit gate measures it, from the floor of the current request
 * (`requestBytes`): its groups' floor bytes less its summary item, and, when
 * the request is over the target, no more than it is over (fitting stops at
 * the target, so a request the summary takes under it gets bodies back). Used
 * to take a later boundary after a refused answer only once an answer that
 * large would pass.
 */
export function savingAtLeast(
  c: Chunk,
  text: string,
  ungrounded: readonly string[],
  floor: Floor,
  requestBytes: number,
  policy: Readonly<RunCompactionPolicy>,
): number {
  let groupBytes = 0;
  for (const seq of c.seqs) groupBytes += floor.groupBytes.get(seq) ?? 0;
  const saving = groupBytes - itemBytes(summaryItem(hypothetical(c, text, `${UUID_ZERO}${'0'.repeat(12)}`, ungrounded)), true).bytes;
  return requestBytes > policy.targetBytes ? Math.min(saving, requestBytes - policy.targetBytes) : saving;
}

/**
 * The groups of the shortest later boundary of `c`: its groups and the next
 * compactable ones, as few as make `passes` hold; null when none does yet.
 * `best` is the most `saving` gives over the boundaries tried. Chunks are
 * built without their material (cheap): the caller makes the candidate.
 */
export function laterBoundary(
  c: Candidate,
  compactable: readonly Group[],
  passes: (c: Chunk) => boolean,
  saving: (c: Chunk) => number,
): { seqs: number[] | null; best: number } {
  const at = compactable.findIndex((g) => g.seq === c.toSeq);
  let best = saving(c);
  if (at < 0) return { seqs: null, best };
  const groups = [...c.groups];
  for (const g of compactable.slice(at + 1)) {
    groups.push(g);
    const later = chunk(groups.slice(), 0, c.segment);
    if (passes(later)) return { seqs: later.seqs, best: saving(later) };
    best = Math.max(best, saving(later));
  }
  return { seqs: null, best };
}

/** The checkpoint a candidate (or a later chunk of a plan) would become, for measuring before it exists. */
export function hypothetical(candidate: Chunk, summary: string, id: string, ungrounded: readonly string[] = []): ProjectedCheckpoint {
  return {
    id,
    segment: candidate.segment,
    fromSeq: candidate.fromSeq,
    toSeq: candidate.toSeq,
    compactedSeqs: candidate.seqs,
    summary,
    toolResultRefs: candidate.toolResultRefs,
    ungrounded: [...ungrounded],
  };
}

const UUID_ZERO = '00000000-0000-4000-8000-';

/** A chunk as a checkpoint with an empty summary (ids of the same length as real ones: the same bytes). */
export function bareCheckpoint(c: Chunk, i: number): ProjectedCheckpoint {
  return {
    id: `${UUID_ZERO}${String(i).padStart(12, '0')}`,
    segment: c.segment,
    fromSeq: c.fromSeq,
    toSeq: c.toSeq,
    compactedSeqs: c.seqs,
    summary: '',
    toolResultRefs: c.toolResultRefs,
    ungrounded: [],
  };
}

/** Wire bytes of a checkpoint item with an empty summary, opening its own message (the most it can take). */
export function summaryBytes(cp: ProjectedCheckpoint): number {
  return itemBytes(summaryItem(cp), true).bytes;
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
  return c.groups.flatMap((g) =>
    g.units.filter((u) => u.resultId !== null && u.inline).map((u) => ({ resultId: u.resultId!, version: u.resultVersion! })),
  );
}

/** The summarizer input of a candidate, with result excerpts (keyed `id:version`, see runResultExcerpts). */
export function summaryMaterial(
  c: Candidate,
  policy: Readonly<RunCompactionPolicy>,
  excerpts: ReadonlyMap<string, string>,
): { items: MaterialItem[]; inputBytes: number } {
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
      const body =
        excerpts === null ? 'x'.repeat(Math.min(u.bytes ?? 0, excerpt)) : (excerpts.get(`${u.resultId}:${u.resultVersion}`) ?? '');
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
