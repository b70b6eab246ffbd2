import { RANGE_SIZE } from '../conversation/plan.ts';
import { firstPairOf } from './to-anthropic.ts';
import type { ConversationReader } from './reader.ts';
import type { OmittedSpan, PairItem, ProjectionItem, SummaryItem, SummaryNotUsed } from './types.ts';

/**
 * The fidelity-first layout: which of a conversation's history one request
 * carries, raw or summarized, within a byte budget B. Fidelity is the first
 * objective; cache stability (layout.ts) is chosen only among layouts that
 * keep these rules, in this order of precedence:
 *
 * 1. The newest pairs are carried raw: at least the newest min(TAIL_PAIRS
 *    pairs, B / 2) of them (the tail floor). A pair that alone exceeds B / 2
 *    is the only exception: it comes if it fits what is left, else it is left
 *    out alone, with a note where it was (`too_large`).
 * 2. Older material is what is left out: the layout is a head (summaries of
 *    consecutive older ranges, each beside its ten user messages verbatim),
 *    then at most one stated gap of at most MAX_GAP_PAIRS pairs, then the
 *    tail (the newest pairs, raw). No pair newer than the oldest raw pair
 *    shown is left out but inside that gap or alone as too large. The head
 *    holds at most B / 2.
 * 3. The request uses its budget: a layout of a history larger than B fills
 *    at least FILL_RATIO of it (unless items too large for what is left
 *    stop it), and leaves the rest as room for the turns to come.
 * 4. One item too large for the room left never hides everything older: it
 *    is left out with its note, and older items that fit still come.
 *
 * How the room is shared: the tail first takes its floor; then the head
 * takes the newest usable summaries older than the floor (no further back
 * than MAX_GAP_PAIRS from it), up to B / 2 and leaving the tail at least
 * TAIL_SHARE of the fill; then the tail grows back towards the head with
 * what is left, and when it reaches the head, the head's newest summaries
 * give way to their raw pairs while those fit. So the whole history is sent raw when it fits,
 * summaries come in only for what raw pairs cannot reach, and the newest
 * history is never what goes first.
 */

/** Rule 1: the newest pairs carried raw, at most this many of them count for the floor. */
export const TAIL_PAIRS = 20;
/** Rule 3: a layout of a history larger than the budget fills at least this share of it. */
export const FILL_RATIO = 0.75;
/** Rule 2: the head (summaries with their user messages) holds at most this share of the budget. */
export const HEAD_MAX_RATIO = 0.5;
/** Rule 2: the gap between head and tail holds at most this many pairs (the newest 20 are never summarized, plus a range). */
export const MAX_GAP_PAIRS = 30;
/** The share of the fill the tail takes before the head is placed (newest raw pairs are worth most to the next turn). */
export const TAIL_SHARE = 0.6;

/** A layout being built: head oldest first, tail newest first. */
interface Draft {
  head: SummaryItem[];
  /** Raw pairs, newest first. */
  tail: PairItem[];
  /** Pairs left out alone inside the tail as too large. */
  skipped: number[];
  /** The next pair the tail would consider (older than everything it considered). */
  next: number;
  /** Whether the reader's index is broken below `next + 1` (then older pairs are 'inconsistent'). */
  stopped: boolean;
}

export interface Plan {
  /** Oldest first. */
  items: ProjectionItem[];
  omitted: OmittedSpan[];
  summaryNotUsed: SummaryNotUsed[];
  bytes: number;
  /** The summaries at the start (the part a later rewrite may keep in the cache). */
  head: SummaryItem[];
}

export interface PlanArgs {
  budgetBytes: number;
  /** Lay out up to this many bytes (the low-water mark); at least FILL_RATIO of the budget is filled when the history allows. */
  fillBytes: number;
  /** A head to keep (from the stored layout, verified now): the plan extends it at its end instead of choosing one. */
  keptHead?: readonly SummaryItem[];
}

/** Lays the history out anew under the rules above. */
export async function planLayout(reader: ConversationReader, args: PlanArgs): Promise<Plan> {
  const B = args.budgetBytes;
  const fill = Math.min(B, args.fillBytes);
  const minFill = Math.min(fill, Math.ceil(FILL_RATIO * B));
  const notUsed = new Map<number, SummaryNotUsed>();
  const d: Draft = { head: [...(args.keptHead ?? [])], tail: [], skipped: [], next: reader.count - 1, stopped: false };
  const bytes = (x: Draft) => reader.format.projectedBytes(...render(x, reader.count));

  // The whole history raw, when it fits the budget: nothing is summarized or left out.
  if (d.head.length === 0) {
    const whole: Draft = { ...d, tail: [], skipped: [] };
    if (
      (await extendTail(reader, whole, { limit: B, budget: B, minFill: 0, skip: false, floor: 0 }, bytes)) &&
      whole.next < 0 &&
      whole.skipped.length === 0
    ) {
      return finish(whole, reader, notUsed);
    }
  }

  // Rule 1: the floor.
  await tailFloor(reader, d, B, bytes);
  const headEnd = () => (d.head.length === 0 ? 0 : d.head.at(-1)!.toPair + 1);
  // The head, within half the budget and what the tail's share leaves of the fill (the share the raw pairs
  // between the head and the floor could take, at most).
  const floorBytes = bytes(d);
  const half = Math.floor(HEAD_MAX_RATIO * B);
  const capFor = (between: number) =>
    Math.min(half, fill - Math.min(Math.max(floorBytes, Math.floor(TAIL_SHARE * fill)), floorBytes + between));
  if (d.head.length === 0) await chooseHead(reader, d, { fill, capFor }, bytes, notUsed);
  else await growHead(reader, d, { fill, cap: half }, bytes, notUsed);
  await extendTail(reader, d, { limit: fill, budget: B, minFill, skip: true, floor: headEnd() }, bytes);
  if (d.head.length === 0 && !d.stopped && d.next >= 0) {
    // The tail grew back to where a head can sit behind it, with room left.
    await chooseHead(reader, d, { fill, capFor: () => half }, bytes, notUsed);
    await extendTail(reader, d, { limit: fill, budget: B, minFill, skip: true, floor: headEnd() }, bytes);
  }
  // The tail reached the head: its newest summaries give way to their raw pairs while those fit (up to the
  // budget while the fill is short of its floor); when a whole range does not fit and the fill is short, its
  // newest pairs that fit come raw, and the rest of it is the gap.
  while (args.keptHead === undefined && d.head.length > 0 && d.next + 1 === headEnd() && !d.stopped) {
    const last = d.head.at(-1)!;
    const trial: Draft = { ...d, head: d.head.slice(0, -1), tail: [...d.tail], skipped: [...d.skipped] };
    const whole =
      (await extendTail(reader, trial, { limit: fill, budget: B, minFill, skip: false, floor: last.fromPair }, bytes)) &&
      trial.next + 1 === last.fromPair;
    if (!whole && !(bytes(d) < minFill && bytes(trial) > bytes(d) && trial.tail.length > d.tail.length)) break;
    notUsed.set(last.fromPair, { fromPair: last.fromPair, toPair: last.toPair, reason: 'shown_raw', recordId: last.recordId });
    Object.assign(d, trial);
    if (!whole) break;
    await extendTail(reader, d, { limit: fill, budget: B, minFill, skip: true, floor: headEnd() }, bytes);
  }
  return finish(d, reader, notUsed);
}

/** Whether a plan keeps rule 2's bound on its gap (a kept head far behind a grown tail does not). */
export function gapWithinBound(plan: Plan): boolean {
  const gap = plan.omitted.find((s) => s.fromPair > 0 && s.reason === 'budget');
  return gap === undefined || gap.toPair - gap.fromPair + 1 <= MAX_GAP_PAIRS;
}

function finish(d: Draft, reader: ConversationReader, notUsed: Map<number, SummaryNotUsed>): Plan {
  const [items, omitted] = render(d, reader.count);
  return {
    items,
    omitted,
    bytes: reader.format.projectedBytes(items, omitted),
    head: d.head,
    summaryNotUsed: [...notUsed.values()].sort((a, b) => a.fromPair - b.fromPair),
  };
}

/** The items and omitted spans of a draft, as the adapter will place them. */
function render(d: Draft, count: number): [ProjectionItem[], OmittedSpan[]] {
  const tail = [...d.tail].reverse();
  const items: ProjectionItem[] = [...d.head, ...tail];
  const omitted: OmittedSpan[] = [];
  if (items.length === 0) {
    if (count > 0) omitted.push({ fromPair: 0, toPair: count - 1, reason: d.stopped ? 'inconsistent' : 'budget' });
    return [items, omitted];
  }
  const first = firstPairOf(items[0]!);
  if (first > 0) omitted.push({ fromPair: 0, toPair: first - 1, reason: d.stopped && d.head.length === 0 ? 'inconsistent' : 'budget' });
  const tailStart = tail.length === 0 ? count : tail[0]!.pairIndex;
  if (d.head.length > 0) {
    const headEnd = d.head.at(-1)!.toPair + 1;
    if (headEnd < tailStart) omitted.push({ fromPair: headEnd, toPair: tailStart - 1, reason: 'budget' });
  }
  // Pairs left out alone inside the tail (older than its start they are in the gap or before the start).
  const inside = d.skipped.filter((i) => i > tailStart).sort((a, b) => a - b);
  for (let j = 0; j < inside.length;) {
    let k = j;
    while (k + 1 < inside.length && inside[k + 1] === inside[k]! + 1) k++;
    omitted.push({ fromPair: inside[j]!, toPair: inside[k]!, reason: 'too_large' });
    j = k + 1;
  }
  omitted.sort((a, b) => a.fromPair - b.fromPair);
  return [items, omitted];
}

/** Rule 1: the newest pairs, raw, while fewer than TAIL_PAIRS and within half the budget (a pair over half ends it; extendTail may still take it). */
async function tailFloor(reader: ConversationReader, d: Draft, B: number, bytes: (d: Draft) => number): Promise<void> {
  const half = Math.floor(B / 2);
  let taken = 0;
  while (d.next >= 0 && taken < TAIL_PAIRS) {
    const slot = await reader.pair(d.next);
    if (slot.kind === 'missing') {
      d.stopped = true;
      return;
    }
    if (slot.kind === 'too_large') {
      d.skipped.push(d.next--);
      continue;
    }
    // A pair over half the budget is no part of the floor; it may still come if it fits (extendTail).
    if (reader.format.sizeOf(slot.item) > half) return;
    d.tail.push(slot.item);
    // The floor is the tail's own bytes (a kept head is not part of it).
    if (bytes({ ...d, head: [], skipped: [] }) > half && d.tail.length > 1) {
      d.tail.pop();
      return;
    }
    d.next -= 1;
    taken += 1;
  }
}

interface TailArgs {
  /** Take items while the layout stays within this many bytes... */
  limit: number;
  budget: number;
  /** ...or, past the limit, while it is below this and the item still leaves half the room of the budget. */
  minFill: number;
  /** Leave out an item that does not fit and go on with older ones (rule 4). */
  skip: boolean;
  /** The tail never reaches below this pair (the head's end). */
  floor: number;
}

/** Grows the tail back, oldest pair next; false when an item stopped it before `floor`. */
async function extendTail(reader: ConversationReader, d: Draft, a: TailArgs, bytes: (d: Draft) => number): Promise<boolean> {
  while (d.next >= a.floor) {
    const slot = await reader.pair(d.next);
    if (slot.kind === 'missing') {
      d.stopped = true;
      return false;
    }
    if (slot.kind === 'pair') {
      const before = bytes(d);
      d.tail.push(slot.item);
      const after = bytes(d);
      // Past the limit only to reach the fill's floor, and never into the second half of the room (the next turns' appends).
      if (after <= a.limit || (before < a.minFill && after <= a.budget - Math.floor((a.budget - a.minFill) / 2))) {
        d.next -= 1;
        continue;
      }
      d.tail.pop();
    }
    // Rule 4: left out alone while the request is still short of its fill, then older items that fit come.
    if (d.tail.length === 0) {
      d.skipped.push(d.next--);
      continue;
    }
    if (a.skip && bytes(d) < a.minFill) {
      d.skipped.push(d.next--);
      continue;
    }
    return false;
  }
  return true;
}

/** The newest usable summaries older than the tail, no further than MAX_GAP_PAIRS from it, up to half the budget. */
async function chooseHead(
  reader: ConversationReader,
  d: Draft,
  args: { fill: number; capFor: (between: number) => number },
  bytes: (d: Draft) => number,
  notUsed: Map<number, SummaryNotUsed>,
): Promise<void> {
  let a: HeadLimits = { fill: args.fill, cap: 0 };
  const tailStart = d.tail.length === 0 ? reader.count : d.tail.at(-1)!.pairIndex;
  // Bytes of the raw pairs between a head ending at `end` and the tail: what the tail could take before it.
  const between = async (end: number) => {
    let n = 0;
    for (let i = end; i <= d.next; i++) {
      const slot = await reader.pair(i);
      if (slot.kind === 'pair') n += reader.format.sizeOf(slot.item);
    }
    return n;
  };
  for (let k = Math.floor((d.next + 1) / RANGE_SIZE) - 1; k >= 0 && (k + 1) * RANGE_SIZE >= tailStart - MAX_GAP_PAIRS; k--) {
    const s = await summaryAt(reader, k, notUsed);
    if (s === 'changed') {
      d.stopped = true;
      return;
    }
    if (s === null) continue;
    a = { fill: args.fill, cap: args.capFor(await between(s.toPair + 1)) };
    if (!fitsHead(reader, d, [s], a, bytes)) {
      notUsed.set(s.fromPair, { fromPair: s.fromPair, toPair: s.toPair, reason: 'does_not_fit', recordId: s.recordId });
      return;
    }
    d.head = [s];
    break;
  }
  if (d.head.length === 0) return;
  for (let k = d.head[0]!.fromPair / RANGE_SIZE - 1; k >= 0; k--) {
    const s = await summaryAt(reader, k, notUsed);
    if (s === 'changed' || s === null || !fitsHead(reader, d, [s, ...d.head], a, bytes)) return;
    d.head.unshift(s);
  }
}

/** A kept head grows at its end by the usable summaries of the ranges right after it, older than the tail. */
async function growHead(
  reader: ConversationReader,
  d: Draft,
  a: HeadLimits,
  bytes: (d: Draft) => number,
  notUsed: Map<number, SummaryNotUsed>,
): Promise<void> {
  for (let k = (d.head.at(-1)!.toPair + 1) / RANGE_SIZE; (k + 1) * RANGE_SIZE <= d.next + 1; k++) {
    const s = await summaryAt(reader, k, notUsed);
    if (s === 'changed' || s === null || !fitsHead(reader, d, [...d.head, s], a, bytes)) return;
    d.head.push(s);
  }
}

/** What a head may take: its own bytes at most `cap`, the whole layout at most `fill`. */
interface HeadLimits {
  fill: number;
  cap: number;
}

function fitsHead(reader: ConversationReader, d: Draft, head: SummaryItem[], a: HeadLimits, bytes: (d: Draft) => number): boolean {
  return reader.format.projectedBytes(head, []) <= a.cap && bytes({ ...d, head }) <= a.fill;
}

async function summaryAt(
  reader: ConversationReader,
  k: number,
  notUsed: Map<number, SummaryNotUsed>,
): Promise<SummaryItem | null | 'changed'> {
  const s = await reader.summary(k);
  if (s === 'changed') {
    reader.changedAt(k * RANGE_SIZE + RANGE_SIZE - 1);
    return 'changed';
  }
  if (s.kind === 'usable') return s.item;
  const toPair = Math.min(k * RANGE_SIZE + RANGE_SIZE - 1, reader.count - 1);
  notUsed.set(k * RANGE_SIZE, {
    fromPair: k * RANGE_SIZE,
    toPair,
    reason: s.reason,
    ...(s.recordId === undefined ? {} : { recordId: s.recordId }),
  });
  return null;
}
