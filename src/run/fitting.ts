import type { CheckpointRow } from '../db/queries/run-checkpoints.ts';
import type { TurnRow, UnitRow } from '../db/queries/run-history.ts';
import type { CatalogRow } from '../db/queries/run-results.ts';
import type { RunState } from '../db/queries/run-state.ts';
import { groupHash, RUN_HASH_VERSION, sourceHashOf, type HashedUnit } from './hash.ts';
import type {
  CatalogEntry, CheckpointSummaryItem, FitStep, ReferenceMade, RunCompactionPolicy, RunRequest, RunRequestItem,
  ToolResultItem,
} from './types.ts';

/**
 * Request assembly and reversible fitting of one Run (not to be confused with
 * src/projection, System 1's read projection of a Conversation).
 *
 * Projection: the next request, assembled from records only. Deterministic:
 * the same records, inputs and policy give byte-identical requests, which is
 * what lets cold recovery rebuild exactly what prepareRunRequest returned.
 *
 * Sizes are measured per item (each item is serialized once per form), so
 * fitting costs O(items), never O(items x request). The total is exact:
 * JSON.stringify of an object is the concatenation of its parts, so
 * bytes(request) = bytes(envelope with empty arrays) + sum(item bytes) + commas.
 */

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

/** A checkpoint as projection uses it; `hypothetical` is one being evaluated before commit. */
export type ProjectedCheckpoint = Pick<CheckpointRow, 'id' | 'segment' | 'fromSeq' | 'toSeq' | 'compactedSeqs' | 'summary' | 'toolResultRefs'>;

interface FixedSlot {
  kind: 'fixed';
  item: RunRequestItem;
  bytes: number;
  /** The model turn seq of a model_turn item, for candidate sizing. */
  groupSeq: number | null;
}

interface UnitSlot {
  kind: 'unit';
  unit: UnitRow;
  groupSeq: number;
  /** Index among visible groups (0 = oldest). */
  groupIndex: number;
  inline: ToolResultItem;
  inlineBytes: number;
  /** The inline form shows the result body (a placeholder until fillBodies). */
  inlineBody: boolean;
  reference: ToolResultItem | null;
  referenceBytes: number;
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
  envelopeBytes: number;
  catalogFull: CatalogEntry[];
  catalogFullBytes: number;
  catalogCompact: CatalogEntry[];
  catalogCompactBytes: number;
  responseReserveBytes: number;
}

export interface Fitted {
  /** The request; bodies listed in `bodies` are empty placeholders until fillBodies. */
  request: RunRequest;
  /** Messages whose result body must be filled in, and from which result version. */
  bodies: { index: number; resultId: string; version: number }[];
  /** Serialized bytes + response reserve. */
  bytes: number;
  steps: FitStep[];
  references: ReferenceMade[];
  catalog: 'full' | 'compact';
  /** Bytes each visible group takes in this request (model turn and its units), by model turn seq. */
  groupBytes: Map<number, number>;
}

/** Said on every summary: it describes work; records stay the authority. */
export const SUMMARY_NOTE =
  'Non-authoritative, lossy summary of earlier model work in this run. It is not a record of what happened: ' +
  'the user request and corrections above/below are verbatim and prevail; tool effects count only as their ' +
  'settlement says; reread results by id and version.';

const REFERENCE_NOTE = 'stored result: reread by id and version, or a byte or line range';
/** Labels in the compact catalog are cut to this many UTF-8 bytes. */
const COMPACT_LABEL_BYTES = 60;

export function jsonBytes(value: unknown): number {
  return Buffer.byteLength(JSON.stringify(value), 'utf8');
}

/** Work groups of a Run (model turns with their units, in order). */
export function groupsOf(turns: readonly TurnRow[], units: readonly UnitRow[]): Map<number, Group> {
  const groups = new Map<number, Group>();
  for (const t of turns) if (t.kind === 'model') groups.set(t.seq, { seq: t.seq, text: t.text, units: [] });
  for (const u of units) groups.get(u.turnSeq)?.units.push(u);
  return groups;
}

export function hashedUnits(g: Group): HashedUnit[] {
  return g.units.map((u) => ({
    proposalId: u.proposalId, tool: u.tool, input: u.input, status: u.status, dispatchId: u.dispatchId,
    resultId: u.resultId, resultVersion: u.resultVersion, resultSha256: u.sha256, error: u.error,
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
export function project(state: RunState, input: RequestInput, policy: Readonly<RunCompactionPolicy>, extra?: ProjectedCheckpoint | readonly ProjectedCheckpoint[]): Projection {
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
  const fixed = (item: RunRequestItem, groupSeq: number | null = null) => slots.push({ kind: 'fixed', item, bytes: jsonBytes(item), groupSeq });
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
    fixed({ kind: 'model_turn', seq: g.seq, text: g.text, toolCalls: g.units.map((u) => ({ id: u.proposalId, name: u.tool, input: u.input })) }, g.seq);
    for (const u of g.units) slots.push(unitSlot(u, g.seq, groupIndex.get(g.seq)!));
  }

  const catalogFull: CatalogEntry[] = state.catalog.map((c) => ({ resultId: c.resultId, version: c.version, bytes: c.bytes, lines: c.lines, sha256: c.sha256, label: c.label }));
  const catalogCompact = compactCatalog(state.catalog);
  const envelope: RunRequest = { model: input.model, system: input.system, tools: input.tools, messages: [], resultCatalog: [], responseReserveBytes: policy.responseReserveBytes };
  return {
    input,
    slots,
    visibleGroups,
    groups,
    usedCheckpoints,
    brokenCheckpoints,
    envelopeBytes: jsonBytes(envelope),
    catalogFull,
    catalogFullBytes: listBytes(catalogFull),
    catalogCompact,
    catalogCompactBytes: listBytes(catalogCompact),
    responseReserveBytes: policy.responseReserveBytes,
  };
}

export function summaryItem(cp: ProjectedCheckpoint): CheckpointSummaryItem {
  return {
    kind: 'checkpoint_summary',
    checkpointId: cp.id,
    segment: cp.segment,
    fromSeq: cp.fromSeq,
    toSeq: cp.toSeq,
    authoritative: false,
    note: SUMMARY_NOTE,
    text: cp.summary,
    toolResults: cp.toolResultRefs.map((r) => ({ proposalId: r.proposalId, tool: r.tool, settlement: r.settlement, resultId: r.resultId, version: r.version })),
  };
}

function unitSlot(u: UnitRow, groupSeq: number, groupIndex: number): UnitSlot {
  const head = { kind: 'tool_result' as const, seq: u.turnSeq, proposalId: u.proposalId, tool: u.tool, dispatchId: u.dispatchId, status: u.status };
  const withError = u.error === null ? head : { ...head, error: u.error };
  // A size is never taken as zero: a result without its sizes is a broken record, not a small one.
  if (u.resultId !== null && (u.bytes === null || u.jsonBytes === null || u.lines === null || u.sha256 === null)) {
    throw new Error(`result ${u.resultId} of tool call ${u.proposalId} has no recorded size`);
  }
  const reference: ToolResultItem | null = u.resultId === null || u.resultVersion === null ? null : {
    ...withError,
    reference: { resultId: u.resultId, version: u.resultVersion, bytes: u.bytes!, lines: u.lines!, sha256: u.sha256!, label: u.label, note: REFERENCE_NOTE },
  };
  const referenceBytes = reference === null ? 0 : jsonBytes(reference);
  if (reference === null) {
    const bytes = jsonBytes(withError);
    return { kind: 'unit', unit: u, groupSeq, groupIndex, inline: withError, inlineBytes: bytes, inlineBody: false, reference: null, referenceBytes: bytes };
  }
  // Externalized results are shown by reference only.
  if (!u.inline) return { kind: 'unit', unit: u, groupSeq, groupIndex, inline: reference, inlineBytes: referenceBytes, inlineBody: false, reference, referenceBytes };
  // The body is fetched only if it is shown; its JSON size (quotes included) is known from the store.
  const inline: ToolResultItem = { ...withError, body: '' };
  const inlineBytes = jsonBytes(inline) - 2 + u.jsonBytes!;
  return { kind: 'unit', unit: u, groupSeq, groupIndex, inline, inlineBytes, inlineBody: true, reference, referenceBytes };
}

/** The newest version of each id, with a short label and no hash. */
function compactCatalog(rows: readonly CatalogRow[]): CatalogEntry[] {
  const newest = new Map<string, CatalogRow>();
  for (const r of rows) {
    const seen = newest.get(r.resultId);
    if (!seen || seen.version < r.version) newest.set(r.resultId, r);
  }
  return rows.filter((r) => newest.get(r.resultId) === r).map((r) => ({
    resultId: r.resultId, version: r.version, bytes: r.bytes, lines: r.lines, label: r.label === null ? null : cutBytes(r.label, COMPACT_LABEL_BYTES),
  }));
}

function listBytes(items: readonly unknown[]): number {
  let total = 0;
  for (const item of items) total += jsonBytes(item);
  return total + Math.max(0, items.length - 1);
}

/** The smallest request reversible fitting can make of a projection, and what it consists of. */
export interface Floor {
  /** Serialized bytes + response reserve with the compact catalog (when smaller) and every older rereadable body by reference. */
  bytes: number;
  /** Envelope (model, system, tools), the smaller catalog and the response reserve. */
  envelope: number;
  /** The initial request and every correction (never compacted). */
  protected: number;
  /** Checkpoint summary items (text, note, ids and tool-result references). */
  summaries: number;
  /** Model turns and tool units still shown (the newest groups always, the rest until compacted). */
  work: number;
  /** Bytes each visible group takes at the floor (model turn and its units, one comma each), by model turn seq. */
  groupBytes: Map<number, number>;
}

/**
 * The floor of a projection: what `fit` reaches when it has to go all the way
 * (compact catalog if smaller, every older body it may replace by its
 * reference). A fitted request with `extra` bytes more is at or under the
 * target exactly when `floor.bytes + extra <= targetBytes`, because fitting
 * only ever stops early once it is at or under the target. Every item counts
 * one comma (the first one's is the envelope's missing one), so the parts add
 * up to `bytes`.
 */
export function floorOf(p: Projection, policy: Readonly<RunCompactionPolicy>): Floor {
  const olderThan = p.visibleGroups.length - policy.keepRecentGroups;
  const envelope = p.envelopeBytes + Math.min(p.catalogFullBytes, p.catalogCompactBytes) + p.responseReserveBytes - (p.slots.length > 0 ? 1 : 0);
  let protectedBytes = 0;
  let summaries = 0;
  let work = 0;
  const groupBytes = new Map<number, number>();
  for (const s of p.slots) {
    let bytes: number;
    if (s.kind === 'fixed') {
      bytes = s.bytes + 1;
      if (s.item.kind === 'user_request' || s.item.kind === 'correction') protectedBytes += bytes;
      else if (s.item.kind === 'checkpoint_summary') summaries += bytes;
      else work += bytes;
    } else {
      bytes = (s.groupIndex < olderThan && s.reference !== null ? Math.min(s.inlineBytes, s.referenceBytes) : s.inlineBytes) + 1;
      work += bytes;
    }
    if (s.groupSeq !== null) groupBytes.set(s.groupSeq, (groupBytes.get(s.groupSeq) ?? 0) + bytes);
  }
  return { bytes: envelope + protectedBytes + summaries + work, envelope, protected: protectedBytes, summaries, work, groupBytes };
}

/**
 * Reversible fitting, then the request. Above the target: the compact catalog,
 * then older rereadable tool result bodies (outside the newest
 * `keepRecentGroups` groups, oldest first) replaced by references, until at or
 * under the target. Nothing is lost: every replaced body stays in the store.
 */
export function fit(p: Projection, policy: Readonly<RunCompactionPolicy>): Fitted {
  let slotBytes = 0;
  for (const s of p.slots) slotBytes += s.kind === 'fixed' ? s.bytes : s.inlineBytes;
  const commas = Math.max(0, p.slots.length - 1);
  let catalog: 'full' | 'compact' = 'full';
  const sizeWith = (slots: number, cat: 'full' | 'compact') =>
    p.envelopeBytes + slots + commas + (cat === 'full' ? p.catalogFullBytes : p.catalogCompactBytes) + p.responseReserveBytes;

  let size = sizeWith(slotBytes, catalog);
  const steps: FitStep[] = [{ step: 'measure', bytesBefore: size, bytesAfter: size }];
  const referenced = new Set<UnitSlot>();
  const references: ReferenceMade[] = [];

  if (size > policy.targetBytes && p.catalogCompactBytes < p.catalogFullBytes) {
    const before = size;
    catalog = 'compact';
    size = sizeWith(slotBytes, catalog);
    steps.push({ step: 'shrink_catalog', bytesBefore: before, bytesAfter: size });
  }
  if (size > policy.targetBytes) {
    const before = size;
    const olderThan = p.visibleGroups.length - policy.keepRecentGroups;
    for (const s of p.slots) {
      if (size <= policy.targetBytes) break;
      if (s.kind !== 'unit' || s.groupIndex >= olderThan || s.reference === null || s.referenceBytes >= s.inlineBytes) continue;
      const saved = s.inlineBytes - s.referenceBytes;
      referenced.add(s);
      slotBytes -= saved;
      size -= saved;
      references.push({ proposalId: s.unit.proposalId, resultId: s.unit.resultId!, version: s.unit.resultVersion!, savedBytes: saved });
    }
    if (references.length > 0) steps.push({ step: 'reference_results', bytesBefore: before, bytesAfter: size });
  }

  const groupBytes = new Map<number, number>();
  const bodies: Fitted['bodies'] = [];
  const messages: RunRequestItem[] = new Array(p.slots.length);
  for (let i = 0; i < p.slots.length; i++) {
    const s = p.slots[i]!;
    let item: RunRequestItem;
    let bytes: number;
    let seq: number | null;
    if (s.kind === 'fixed') {
      item = s.item;
      bytes = s.bytes;
      seq = s.groupSeq;
    } else {
      const useRef = referenced.has(s);
      item = useRef ? s.reference! : s.inline;
      bytes = useRef ? s.referenceBytes : s.inlineBytes;
      seq = s.groupSeq;
      if (!useRef && s.inlineBody) bodies.push({ index: i, resultId: s.unit.resultId!, version: s.unit.resultVersion! });
    }
    messages[i] = item;
    if (seq !== null) groupBytes.set(seq, (groupBytes.get(seq) ?? 0) + bytes + 1);
  }
  const request: RunRequest = {
    model: p.input.model,
    system: p.input.system,
    tools: p.input.tools,
    messages,
    resultCatalog: catalog === 'full' ? p.catalogFull : p.catalogCompact,
    responseReserveBytes: p.responseReserveBytes,
  };
  return { request, bodies, bytes: size, steps, references, catalog, groupBytes };
}

/**
 * The request with its result bodies in place (`bodies` keyed `id:version`).
 * @throws Error when a body is missing (results are immutable: a bug, not a race).
 */
export function fillBodies(fitted: Fitted, bodies: ReadonlyMap<string, string>): RunRequest {
  if (fitted.bodies.length === 0) return fitted.request;
  const messages = fitted.request.messages.slice();
  for (const { index, resultId, version } of fitted.bodies) {
    const body = bodies.get(`${resultId}:${version}`);
    if (body === undefined) throw new Error(`result ${resultId} version ${version} has no body`);
    messages[index] = { ...(messages[index] as ToolResultItem), body };
  }
  return { ...fitted.request, messages };
}

/** The exact measure: serialized UTF-8 bytes plus the response reserve (used by tests and as a cross-check). */
export function measureRequest(request: RunRequest): number {
  return Buffer.byteLength(JSON.stringify(request), 'utf8') + request.responseReserveBytes;
}

/** `text` cut to at most `maxBytes` UTF-8 bytes at a character boundary (with `…` when cut, counted in). */
export function cutBytes(text: string, maxBytes: number): string {
  // Fast path: even at 3 bytes per UTF-16 unit it fits.
  if (text.length * 3 <= maxBytes) return text;
  const head = text.length > maxBytes ? text.slice(0, maxBytes) : text;
  const buf = Buffer.from(head, 'utf8');
  if (head.length === text.length && buf.length <= maxBytes) return text;
  const room = Math.max(0, maxBytes - 3); // '…' is 3 bytes
  let end = Math.min(room, buf.length);
  while (end > 0 && (buf[end]! & 0xc0) === 0x80) end--;
  return buf.toString('utf8', 0, end) + '…';
}
