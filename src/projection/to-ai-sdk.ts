import { PARAGRAPH } from './to-openai.ts';
import { renderShape, type Shape } from './shape.ts';
import type { ConversationProjection } from './types.ts';
import { neutralizeMarkers } from '../support/markers.ts';

/**
 * The Vercel AI SDK adapter: `ModelMessage[]` for `generateText`,
 * `streamText` and the rest, whichever provider the app uses.
 * - pair: user [its text], assistant [its text]
 * - summary: user [ten text parts, one per original user message, verbatim],
 *   assistant [the label, a blank line, the summary, as one part: a provider
 *   may join an assistant message's parts with nothing between them, as the
 *   AI SDK's OpenAI provider does]
 * - omitted history: a note part in front of the user turn after it (as
 *   anthropic.ts places it).
 * - prompt caching: with `anthropicCacheControl` (the default), the parts
 *   where the Anthropic adapter puts its breakpoints carry
 *   `providerOptions.anthropic.cacheControl`; other providers ignore it.
 *
 * Use: `generateText({ model, system, messages: [...toModelMessages(projection), { role: 'user', content: next }] })`.
 */

export interface ModelMessagesOptions {
  /** Mark where anthropic.ts puts its breakpoints with Anthropic cache control (Default: true). The budget counts them. */
  anthropicCacheControl?: boolean;
}

/**
 * The AI SDK's `TextPart` and `ModelMessage` as this adapter makes them,
 * declared here and not imported from `ai`, so that an app without the AI SDK
 * imports and type-checks sourcebound; they are assignable to `ModelMessage`
 * (test/projection/clients.test.ts checks it against `ai` itself).
 */
export type ModelTextPart = {
  type: 'text';
  text: string;
  providerOptions?: { anthropic: { cacheControl: { type: 'ephemeral' } } };
};
export type ModelHistoryMessage = { role: 'user'; content: ModelTextPart[] } | { role: 'assistant'; content: ModelTextPart[] };
type Turn = ModelHistoryMessage;

const part = (text: string): ModelTextPart => ({ type: 'text', text });

export const aiSdkShape: Shape<Turn> = {
  itemMessages(item) {
    if (item.kind === 'pair') {
      return [
        { role: 'user', content: [part(neutralizeMarkers(item.userText))] },
        { role: 'assistant', content: [part(neutralizeMarkers(item.assistantText))] },
      ];
    }
    return [
      { role: 'user', content: item.userMessages.map((m) => part(neutralizeMarkers(m.text))) },
      { role: 'assistant', content: [part(item.label + PARAGRAPH + neutralizeMarkers(item.summary))] },
    ];
  },
  withNote: (user, note) => ({ ...user, content: [part(note), ...user.content] }) as Turn,
  withMark: (message) =>
    ({
      ...message,
      content: [
        ...message.content.slice(0, -1),
        { ...message.content.at(-1)!, providerOptions: { anthropic: { cacheControl: { type: 'ephemeral' } } } },
      ],
    }) as Turn,
};

/** The projection as AI SDK messages: starts with a user turn, alternates, ends with an assistant turn; empty when no item fitted. */
export function toModelMessages(
  projection: Pick<ConversationProjection, 'items' | 'omitted'>,
  options: ModelMessagesOptions = {},
): ModelHistoryMessage[] {
  return renderShape(aiSdkShape, projection, options.anthropicCacheControl ?? true);
}
