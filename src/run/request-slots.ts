/**
 * Request assembly of one Run: the next request laid out in slots from
 * records only (not to be confused with src/projection, System 1's read
 * projection of a Conversation). Deterministic: the same records, inputs and
 * policy give byte-identical requests, which is what lets cold recovery
 * rebuild exactly what prepareRunRequest returned. Fitting (fitting.ts) then
 * chooses each slot's form.
 *
 * Sizes are those of the wire form (wire.ts, the body sent to the provider),
 * measured per item and per form, so fitting costs O(items), never
 * O(items x request). The total is exact: bytes(body) = the envelope with
 * empty messages (system prompt with the catalog) + the sum of the slots
 * (blocks, one comma each, the frame of each message an item opens) - 1.
 */
import { type CheckpointRow } from '../db/queries/run-checkpoints.ts';
import { type TurnRow, type UnitRow } from '../db/queries/run-history.ts';
import { type CatalogRow } from '../db/queries/run-results.ts';
import { type RunState } from '../db/queries/run-state.ts';
import { type ProjectedCheckpoint, summaryItem } from './checkpoint-item.ts';
import { cutBytes } from './cut-bytes.ts';
import { type HashedUnit, RUN_HASH_VERSION, groupHash, sourceHashOf } from './run-hash.ts';
import { type CatalogEntry, type RunCompactionPolicy, type RunRequestItem, type ToolResultItem } from './types.ts';
import { type Role, catalogLine, catalogText, escapedBytes, itemBytes, omittedLine } from './wire.ts';
import { jsonBytes } from '../support/json.ts';

/** What the application supplies for every request. */
export interface RequestInput {
  /** The model the request is for (recorded on checkpoints as the model route). */
  model: string;
  system: string;
  /** Tool schemas, as the application sends them. */
  tools: readonly unknown[];
}

export interface Group {
  seq: number;
  text: string;
  units: UnitRow[];
}

interface FixedSlot {
  kind: 'fixed';
  item: RunRequestItem;
  /** Wire bytes (see itemBytes). */
  bytes: number;
  /** The model turn seq of a model_turn item, for candidate sizing. */
  groupSeq: number | null;
}

/** A form a tool result can be shown in, with its wire bytes. */
export interface Form {
  item: ToolResultItem;
  bytes: number;
}

export interface UnitSlot {
  kind: 'unit';
  unit: UnitRow;
  groupSeq: number;
  /** Index among visible groups (0 = oldest). */
  groupIndex: number;
  /** Whether this item opens a user message (the frame is counted in every form). */
  opens: boolean;
  /** The default form: the body inline (up to inlineResultBytes), else (newest groups) its excerpt and reference, else the reference. */
  shown: Form;
  /** The default form shows the whole body (an empty placeholder until fillBodies). */
  shownBody: boolean;
  /** Excerpt and reference (bodies over excerptBytes in the newest groups). */
  excerpt: Form | null;
  /** Reference only (any stored result). */
  reference: Form | null;
}

type Slot = FixedSlot | UnitSlot;

export interface Projection {
  input: RequestInput;
  slots: Slot[];
  /** Work groups shown (not replaced by a usable checkpoint), oldest first. */
  visibleGroups: Group[];
  groups: Map<number, Group>;
  usedCheckpoints: string[];
  brokenCheckpoints: string[];
  /** The envelope with empty messages and no catalog, minus the one comma fewer than blocks. */
  envelopeBytes: number;
  catalogFull: Catalog;
  catalogCompact: Catalog;
  responseReserveBytes: number;
}

/** A bounded catalog: the newest entries that fit its bytes, and how many were left to read_result. */
export interface Catalog {
  entries: CatalogEntry[];
  omitted: number;
  /** Bytes it adds to the system prompt, escaped. */
  bytes: number;
}

const REFERENCE_NOTE = 'stored result: reread by id and version, or a byte or line range';
const EXCERPT_NOTE = 'the text above is its beginning only: reread the rest by id and version, or a byte or line range';
/** Labels in the catalog are cut to this many UTF-8 bytes. */
const CATALOG_LABEL_BYTES = 60;
const NO_EXCERPTS: ReadonlyMap<string, string> = new Map();

/** Work groups of a Run (model turns with their units, in order). */
export function groupsOf(turns: readonly TurnRow[], units: readonly UnitRow[]): Map<number, Group> {
  const groups = new Map<number, Group>();
  for (const t of turns) if (t.kind === 'model') groups.set(t.seq, { seq: t.seq, text: t.text, units: [] });
  for (const u of units) groups.get(u.turnSeq)?.units.push(u);
  return groups;
}

export function hashedUnits(g: Group): HashedUnit[] {
  return g.units.map((u) => ({
    proposalId: u.proposalId,
    tool: u.tool,
    input: u.input,
    status: u.status,
    dispatchId: u.dispatchId,
    resultId: u.resultId,
    resultVersion: u.resultVersion,
    resultSha256: u.sha256,
    error: u.error,
  }));
}

export function hashGroup(g: Group): string {
  return groupHash({ seq: g.seq, text: g.text, units: hashedUnits(g) });
}

/** A group is settled when every tool unit of it is settled, failed or unknown. */
export function isSettled(g: Group): boolean {
  return g.units.every((u) => u.status === 'settled' || u.status === 'failed' || u.status === 'unknown');
}

/** Whether a stored checkpoint still binds: its turns exist and hash as recorded. */
function checkpointHolds(cp: CheckpointRow, groups: Map<number, Group>): boolean {
  if (cp.hashVersion !== RUN_HASH_VERSION || cp.compactedSeqs.length !== cp.sourceHashes.length) return false;
  const hashes: string[] = [];
  for (let i = 0; i < cp.compactedSeqs.length; i++) {
    const g = groups.get(cp.compactedSeqs[i]!);
    if (!g || !isSettled(g)) return false;
    const h = hashGroup(g);
    if (h !== cp.sourceHashes[i]) return false;
    hashes.push(h);
  }
  return sourceHashOf(hashes) === cp.sourceHash;
}

/**
 * Assembles the projection: protected originals in place, each usable
 * checkpoint's summary where its first replaced turn was, the other groups in
 * full. `extra` is one or more checkpoints under evaluation, oldest first,
 * after the stored ones (trusted: built from these records).
 */
export function layOutRequest(
  state: RunState,
  input: RequestInput,
  policy: Readonly<RunCompactionPolicy>,
  extra?: ProjectedCheckpoint | readonly ProjectedCheckpoint[],
): Projection {
  const groups = groupsOf(state.turns, state.units);
  const compactedBy = new Map<number, ProjectedCheckpoint>();
  const usedCheckpoints: string[] = [];
  const brokenCheckpoints: string[] = [];
  for (const cp of state.checkpoints) {
    if (!checkpointHolds(cp, groups)) {
      brokenCheckpoints.push(cp.id);
      continue;
    }
    usedCheckpoints.push(cp.id);
    for (const seq of cp.compactedSeqs) compactedBy.set(seq, cp);
  }
  for (const cp of extra === undefined ? [] : Array.isArray(extra) ? extra : [extra as ProjectedCheckpoint]) {
    usedCheckpoints.push(cp.id);
    for (const seq of cp.compactedSeqs) compactedBy.set(seq, cp);
  }

  const visibleGroups: Group[] = [];
  for (const t of state.turns) {
    if (t.kind === 'model' && !compactedBy.has(t.seq)) visibleGroups.push(groups.get(t.seq)!);
  }
  const groupIndex = new Map(visibleGroups.map((g, i) => [g.seq, i]));

  const slots: Slot[] = [];
  // The role of the last item with blocks: an item of the other role opens a message.
  let role: Role | null = null;
  let blocks = 0;
  const fixed = (item: RunRequestItem, groupSeq: number | null = null) => {
    const size = itemBytes(item, true);
    const opens = size.blocks > 0 && role !== size.role;
    const bytes = opens ? size.bytes : itemBytes(item, false).bytes;
    if (size.blocks > 0) role = size.role;
    blocks += size.blocks;
    slots.push({ kind: 'fixed', item, bytes, groupSeq });
  };
  for (const t of state.turns) {
    if (t.kind === 'request') {
      fixed({ kind: 'user_request', seq: t.seq, text: t.text });
      continue;
    }
    if (t.kind === 'correction') {
      fixed({ kind: 'correction', seq: t.seq, revision: t.revision!, text: t.text });
      continue;
    }
    const cp = compactedBy.get(t.seq);
    if (cp) {
      if (cp.fromSeq === t.seq) fixed(summaryItem(cp));
      continue;
    }
    const g = groups.get(t.seq)!;
    const turn: RunRequestItem = {
      kind: 'model_turn',
      seq: g.seq,
      text: g.text,
      toolCalls: g.units.map((u) => ({ id: u.proposalId, name: u.tool, input: u.input })),
    };
    if (t.thinking) turn.thinking = t.thinking;
    fixed(turn, g.seq);
    for (const u of g.units) {
      const opens = role !== 'user';
      role = 'user';
      blocks++;
      const index = groupIndex.get(g.seq)!;
      slots.push(
        unitSlot(u, g.seq, index, opens, index >= visibleGroups.length - policy.keepRecentGroups ? state.excerpts : NO_EXCERPTS, policy),
      );
    }
  }

  endWithoutTrailingSpace(slots);
  const envelope = { model: input.model, system: input.system, tools: input.tools, messages: [] };
  return {
    input,
    slots,
    visibleGroups,
    groups,
    usedCheckpoints,
    brokenCheckpoints,
    envelopeBytes: jsonBytes(envelope) - (blocks > 0 ? 1 : 0),
    catalogFull: boundedCatalog(state.catalog, policy.catalogBytes, true),
    catalogCompact: boundedCatalog(state.catalog, Math.floor(policy.catalogBytes / 4), false),
    responseReserveBytes: policy.responseReserveBytes,
  };
}

/**
 * A request that ends with a text-only model turn (the application asks
 * again after it, as after `max_tokens`) makes that turn a prefill, and the
 * Messages API refuses a prefill that ends with white space (400, "final
 * assistant content cannot end with trailing whitespace"). The turn is sent
 * without it (its record keeps the text as the model wrote it); the slot's
 * bytes shrink by what was cut, so the total stays exact.
 */
function endWithoutTrailingSpace(slots: Slot[]): void {
  const end = slots.at(-1);
  if (end?.kind !== 'fixed' || end.item.kind !== 'model_turn' || end.item.toolCalls.length > 0) return;
  const text = end.item.text.trimEnd();
  if (text === end.item.text || text === '') return;
  const item: RunRequestItem = { ...end.item, text };
  slots[slots.length - 1] = { ...end, item, bytes: end.bytes - (itemBytes(end.item, true).bytes - itemBytes(item, true).bytes) };
}

function unitSlot(
  u: UnitRow,
  groupSeq: number,
  groupIndex: number,
  opens: boolean,
  excerpts: ReadonlyMap<string, string>,
  policy: Readonly<RunCompactionPolicy>,
): UnitSlot {
  const head = {
    kind: 'tool_result' as const,
    seq: u.turnSeq,
    proposalId: u.proposalId,
    tool: u.tool,
    dispatchId: u.dispatchId,
    status: u.status,
  };
  const withError: ToolResultItem = u.error === null ? head : { ...head, error: u.error };
  const form = (item: ToolResultItem): Form => ({ item, bytes: itemBytes(item, opens).bytes });
  const base = { kind: 'unit' as const, unit: u, groupSeq, groupIndex, opens };
  if (u.resultId === null || u.resultVersion === null)
    return { ...base, shown: form(withError), shownBody: false, excerpt: null, reference: null };
  // A size is never taken as zero: a result without its sizes is a broken record, not a small one.
  if (u.bytes === null || u.jsonBytes === null || u.lines === null || u.sha256 === null) {
    throw new Error(`result ${u.resultId} of tool call ${u.proposalId} has no recorded size`);
  }
  const meta = { resultId: u.resultId, version: u.resultVersion, bytes: u.bytes, lines: u.lines, sha256: u.sha256, label: u.label };
  const reference = form({ ...withError, reference: { ...meta, note: REFERENCE_NOTE } });
  // Externalized results are shown by reference only.
  if (!u.inline) return { ...base, shown: reference, shownBody: false, excerpt: null, reference };
  const raw = u.bytes > policy.excerptBytes ? excerpts.get(`${u.resultId}:${u.resultVersion}`) : undefined;
  const excerpt =
    raw === undefined
      ? null
      : form({ ...withError, excerpt: cutBytes(raw, policy.excerptBytes), reference: { ...meta, note: EXCERPT_NOTE } });
  // Over the inline limit, a body is never shown whole: the library's guarantee, not the app's.
  if (u.bytes > policy.inlineResultBytes) return { ...base, shown: excerpt ?? reference, shownBody: false, excerpt, reference };
  if (u.bytes === 0) return { ...base, shown: form({ ...withError, body: '' }), shownBody: false, excerpt, reference };
  // The body is fetched only if it is shown; its escaped size is known from the store.
  // Sized with a one-character stand-in (a non-empty body never reads "(empty)").
  const bytes = itemBytes({ ...withError, body: 'x' }, opens).bytes - 1 + (u.jsonBytes - 2);
  return { ...base, shown: { item: { ...withError, body: '' }, bytes }, shownBody: true, excerpt, reference };
}

/**
 * The newest version of each id, newest first while the catalog stays within
 * `maxBytes` (escaped, as the system prompt carries it), shown oldest first;
 * the rest is counted and listed by read_result. `labels` false: no labels.
 */
function boundedCatalog(rows: readonly CatalogRow[], maxBytes: number, labels: boolean): Catalog {
  const newest = new Map<string, CatalogRow>();
  for (const r of rows) {
    const seen = newest.get(r.resultId);
    if (!seen || seen.version < r.version) newest.set(r.resultId, r);
  }
  const all = rows
    .filter((r) => newest.get(r.resultId) === r)
    .map((r): CatalogEntry => ({
      resultId: r.resultId,
      version: r.version,
      bytes: r.bytes,
      lines: r.lines,
      label: labels && r.label !== null ? cutBytes(r.label.replace(/\s+/g, ' '), CATALOG_LABEL_BYTES) : null,
    }));
  // Escaped bytes add up (see anthropic.ts): the header, each line, two per "\n" between lines.
  const header = escapedBytes(catalogText([], 1)) - escapedBytes(omittedLine(1));
  const lineBytes = (e: CatalogEntry) => escapedBytes(catalogLine(e));
  let bytes = header - 2; // no line yet: no separator
  let taken = 0;
  for (let i = all.length - 1; i >= 0; i--) {
    const next = bytes + 2 + lineBytes(all[i]!);
    const withOmitted = i > 0 ? next + 2 + escapedBytes(omittedLine(i)) : next;
    if (withOmitted > maxBytes) break;
    bytes = next;
    taken++;
  }
  const entries = all.slice(all.length - taken);
  const omitted = all.length - taken;
  return { entries, omitted, bytes: escapedBytes(catalogText(entries, omitted)) };
}
