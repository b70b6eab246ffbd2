import { readFileSync } from 'node:fs';
import { packageFile } from '../support/package-files.ts';

/**
 * The prompt registry. A prompt version is a released file in `prompts/`; its
 * entry here says what kind of input it was written for and whether the read
 * projection may present its records as a summary of assistant replies.
 */
export type PromptInputKind =
  /** User and assistant text mixed (conversation-compaction@1): never an assistant-only summary. */
  | 'mixed_conversation'
  /** Assistant replies only, each tagged with its message id (@2-@4) or its pair number (@5). */
  | 'assistant_replies'
  /** Settled model turns and tool units of one Run. */
  | 'run_work';

/**
 * What names each item of the material: `id`, the item's source id (an
 * assistant message id, a run's `turn:3`); `pair`, the pair number the
 * projection's label shows for a conversation reply. A message id differs in
 * every database for the same conversation and means nothing to a reader of
 * the summary; a pair number is the same everywhere and is in the label.
 */
export type ItemKey = 'id' | 'pair';

export interface PromptEntry {
  version: string;
  inputKind: PromptInputKind;
  /** What each item of the material is named by (its `id` is that name). */
  itemKey: ItemKey;
  /** Whether projectConversationHistory may use a completed record made with this version. */
  projectable: boolean;
  /** Whether new records may be made with this version. */
  current: boolean;
}

/** The version new conversation summaries are made with. */
export const CONVERSATION_PROMPT_VERSION = 'conversation-compaction@5';
/** The version new run checkpoints are made with. */
export const RUN_PROMPT_VERSION = 'run-compaction@2';

const entries: readonly PromptEntry[] = Object.freeze(
  (
    [
      { version: 'conversation-compaction@1', inputKind: 'mixed_conversation', itemKey: 'id', projectable: false, current: false },
      { version: 'conversation-compaction@2', inputKind: 'assistant_replies', itemKey: 'id', projectable: true, current: false },
      { version: 'conversation-compaction@3', inputKind: 'assistant_replies', itemKey: 'id', projectable: true, current: false },
      // @4: @3 plus the grounding rule (every figure copied from the material; src/grounding/index.ts checks it).
      { version: 'conversation-compaction@4', inputKind: 'assistant_replies', itemKey: 'id', projectable: true, current: false },
      // @5: replies named by their pair number, not their message id; keep what a reader would ask about over pleasantries.
      { version: 'conversation-compaction@5', inputKind: 'assistant_replies', itemKey: 'pair', projectable: true, current: true },
      { version: 'run-compaction@1', inputKind: 'run_work', itemKey: 'id', projectable: false, current: false },
      { version: 'run-compaction@2', inputKind: 'run_work', itemKey: 'id', projectable: false, current: true },
    ] satisfies PromptEntry[]
  ).map((e) => Object.freeze(e)),
);

const byVersion = new Map(entries.map((e) => [e.version, e]));
const textCache = new Map<string, string>();

/** All registered prompt versions. */
export function promptEntries(): readonly PromptEntry[] {
  return entries;
}

/** The registry entry for a version, or undefined for a version this build does not know. */
export function promptEntry(version: string): PromptEntry | undefined {
  return byVersion.get(version);
}

/** True only for known assistant-only conversation versions (@2 to @5): never @1, never unknown versions. */
export function isProjectable(version: string): boolean {
  const entry = byVersion.get(version);
  return entry !== undefined && entry.projectable && entry.inputKind === 'assistant_replies';
}

/**
 * The released text of a prompt version.
 * @throws Error when the version is not registered.
 */
export function promptText(version: string): string {
  if (!byVersion.has(version)) throw new Error(`unknown prompt version: ${version}`);
  let text = textCache.get(version);
  if (text === undefined) {
    text = readFileSync(packageFile('prompts', `${version}.md`), 'utf8');
    textCache.set(version, text);
  }
  return text;
}
