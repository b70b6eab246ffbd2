import { jsonBytes, placement } from './to-anthropic.ts';
import type { ConversationProjection, OmittedSpan, ProjectionItem } from './types.ts';

/**
 * What an adapter other than the Anthropic one (openai.ts, ai-sdk.ts) says
 * about its own JSON; the messages and their bytes are both built from it, by
 * the notes and breakpoints placement of anthropic.ts, so the planner sizes a
 * candidate exactly as that adapter serializes it.
 *
 * Byte rule (as anthropic.ts): `JSON.stringify(messages)` of n items is
 * 1 + sum(itemBytes) (brackets and commas), plus what each note adds to its
 * user turn, plus what each breakpoint adds to its turn. A note and a
 * breakpoint add the same bytes to any turn (a part in front of the others,
 * a paragraph in front of a string, a key after the others: JSON escapes
 * character by character), so their bytes are measured once on a probe turn.
 */
export interface Shape<M> {
  /** The user turn and the assistant turn of one item. */
  itemMessages(item: ProjectionItem): [M, M];
  /** The user turn with the note about omitted history in front of what it says. */
  withNote(user: M, note: string): M;
  /** The turn with a cache breakpoint at its end (null: this format has none). */
  withMark: ((message: M) => M) | null;
}

export function renderShape<M>(shape: Shape<M>, projection: Pick<ConversationProjection, 'items' | 'omitted'>, breakpoints: boolean): M[] {
  const { items } = projection;
  const messages = items.flatMap((item) => shape.itemMessages(item));
  if (messages.length === 0) return messages;
  const { notes, marks } = placement(items, projection.omitted, breakpoints && shape.withMark !== null);
  for (const { at, block } of notes) messages[2 * at] = shape.withNote(messages[2 * at]!, block.text);
  for (const m of marks) messages[m] = shape.withMark!(messages[m]!);
  return messages;
}

/** The bytes side of a shape: an item's bytes (memoized: items are immutable), and a layout's. */
export interface ShapeBytes {
  itemBytes(item: ProjectionItem): number;
  sizeOf(item: ProjectionItem): number;
  projectedBytes(items: readonly ProjectionItem[], omitted: readonly OmittedSpan[]): number;
  /** Bytes one breakpoint adds (0 without breakpoints). */
  breakpointBytes: number;
}

const PROBE: ProjectionItem = {
  kind: 'pair',
  pairIndex: 0,
  runId: '',
  userMessageId: '',
  assistantMessageId: '',
  userText: 'x',
  assistantText: 'x',
};

export function shapeBytes<M>(shape: Shape<M>): ShapeBytes {
  const itemBytes = (item: ProjectionItem) => shape.itemMessages(item).reduce((n, m) => n + jsonBytes(m) + 1, 0);
  const [user, assistant] = shape.itemMessages(PROBE);
  const noteBytes = (note: string) => jsonBytes(shape.withNote(user, note)) - jsonBytes(user);
  const breakpointBytes = shape.withMark === null ? 0 : jsonBytes(shape.withMark(assistant)) - jsonBytes(assistant);
  const sizes = new WeakMap<ProjectionItem, number>();
  const sizeOf = (item: ProjectionItem) => {
    let bytes = sizes.get(item);
    if (bytes === undefined) sizes.set(item, (bytes = itemBytes(item)));
    return bytes;
  };
  return {
    itemBytes,
    sizeOf,
    breakpointBytes,
    projectedBytes(items, omitted) {
      if (items.length === 0) return 0;
      const { notes, marks } = placement(items, omitted, shape.withMark !== null);
      let bytes = 1;
      for (const item of items) bytes += sizeOf(item);
      for (const { block } of notes) bytes += noteBytes(block.text);
      return bytes + marks.length * breakpointBytes;
    },
  };
}
