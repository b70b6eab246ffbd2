import { jsonBytes } from '../support/json.ts';
import type { CatalogEntry, RunRequest, RunRequestItem, ThinkingBlock, ToolProposal, ToolResultItem } from './types.ts';

/**
 * The wire form: a RunRequest in Anthropic Messages shape. This is the one
 * definition of what is sent, and its sizes are what run compaction measures
 * (docs/runs.md: what is measured is the exact body sent to the provider):
 * `requestBytes(request)` is the UTF-8 length of `JSON.stringify(toAnthropicRequest(request))`,
 * computed from per-item parts so fitting never serializes the whole request
 * once per decision.
 *
 * Why the parts add up: JSON.stringify of an object is the concatenation of
 * its members, and JSON string escaping is per character, so a string made of
 * parts escapes to the sum of the parts' escapes. Messages: each item gives a
 * fixed list of blocks; consecutive items of one role share a message, so the
 * body is the envelope with empty messages, plus per message its frame
 * (`{"role":"user","content":[]}`), plus each block and one comma per block,
 * minus one comma.
 */

/** Content blocks of the Anthropic Messages API that this adapter produces. */
export type Block =
  | { type: 'text'; text: string }
  | { type: 'thinking'; thinking: string; signature: string }
  | { type: 'redacted_thinking'; data: string }
  | { type: 'tool_use'; id: string; name: string; input: unknown }
  | { type: 'tool_result'; tool_use_id: string; content: string; is_error?: boolean };

export interface AnthropicRunRequest {
  model: string;
  system: string;
  tools: readonly unknown[];
  messages: { role: 'user' | 'assistant'; content: Block[] }[];
}

export type Role = 'user' | 'assistant';

/** Bytes of a message frame with no blocks: `{"role":"user","content":[]}`. */
export const FRAME_BYTES: Readonly<Record<Role, number>> = Object.freeze({
  user: jsonBytes({ role: 'user', content: [] }),
  assistant: jsonBytes({ role: 'assistant', content: [] }),
});

/** Bytes a string adds inside a JSON string (its escaped form, without quotes). */
export function escapedBytes(text: string): number {
  return jsonBytes(text) - 2;
}

/**
 * The request in Anthropic Messages shape. User request and corrections are
 * their own text blocks, verbatim (a correction is preceded by a label block);
 * a checkpoint summary is a user-side text block marked non-authoritative,
 * with a bounded account of the tool calls it covers; every tool_use gets its
 * tool_result in the next user message (pending, failed and unknown calls say
 * so, with is_error); a model turn's thinking blocks come first, as the
 * Messages API requires with tool use; consecutive items of one role are
 * merged. The bounded result catalog is appended to the system prompt.
 */
export function toAnthropicRequest(request: RunRequest): AnthropicRunRequest {
  const messages: AnthropicRunRequest['messages'] = [];
  for (const item of request.messages) {
    const [role, blocks] = blocksOf(item);
    if (blocks.length === 0) continue;
    const last = messages.at(-1);
    if (last && last.role === role) last.content.push(...blocks);
    else messages.push({ role, content: blocks });
  }
  return {
    model: request.model,
    system: request.system + catalogText(request.resultCatalog, request.resultCatalogOmitted),
    tools: request.tools,
    messages,
  };
}

/** The exact bytes of the body toAnthropicRequest gives (no response reserve). */
export function wireBytes(request: RunRequest): number {
  return jsonBytes(toAnthropicRequest(request));
}

/** The catalog as the system prompt carries it: one line per entry, and how to list the rest. */
export function catalogText(catalog: readonly CatalogEntry[], omitted: number): string {
  if (catalog.length === 0 && omitted === 0) return '';
  const lines = catalog.map(catalogLine);
  if (omitted > 0) lines.push(omittedLine(omitted));
  return `\n\nStored results (reread with read_result by id and version, or a byte or line range):\n${lines.join('\n')}`;
}

export function catalogLine(c: CatalogEntry): string {
  return `- ${c.resultId} v${c.version}: ${c.bytes} bytes, ${c.lines} lines${c.label ? `, ${c.label}` : ''}`;
}

export function omittedLine(omitted: number): string {
  return `- ... and ${omitted} older stored result(s): list them with read_result {"catalog": {"offset": 0}}.`;
}

/** The role and blocks one request item becomes. */
export function blocksOf(item: RunRequestItem): [Role, Block[]] {
  switch (item.kind) {
    case 'user_request':
      return ['user', [{ type: 'text', text: item.text }]];
    case 'correction':
      return [
        'user',
        [
          { type: 'text', text: `User correction (revision ${item.revision}); it prevails over earlier instructions:` },
          { type: 'text', text: item.text },
        ],
      ];
    case 'checkpoint_summary':
      return [
        'user',
        [
          {
            type: 'text',
            text: `[Checkpoint ${item.segment}, turns ${item.fromSeq}-${item.toSeq}. ${item.note}]\n${item.text}\n[${item.toolCalls}]`,
          },
        ],
      ];
    case 'model_turn': {
      const blocks: Block[] = (item.thinking ?? []).map(thinkingBlock);
      if (item.text.trim() !== '') blocks.push({ type: 'text', text: item.text });
      for (const call of item.toolCalls) blocks.push({ type: 'tool_use', id: call.id, name: call.name, input: call.input ?? {} });
      return ['assistant', blocks];
    }
    case 'tool_result':
      return ['user', [toolResult(item)]];
  }
}

function thinkingBlock(t: ThinkingBlock): Block {
  return t.type === 'redacted_thinking'
    ? { type: 'redacted_thinking', data: t.data }
    : { type: 'thinking', thinking: t.thinking, signature: t.signature };
}

/**
 * The wire bytes one item adds: its blocks, one comma per block, and the
 * frame of a new message when it opens one (`opens`: the previous item with
 * blocks had the other role, or there is none).
 */
export function itemBytes(item: RunRequestItem, opens: boolean): { role: Role; blocks: number; bytes: number } {
  const [role, blocks] = blocksOf(item);
  let bytes = 0;
  for (const b of blocks) bytes += jsonBytes(b) + 1;
  if (blocks.length > 0 && opens) bytes += FRAME_BYTES[role];
  return { role, blocks: blocks.length, bytes };
}

/** The text of a tool_result block: its parts joined by newlines (see toolResultParts). */
function toolResult(item: ToolResultItem): Block {
  const block: Block = { type: 'tool_result', tool_use_id: item.proposalId, content: toolResultParts(item).join('\n') || '(empty)' };
  if (item.status !== 'settled') block.is_error = true;
  return block;
}

export function toolResultParts(item: ToolResultItem): string[] {
  const parts: string[] = [];
  if (item.status === 'proposed' || item.status === 'dispatched') parts.push(`No result recorded yet (${item.status}).`);
  if (item.status === 'unknown') parts.push('The effect of this call is unknown; do not assume it happened or failed.');
  if (item.error !== undefined) parts.push(`Error: ${item.error}`);
  if (item.body !== undefined) parts.push(item.body);
  if (item.excerpt !== undefined) parts.push(item.excerpt);
  if (item.reference !== undefined)
    parts.push(
      `[Result ${item.reference.resultId} version ${item.reference.version}, ${item.reference.bytes} bytes, ${item.reference.lines} lines: ${item.reference.note}]`,
    );
  return parts;
}

/** A Messages API response, as far as turnOfMessage reads it (the SDK's `Message` is one). */
export interface ProviderMessage {
  id: string;
  content: readonly { type: string }[];
  stop_reason?: string | null;
  usage?: { input_tokens?: number | null; output_tokens?: number | null } | null;
}

/** A provider response as the recording API takes it. */
export interface ModelTurn {
  /** The response id: use it as recordModelRequest's requestKey and recordModelTurn's modelRequestKey. */
  id: string;
  /** The text blocks, joined by blank lines. */
  text: string;
  toolCalls: ToolProposal[];
  /** Thinking blocks, verbatim and in order (recordModelTurn keeps them; the request sends them back first). */
  thinking: ThinkingBlock[];
  usage: { inputTokens: number; outputTokens: number } | null;
  stopReason: string | null;
}

/**
 * A Messages API response as `{ text, toolCalls, thinking }`, so an
 * application does not pick content blocks apart by hand. Blocks of other
 * kinds (server tool results, citations) are left out of the text.
 */
export function turnOfMessage(message: ProviderMessage): ModelTurn {
  const texts: string[] = [];
  const toolCalls: ToolProposal[] = [];
  const thinking: ThinkingBlock[] = [];
  for (const block of message.content) {
    const b = block as { type: string } & Record<string, unknown>;
    if (b.type === 'text' && typeof b.text === 'string') texts.push(b.text);
    else if (b.type === 'tool_use' && typeof b.id === 'string' && typeof b.name === 'string')
      toolCalls.push({ id: b.id, name: b.name, input: b.input ?? {} });
    else if (b.type === 'thinking' && typeof b.thinking === 'string' && typeof b.signature === 'string')
      thinking.push({ type: 'thinking', thinking: b.thinking, signature: b.signature });
    else if (b.type === 'redacted_thinking' && typeof b.data === 'string') thinking.push({ type: 'redacted_thinking', data: b.data });
  }
  const u = message.usage;
  const usage =
    u && typeof u.input_tokens === 'number' && typeof u.output_tokens === 'number'
      ? { inputTokens: u.input_tokens, outputTokens: u.output_tokens }
      : null;
  return { id: message.id, text: texts.join('\n\n'), toolCalls, thinking, usage, stopReason: message.stop_reason ?? null };
}
