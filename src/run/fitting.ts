/**
 * Reversible fitting of one Run's request: from the slots request-slots.ts lays
 * out, the forms (inline body, excerpt and reference, reference only) that keep
 * the request under its budget, cheapest loss first; and the exact measure of
 * what is sent.
 */
import { type RunCompactionPolicy, type RunRequest, type RunRequestItem, type ToolResultItem } from './types.ts';
import { type FitStep, type ReferenceMade } from './reports.ts';
import { toAnthropicRequest } from './wire.ts';
import { jsonBytes } from '../support/json.ts';
import { type Form, type Projection, type UnitSlot } from './request-slots.ts';

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

/** The smallest request reversible fitting can make of a projection, and what it consists of. */
export interface Floor {
  /** Wire bytes + response reserve with the compact catalog (when smaller) and every body in its smallest allowed form. */
  bytes: number;
  /** Envelope (model, system, tools, message frames), the smaller catalog and the response reserve. */
  envelope: number;
  /** The initial request and every correction (never compacted). */
  protected: number;
  /** Checkpoint summary items (text, note, ids and the account of their tool calls). */
  summaries: number;
  /** Model turns and tool units still shown (the newest groups always, the rest until compacted). */
  work: number;
  /** Bytes each visible group takes at the floor (model turn and its units), by model turn seq. */
  groupBytes: Map<number, number>;
}

/** The smallest form fitting may give a unit: older groups by reference, the newest by excerpt (else reference). */
function smallest(s: UnitSlot, olderThan: number): Form {
  const reduced = s.groupIndex < olderThan ? s.reference : (s.excerpt ?? s.reference);
  return reduced !== null && reduced.bytes < s.shown.bytes ? reduced : s.shown;
}

/**
 * The floor of a projection: what `fit` reaches when it has to go all the way
 * (compact catalog if smaller, every body it may reduce in its smallest form).
 * A fitted request with `extra` bytes more is at or under the target exactly
 * when `floor.bytes + extra <= targetBytes`, because fitting only ever stops
 * early once it is at or under the target.
 */
export function floorOf(p: Projection, policy: Readonly<RunCompactionPolicy>): Floor {
  const olderThan = p.visibleGroups.length - policy.keepRecentGroups;
  const envelope = p.envelopeBytes + Math.min(p.catalogFull.bytes, p.catalogCompact.bytes) + p.responseReserveBytes;
  let protectedBytes = 0;
  let summaries = 0;
  let work = 0;
  const groupBytes = new Map<number, number>();
  for (const s of p.slots) {
    let bytes: number;
    if (s.kind === 'fixed') {
      bytes = s.bytes;
      if (s.item.kind === 'user_request' || s.item.kind === 'correction') protectedBytes += bytes;
      else if (s.item.kind === 'checkpoint_summary') summaries += bytes;
      else work += bytes;
    } else {
      bytes = smallest(s, olderThan).bytes;
      work += bytes;
    }
    if (s.groupSeq !== null) groupBytes.set(s.groupSeq, (groupBytes.get(s.groupSeq) ?? 0) + bytes);
  }
  return { bytes: envelope + protectedBytes + summaries + work, envelope, protected: protectedBytes, summaries, work, groupBytes };
}

/**
 * Reversible fitting, then the request. Above the target: the compact
 * catalog; then older rereadable tool result bodies (outside the newest
 * `keepRecentGroups` groups, oldest first) replaced by references; then, still
 * above, bodies of the newest groups (oldest first) by their excerpt and
 * reference; until at or under the target. Nothing is lost: every replaced
 * body stays in the store.
 *
 * `lastResort` (only for the request handed out, see assemble.ts handedOut):
 * then, while still over the threshold, bodies of the newest groups by their
 * reference alone (oldest first, until at or under the threshold). Without
 * it, newest groups of many large results (three turns of 40 parallel
 * fetches: 285 KB of excerpts) were over the threshold for good, as no
 * request could be sent to make the next group that would let them age.
 * Compaction is planned and judged without it (floorOf keeps the excerpts):
 * it never makes room for a summary, nor changes what one saves.
 */
export function fit(p: Projection, policy: Readonly<RunCompactionPolicy>, lastResort = false): Fitted {
  let slotBytes = 0;
  for (const s of p.slots) slotBytes += s.kind === 'fixed' ? s.bytes : s.shown.bytes;
  let catalog: 'full' | 'compact' = 'full';
  const sizeWith = (slots: number, cat: 'full' | 'compact') =>
    p.envelopeBytes + slots + (cat === 'full' ? p.catalogFull.bytes : p.catalogCompact.bytes) + p.responseReserveBytes;

  let size = sizeWith(slotBytes, catalog);
  const steps: FitStep[] = [{ step: 'measure', bytesBefore: size, bytesAfter: size }];
  const chosen = new Map<UnitSlot, Form>();
  const references: ReferenceMade[] = [];
  /** Where each reduced unit's entry is in `references`. */
  const referenced = new Map<UnitSlot, number>();

  if (size > policy.targetBytes && p.catalogCompact.bytes < p.catalogFull.bytes) {
    const before = size;
    catalog = 'compact';
    size = sizeWith(slotBytes, catalog);
    steps.push({ step: 'shrink_catalog', bytesBefore: before, bytesAfter: size });
  }
  const olderThan = p.visibleGroups.length - policy.keepRecentGroups;
  const reduce = (step: 'reference_results' | 'excerpt_recent', older: boolean) => {
    if (size <= policy.targetBytes) return;
    const before = size;
    let made = 0;
    for (const s of p.slots) {
      if (size <= policy.targetBytes) break;
      if (s.kind !== 'unit' || s.groupIndex < olderThan !== older) continue;
      const form = smallest(s, olderThan);
      if (form === s.shown) continue;
      const saved = s.shown.bytes - form.bytes;
      chosen.set(s, form);
      size -= saved;
      made++;
      referenced.set(s, references.length);
      references.push({
        proposalId: s.unit.proposalId,
        resultId: s.unit.resultId!,
        version: s.unit.resultVersion!,
        savedBytes: saved,
        form: form === s.excerpt ? 'excerpt' : 'reference',
      });
    }
    if (made > 0) steps.push({ step, bytesBefore: before, bytesAfter: size });
  };
  reduce('reference_results', true);
  reduce('excerpt_recent', false);
  if (lastResort && size > policy.thresholdBytes) {
    const before = size;
    let made = 0;
    for (const s of p.slots) {
      if (size <= policy.thresholdBytes) break;
      if (s.kind !== 'unit' || s.groupIndex < olderThan || s.reference === null) continue;
      const current = chosen.get(s) ?? s.shown;
      if (s.reference.bytes >= current.bytes) continue;
      size -= current.bytes - s.reference.bytes;
      chosen.set(s, s.reference);
      made++;
      const reference: ReferenceMade = {
        proposalId: s.unit.proposalId,
        resultId: s.unit.resultId!,
        version: s.unit.resultVersion!,
        savedBytes: s.shown.bytes - s.reference.bytes,
        form: 'reference',
      };
      const at = referenced.get(s);
      if (at === undefined) references.push(reference);
      else references[at] = reference;
    }
    if (made > 0) steps.push({ step: 'reference_recent', bytesBefore: before, bytesAfter: size });
  }

  const groupBytes = new Map<number, number>();
  const bodies: Fitted['bodies'] = [];
  const messages: RunRequestItem[] = new Array(p.slots.length);
  for (let i = 0; i < p.slots.length; i++) {
    const s = p.slots[i]!;
    let item: RunRequestItem;
    let bytes: number;
    if (s.kind === 'fixed') {
      item = s.item;
      bytes = s.bytes;
    } else {
      const form = chosen.get(s) ?? s.shown;
      item = form.item;
      bytes = form.bytes;
      if (form === s.shown && s.shownBody) bodies.push({ index: i, resultId: s.unit.resultId!, version: s.unit.resultVersion! });
    }
    messages[i] = item;
    if (s.groupSeq !== null) groupBytes.set(s.groupSeq, (groupBytes.get(s.groupSeq) ?? 0) + bytes);
  }
  const cat = catalog === 'full' ? p.catalogFull : p.catalogCompact;
  const request: RunRequest = {
    model: p.input.model,
    system: p.input.system,
    tools: p.input.tools,
    messages,
    resultCatalog: cat.entries,
    resultCatalogOmitted: cat.omitted,
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

/**
 * The exact measure: the UTF-8 bytes of the body sent to the provider
 * (JSON.stringify(toAnthropicRequest(request))) plus the response reserve.
 */
export function measureRequest(request: RunRequest): number {
  return jsonBytes(toAnthropicRequest(request)) + request.responseReserveBytes;
}
