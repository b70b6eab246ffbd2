import type Anthropic from '@anthropic-ai/sdk';
import type { ConversationProjection, OmittedReason, OmittedSpan, ProjectionItem } from './types.ts';
import { gapNote, omittedNote } from './wording.ts';
import { jsonBytes } from '../support/json.ts';
import { neutralizeMarkers } from '../support/markers.ts';

/**
 * The Messages API adapter, and the byte accounting the projection budgets
 * with. Both are built from the same functions below (itemMessages,
 * noteBlock), so the cost the walk charges for an item is exactly the bytes
 * the adapter produces for it.
 *
 * Layout: every item is one user turn followed by one assistant turn, so the
 * history starts with a user turn, alternates strictly and ends with an
 * assistant turn.
 * - pair: user [its text], assistant [its text]
 * - summary: user [ten text blocks, one per original user message, verbatim],
 *   assistant [the label, the summary]
 * - omitted history: a note text block in front of the first user turn's
 *   blocks (never merged into a user message's text).
 * - prompt caching: by default the last block of the last turn carries a
 *   `cache_control` breakpoint, so the whole history is cached and the next
 *   request, whose history extends this one (src/projection/layout.ts), reads
 *   it from the cache. `{ cacheBreakpoint: false }` leaves it out.
 *
 * Use: `messages: [...toAnthropicMessages(projection), { role: 'user', content: next }]`.
 * The caller's new user message goes after the last (assistant) turn.
 *
 * Byte rule: `messagesBytes(messages)` is the UTF-8 length of
 * `JSON.stringify(messages)`, and 0 for an empty history (nothing is sent;
 * `[]` itself is the request's own syntax). For a non-empty history it
 * overcounts what the messages add to a request by one byte (two brackets
 * counted, one comma needed), so it is conservative.
 * With n items and M = 2n messages m1..mM:
 *   JSON = "[" m1 "," m2 ... "]" = 2 + sum|mi| + (M - 1) = 1 + sum(itemBytes)
 * and a note adds |noteBlock| + 1 (its block and a comma) inside the first turn,
 * and each breakpoint adds BREAKPOINT_BYTES to the last block of its turn.
 */

export type MessageParam = Anthropic.MessageParam;
type TextBlockParam = Anthropic.TextBlockParam;

const textBlock = (text: string): TextBlockParam => ({ type: 'text', text });

/** The user turn and the assistant turn of one item. */
export function itemMessages(item: ProjectionItem): [MessageParam, MessageParam] {
  if (item.kind === 'pair') {
    return [
      { role: 'user', content: [textBlock(neutralizeMarkers(item.userText))] },
      { role: 'assistant', content: [textBlock(neutralizeMarkers(item.assistantText))] },
    ];
  }
  return [
    { role: 'user', content: item.userMessages.map((m) => textBlock(neutralizeMarkers(m.text))) },
    { role: 'assistant', content: [textBlock(item.label), textBlock(neutralizeMarkers(item.summary))] },
  ];
}

/** The note block about `omittedPairs` earlier exchanges. */
export function noteBlock(omittedPairs: number): TextBlockParam {
  return textBlock(omittedNote(omittedPairs));
}

/** Bytes an item adds to the JSON: its two messages, each with the comma that separates it. */
export function itemBytes(item: ProjectionItem): number {
  return itemMessages(item).reduce((sum, m) => sum + jsonBytes(m) + 1, 0);
}

/** Bytes the note adds inside the first user turn: its block and one comma. */
export function noteBytes(omittedPairs: number): number {
  return jsonBytes(noteBlock(omittedPairs)) + 1;
}

/** The bytes of the JSON of the projection's items alone ("[" + items + "]", without a note), given their summed itemBytes. */
export function itemsJsonBytes(summedItemBytes: number, itemCount: number): number {
  return itemCount === 0 ? 0 : 1 + summedItemBytes;
}

/** UTF-8 bytes of `JSON.stringify(messages)`; 0 for an empty history. This is what budgetBytes bounds. */
export function messagesBytes(messages: readonly MessageParam[]): number {
  return messages.length === 0 ? 0 : jsonBytes(messages);
}

const BREAKPOINT: Anthropic.CacheControlEphemeral = { type: 'ephemeral' };

/** Bytes the cache breakpoint adds to the last block: `,"cache_control":{"type":"ephemeral"}`. */
export const BREAKPOINT_BYTES = jsonBytes({ ...textBlock(''), cache_control: BREAKPOINT }) - jsonBytes(textBlock(''));

export interface AdapterOptions {
  /** Mark the end of the history with a `cache_control` breakpoint (Default: true). */
  cacheBreakpoint?: boolean;
}

/** Pairs not in the projection (the N of the note). */
export function omittedPairCount(projection: Pick<ConversationProjection, 'omitted'>): number {
  return projection.omitted.reduce((n, s) => n + (s.toPair - s.fromPair + 1), 0);
}

/** The note block about pairs from..to left out between two items (why, when it is one pair too large for the request). */
export function gapNoteBlock(fromPair: number, toPair: number, reason: OmittedReason = 'budget'): TextBlockParam {
  return textBlock(gapNote(fromPair, toPair, reason));
}

/** Bytes a gap note adds inside the user turn after the gap: its block and one comma. */
export function gapNoteBytes(fromPair: number, toPair: number, reason: OmittedReason = 'budget'): number {
  return jsonBytes(gapNoteBlock(fromPair, toPair, reason)) + 1;
}

/** The pair an item starts with. */
export function firstPairOf(item: ProjectionItem): number {
  return item.kind === 'pair' ? item.pairIndex : item.fromPair;
}

/** The index of the newest summary item when an item follows it (it gets a breakpoint), else null. */
export function newestSummaryMark(items: readonly ProjectionItem[]): number | null {
  const at = items.findLastIndex((it) => it.kind === 'summary');
  return at >= 0 && at < items.length - 1 ? at : null;
}

/** Most breakpoints a request may carry (Anthropic: 4); one is the caller's to place (system or tools). */
const MAX_BREAKPOINTS = 3;

/** Where the adapters put their notes and breakpoints: one rule for the messages and for their bytes, in every format. */
export interface Placement {
  /** The note in front of item `at`'s user turn. */
  notes: { at: number; block: TextBlockParam }[];
  /** Messages (2 per item) whose last block carries a breakpoint. */
  marks: number[];
}

export function placement(items: readonly ProjectionItem[], omitted: readonly OmittedSpan[], breakpoints: boolean): Placement {
  const notes: Placement['notes'] = [];
  const before: number[] = [];
  for (const span of omitted) {
    // (A search per span, a few a layout: cheaper than a map of every item, made on every call.)
    const at = items.findLastIndex((item) => firstPairOf(item) === span.toPair + 1);
    if (at < 0) continue;
    const block = span.fromPair === 0 && at === 0 ? noteBlock(span.toPair + 1) : gapNoteBlock(span.fromPair, span.toPair, span.reason);
    notes.push({ at, block });
    if (at > 0) before.push(2 * at - 1);
  }
  const summaryAt = newestSummaryMark(items);
  if (summaryAt !== null) before.push(2 * summaryAt + 1);
  const marks =
    !breakpoints || items.length === 0
      ? []
      : [...new Set([2 * items.length - 1, ...before.sort((x, y) => y - x)])].slice(0, MAX_BREAKPOINTS);
  return { notes, marks };
}

/**
 * The projection as Messages API turns: starts with a user turn, alternates,
 * ends with an assistant turn; empty when no item fitted (then nothing about
 * the omitted history can be said without breaking alternation: read
 * `projection.omitted`).
 *
 * Every omitted span is stated where it is: pairs left out before the first
 * item in a note at the start of the first user turn, pairs left out between
 * two items (a gap after the summaries, a pair too large for the request) in
 * a note at the start of the user turn after them. Breakpoints (unless turned
 * off): the end of the history, the end of the item before each gap, and the
 * end of the newest summary when items follow it (a prompt cache holds a
 * prefix only where a request put a breakpoint: so a rewrite that keeps the
 * summaries reads them from the cache), newest first, at most
 * MAX_BREAKPOINTS (one a place).
 */
export function toAnthropicMessages(
  projection: Pick<ConversationProjection, 'items' | 'omitted'>,
  options: AdapterOptions = {},
): MessageParam[] {
  const { items } = projection;
  const messages = items.flatMap((item) => itemMessages(item));
  if (messages.length === 0) return messages;
  const { notes, marks } = placement(items, projection.omitted, options.cacheBreakpoint ?? true);
  for (const { at, block } of notes) {
    const user = messages[2 * at]!;
    messages[2 * at] = { role: 'user', content: [block, ...(user.content as TextBlockParam[])] };
  }
  for (const m of marks) {
    const message = messages[m]!;
    const blocks = message.content as TextBlockParam[];
    messages[m] = { role: message.role, content: [...blocks.slice(0, -1), { ...blocks.at(-1)!, cache_control: BREAKPOINT }] };
  }
  return messages;
}

/**
 * `messagesBytes(toAnthropicMessages({ items, omitted }))` without building
 * the messages: the items' bytes (`sizeOf`, e.g. a memo of itemBytes), the
 * notes and the breakpoints, by the same placement. The layout sizes its
 * candidates with it; the projection checks it against the real JSON.
 */
export function projectedBytes(
  items: readonly ProjectionItem[],
  omitted: readonly OmittedSpan[],
  sizeOf: (item: ProjectionItem) => number = itemBytes,
): number {
  if (items.length === 0) return 0;
  const { notes, marks } = placement(items, omitted, true);
  let bytes = 1;
  for (const item of items) bytes += sizeOf(item);
  for (const { block } of notes) bytes += jsonBytes(block) + 1;
  return bytes + marks.length * BREAKPOINT_BYTES;
}

export { jsonBytes };
