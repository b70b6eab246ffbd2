import { promptEntry } from '../gateway/prompts.ts';
import type { MaterialItem } from '../support/summary-contract.ts';

/** An assistant reply of a range, in pair order. */
export interface RangeReply {
  assistantMessageId: string;
  assistantText: string;
}

/**
 * The summarizer's material for the replies of the range that starts at
 * `fromPair`, for `promptVersion`: each reply named as that version names
 * its items (prompts.ts `itemKey`). `pair`: by its pair number, the number
 * the projection's label shows ("pairs 10-19"), so the summary refers to
 * replies the way its reader sees them, and the same conversation gives the
 * same material in every database. `id` (versions before
 * conversation-compaction@5): by its assistant message id, as those versions
 * were released with.
 */
export function conversationMaterial(replies: readonly RangeReply[], fromPair: number, promptVersion: string): MaterialItem[] {
  const byPair = promptEntry(promptVersion)?.itemKey === 'pair';
  return replies.map((r, i) => ({ id: byPair ? String(fromPair + i) : r.assistantMessageId, text: r.assistantText }));
}
