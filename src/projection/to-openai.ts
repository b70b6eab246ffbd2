import type OpenAI from 'openai';
import { renderShape, type Shape } from './shape.ts';
import type { ConversationProjection } from './types.ts';
import { neutralizeMarkers } from '../support/markers.ts';

/**
 * The OpenAI Chat Completions adapter (also what OpenAI-compatible servers,
 * Ollama, vLLM, llama.cpp, accept). Every content is a string, which every
 * such server reads the same way:
 * - pair: user its text, assistant its text
 * - summary: user the ten original user messages verbatim, a blank line
 *   between two; assistant the label, a blank line, the summary
 * - omitted history: the note as a paragraph in front of the user turn after
 *   it (as anthropic.ts places it).
 * No cache fields: OpenAI caches a repeated prefix by itself, and strict
 * servers refuse fields they do not know.
 *
 * Use: `messages: [{ role: 'system', content: system }, ...toOpenAIMessages(projection), { role: 'user', content: next }]`.
 */

type ChatCompletionMessageParam = OpenAI.Chat.Completions.ChatCompletionMessageParam;

/** Between the paragraphs the adapter joins into one content string. */
export const PARAGRAPH = '\n\n';

export type OpenAIMessage = ChatCompletionMessageParam & { content: string };

export const openaiShape: Shape<OpenAIMessage> = {
  itemMessages(item) {
    if (item.kind === 'pair') {
      return [
        { role: 'user', content: neutralizeMarkers(item.userText) },
        { role: 'assistant', content: neutralizeMarkers(item.assistantText) },
      ];
    }
    return [
      { role: 'user', content: item.userMessages.map((m) => neutralizeMarkers(m.text)).join(PARAGRAPH) },
      { role: 'assistant', content: item.label + PARAGRAPH + neutralizeMarkers(item.summary) },
    ];
  },
  withNote: (user, note) => ({ ...user, content: note + PARAGRAPH + user.content }) as OpenAIMessage,
  withMark: null,
};

/** The projection as Chat Completions messages: starts with a user turn, alternates, ends with an assistant turn; empty when no item fitted. */
export function toOpenAIMessages(projection: Pick<ConversationProjection, 'items' | 'omitted'>): ChatCompletionMessageParam[] {
  return renderShape(openaiShape, projection, false);
}
