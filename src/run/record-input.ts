import { BlankTextError, RunHistoryError } from './run-errors.ts';
import { ESCAPED_JSON_KEY, INT4_MAX, isInt4, toStoredJson, toStoredText } from './stored.ts';
import type { ThinkingBlock, ToolProposal } from './types.ts';

/**
 * What the recording API (record.ts) accepts: each value an application
 * passes, checked and put in the form it is stored, before any transaction
 * opens. The history is never edited, so a value that would break every later
 * request (a blank text, a tool call id or input the Messages API refuses) is
 * refused here, with a RunHistoryError (or BlankTextError) that names it,
 * while the application can still change it.
 */

function requireText(value: unknown, what: string): string {
  if (typeof value !== 'string') throw new RunHistoryError(`${what} must be a string`);
  return value;
}

/** Text in the form it is stored (toStoredText: a lone surrogate or a NUL becomes U+FFFD). */
export function storedText(value: unknown, what: string): string {
  return toStoredText(requireText(value, what));
}

/**
 * User text (the request, a correction) with something in it, in the form it
 * is stored (toStoredText: a lone surrogate or a NUL becomes U+FFFD), so a
 * replay of the request compares what it would store with what is stored. It is carried
 * verbatim into every later request, where an empty text block is refused by
 * the Messages API, and it can never be edited: one blank entry would stop
 * the Run for good. Whitespace is what String.prototype.trim removes (the
 * database checks the same class: the run_turns_user_text_not_blank constraint).
 */
export function requireUserText(value: unknown, what: string): string {
  const text = requireText(value, what);
  if (text.trim() === '')
    throw new BlankTextError(`${what} is empty or only whitespace: it would be an empty text block in every later request`);
  return toStoredText(text);
}

/** A count an `integer` column stores, or RunHistoryError naming it. */
export function requireCount(value: unknown, what: string): number {
  if (!isInt4(value)) throw new RunHistoryError(`${what} must be an integer from 0 to ${INT4_MAX}, got ${String(value)}`);
  return value;
}

/**
 * A tool call id the Messages API accepts in `tool_use.id` and
 * `tool_result.tool_use_id` (it answers 400 "String should match pattern
 * '^[a-zA-Z0-9_-]+$'" otherwise). Ids from another provider or a framework
 * (`call:1`, `fn.search#2`) must be mapped by the application first.
 */
const TOOL_USE_ID = /^[a-zA-Z0-9_-]+$/;

/**
 * The tool calls of a model turn, checked, with each input in the form jsonb
 * stores (toStoredJson: a NUL or a lone surrogate in a valid tool call is kept
 * exactly, and read back so by loadState). Every later request carries each
 * call as a `tool_use` block, and the history is never edited: an id or an
 * input the Messages API refuses would make every later request of the Run a
 * 400, so it is refused here, when the application can still map it. An
 * input must be a JSON object (a missing or null one is sent as `{}`).
 */
export function requireToolCalls(value: unknown): { id: string; name: string; input: unknown }[] {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) throw new RunHistoryError('recordModelTurn: toolCalls must be an array of {id, name, input}');
  const ids = new Set<string>();
  return value.map((p: unknown, i) => {
    if (p === null || typeof p !== 'object')
      throw new RunHistoryError(
        `recordModelTurn: tool call ${i} must be an object {id, name, input}, got ${p === null ? 'null' : typeof p}`,
      );
    const { id, name, input } = p as ToolProposal;
    if (typeof id !== 'string' || id === '' || typeof name !== 'string' || name === '')
      throw new RunHistoryError('recordModelTurn: every tool call needs a non-empty id and name');
    if (!TOOL_USE_ID.test(id))
      throw new RunHistoryError(
        `recordModelTurn: tool call id ${JSON.stringify(id.slice(0, 80))} is not one the Messages API accepts (letters, digits, _ and - only)`,
      );
    if (ids.has(id)) throw new RunHistoryError(`recordModelTurn: tool call id ${id} appears twice`);
    ids.add(id);
    if (input === undefined || input === null) return { id, name, input: null };
    const stored = storedJson(input, `recordModelTurn: the input of tool call ${id}`);
    if (!isJsonObject(stored))
      throw new RunHistoryError(
        `recordModelTurn: the input of tool call ${id} must be a JSON object, got ${Array.isArray(stored) ? 'an array' : stored === null ? 'null' : typeof stored}`,
      );
    return { id, name, input: stored };
  });
}

/** Whether a stored value (toStoredJson) is a JSON object: an escaped one is an object whose JSON text is one. */
function isJsonObject(stored: unknown): boolean {
  if (stored === null || typeof stored !== 'object' || Array.isArray(stored)) return false;
  const escaped = (stored as Record<string, unknown>)[ESCAPED_JSON_KEY];
  return typeof escaped !== 'string' || Object.keys(stored).length !== 1 || escaped.startsWith('{');
}

/** `value` as toStoredJson stores it; a value that is not JSON (a BigInt, a cycle) is refused by name. */
function storedJson(value: unknown, what: string): unknown {
  try {
    return toStoredJson(value);
  } catch (error) {
    throw new RunHistoryError(`${what} is not JSON: ${(error as Error).message}`, { cause: error });
  }
}

export function requireThinking(value: unknown): ThinkingBlock[] | null {
  if (value === undefined || value === null) return null;
  const ok =
    Array.isArray(value) &&
    value.every(
      (b) =>
        b !== null &&
        typeof b === 'object' &&
        ((b.type === 'thinking' && typeof b.thinking === 'string' && typeof b.signature === 'string') ||
          (b.type === 'redacted_thinking' && typeof b.data === 'string')),
    );
  if (!ok)
    throw new RunHistoryError(
      'recordModelTurn: thinking must be an array of {type: "thinking", thinking, signature} or {type: "redacted_thinking", data} blocks',
    );
  const blocks = (value as ThinkingBlock[]).map((b): ThinkingBlock =>
    b.type === 'thinking'
      ? { type: 'thinking', thinking: b.thinking, signature: b.signature }
      : { type: 'redacted_thinking', data: b.data },
  );
  // Stored as jsonb like a tool input: a block with a NUL or a lone surrogate is kept exactly (toStoredJson).
  return toStoredJson(blocks) as ThinkingBlock[];
}
