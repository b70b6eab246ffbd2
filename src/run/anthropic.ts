import type { RunRequest, RunRequestItem, ToolResultItem } from './types.ts';

/** Content blocks of the Anthropic Messages API that this adapter produces. */
type Block =
  | { type: 'text'; text: string }
  | { type: 'tool_use'; id: string; name: string; input: unknown }
  | { type: 'tool_result'; tool_use_id: string; content: string; is_error?: boolean };

export interface AnthropicRunRequest {
  model: string;
  system: string;
  tools: readonly unknown[];
  messages: { role: 'user' | 'assistant'; content: Block[] }[];
}

/**
 * The request in Anthropic Messages shape. User request and corrections are
 * their own text blocks, verbatim (a correction is preceded by a label block);
 * a checkpoint summary is a user-side text block marked non-authoritative;
 * every tool_use gets its tool_result in the next user message (pending,
 * failed and unknown calls say so, with is_error); consecutive items of one
 * role are merged. The result catalog is appended to the system prompt.
 * Its serialized size is close to, not identical with, the measured request.
 */
export function toAnthropicRequest(request: RunRequest): AnthropicRunRequest {
  const messages: AnthropicRunRequest['messages'] = [];
  const push = (role: 'user' | 'assistant', blocks: Block[]) => {
    const last = messages.at(-1);
    if (last && last.role === role) last.content.push(...blocks);
    else messages.push({ role, content: blocks });
  };
  for (const item of request.messages) {
    const [role, blocks] = blocksOf(item);
    if (blocks.length > 0) push(role, blocks);
  }
  const catalog = request.resultCatalog.length === 0 ? '' :
    `\n\nStored results you can reread by id and version (or a byte/line range):\n${JSON.stringify(request.resultCatalog)}`;
  return { model: request.model, system: request.system + catalog, tools: request.tools, messages };
}

function blocksOf(item: RunRequestItem): ['user' | 'assistant', Block[]] {
  switch (item.kind) {
    case 'user_request':
      return ['user', [{ type: 'text', text: item.text }]];
    case 'correction':
      return ['user', [{ type: 'text', text: `User correction (revision ${item.revision}); it prevails over earlier instructions:` }, { type: 'text', text: item.text }]];
    case 'checkpoint_summary':
      return ['user', [{ type: 'text', text: `[Checkpoint ${item.segment}, turns ${item.fromSeq}-${item.toSeq}. ${item.note}]\n${item.text}\n[Tool calls covered: ${JSON.stringify(item.toolResults)}]` }]];
    case 'model_turn': {
      const blocks: Block[] = [];
      if (item.text.trim() !== '') blocks.push({ type: 'text', text: item.text });
      for (const call of item.toolCalls) blocks.push({ type: 'tool_use', id: call.id, name: call.name, input: call.input ?? {} });
      return ['assistant', blocks];
    }
    case 'tool_result':
      return ['user', [toolResult(item)]];
  }
}

function toolResult(item: ToolResultItem): Block {
  const parts: string[] = [];
  if (item.status === 'proposed' || item.status === 'dispatched') parts.push(`No result recorded yet (${item.status}).`);
  if (item.status === 'unknown') parts.push('The effect of this call is unknown; do not assume it happened or failed.');
  if (item.error !== undefined) parts.push(`Error: ${item.error}`);
  if (item.body !== undefined) parts.push(item.body);
  if (item.reference !== undefined) parts.push(`[Result ${item.reference.resultId} version ${item.reference.version}, ${item.reference.bytes} bytes, ${item.reference.lines} lines: ${item.reference.note}]`);
  const block: Block = { type: 'tool_result', tool_use_id: item.proposalId, content: parts.join('\n') || '(empty)' };
  if (item.status !== 'settled') block.is_error = true;
  return block;
}
