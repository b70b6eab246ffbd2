import { aiSdkShape, toModelMessages } from './to-ai-sdk.ts';
import { BREAKPOINT_BYTES, itemBytes, messagesBytes, projectedBytes, toAnthropicMessages } from './to-anthropic.ts';
import { openaiShape, toOpenAIMessages } from './to-openai.ts';
import { shapeBytes } from './shape.ts';
import type { ConversationProjection, OmittedSpan, ProjectionItem } from './types.ts';

/** The client whose JSON the budget is measured in. */
export type ProjectionFormat = 'anthropic' | 'openai' | 'ai-sdk';

/**
 * One client's messages and their bytes, for the planner (fidelity.ts,
 * layout.ts) and the final check (project.ts): the planner sizes candidates
 * with `sizeOf` and `projectedBytes`, which equal `historyBytes` of the
 * adapter's messages (with its default options) for every layout.
 *
 * The stored layout (layout.ts) is keyed by conversation and budget, not by
 * format, and hashed over the Anthropic JSON without breakpoints (it only
 * detects a change): a layout one format made is kept by another while it
 * fits that format's bytes, and laid out anew ('budget') when it does not.
 */
export interface Format {
  readonly name: ProjectionFormat;
  /** The history as the adapter makes it by default (Anthropic: with breakpoints; AI SDK: with Anthropic cache control). */
  messages(projection: Pick<ConversationProjection, 'items' | 'omitted'>): readonly unknown[];
  /** An item's bytes, memoized. */
  sizeOf(item: ProjectionItem): number;
  projectedBytes(items: readonly ProjectionItem[], omitted: readonly OmittedSpan[]): number;
  /** Bytes one cache breakpoint adds (0: none in this format). */
  readonly breakpointBytes: number;
}

/** UTF-8 bytes of `JSON.stringify(messages)`, 0 for an empty history: what the budget bounds, in any format. */
export function historyBytes(messages: readonly unknown[]): number {
  return messagesBytes(messages as never[]);
}

// Items are immutable once made: their bytes are computed once.
const sizes = new WeakMap<ProjectionItem, number>();
function sizeOf(item: ProjectionItem): number {
  let bytes = sizes.get(item);
  if (bytes === undefined) sizes.set(item, (bytes = itemBytes(item)));
  return bytes;
}

const anthropic: Format = {
  name: 'anthropic',
  messages: (p) => toAnthropicMessages(p),
  sizeOf,
  projectedBytes: (items, omitted) => projectedBytes(items, omitted, sizeOf),
  breakpointBytes: BREAKPOINT_BYTES,
};

const openai: Format = { name: 'openai', messages: (p) => toOpenAIMessages(p), ...shapeBytes(openaiShape) };
const aiSdk: Format = { name: 'ai-sdk', messages: (p) => toModelMessages(p), ...shapeBytes(aiSdkShape) };

export const FORMATS: Readonly<Record<ProjectionFormat, Format>> = Object.freeze({ anthropic, openai, 'ai-sdk': aiSdk });

/** @throws RangeError for a format that is not one of FORMATS. */
export function formatOf(name: string | undefined): Format {
  const format = Object.hasOwn(FORMATS, name ?? 'anthropic') ? FORMATS[(name ?? 'anthropic') as ProjectionFormat] : undefined;
  if (format === undefined) throw new RangeError(`format must be 'anthropic', 'openai' or 'ai-sdk', got ${String(name)}`);
  return format;
}
