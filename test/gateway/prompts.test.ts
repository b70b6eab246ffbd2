import { createHash } from 'node:crypto';
import { readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import {
  CONVERSATION_PROMPT_VERSION,
  isProjectable,
  promptEntries,
  promptEntry,
  promptText,
  RUN_PROMPT_VERSION,
} from '../../src/gateway/prompts.ts';

/**
 * The released text of every prompt version, pinned by SHA-256. A record
 * names the version it was made with, so a released text must never change:
 * a change is a new file with the next version. When you release a version,
 * add its hash here; never change a hash that is here.
 */
const RELEASED: Readonly<Record<string, string>> = {
  'conversation-compaction@1': '080d9301f02001b4482d3e8fcf06fd645b00a8232e088d6fc9339349b3e8abea',
  'conversation-compaction@2': 'fc4d36f997735a9fd529e9412b55c392563da31050c96c4ad3c66708f5e0f344',
  'conversation-compaction@3': '93b2e206a50dff6ab7d5febc6bd11d517e1af28dcdd0303d915a0682c4a01c75',
  'conversation-compaction@4': '41e90f248432507b689a578f2a6f05831534076d3212f62a04d8dc0bdff26d86',
  'conversation-compaction@5': '2f521271458d74c94ac25e369e2f2bcae2d51b46de9bf39a06456cbc2b5fe9cb',
  'run-compaction@1': '9376e74161837406b229ff5cedea9311d9734d39d679f24c1eae9bc0123cd2bb',
  'run-compaction@2': '7c863d2bf96f444893ede404a2f7f271e53ff951d1efebc1a6f8afe109f21577',
};

const sha256 = (text: string) => createHash('sha256').update(text, 'utf8').digest('hex');

describe('released prompt texts', () => {
  it('keep the text they were released with', () => {
    for (const [version, hash] of Object.entries(RELEASED))
      expect({ version, hash: sha256(promptText(version)) }).toEqual({ version, hash });
  });

  it('are all pinned: every registered version and every file in prompts/', () => {
    expect(
      promptEntries()
        .map((e) => e.version)
        .sort(),
    ).toEqual(Object.keys(RELEASED).sort());
    const files = readdirSync(fileURLToPath(new URL('../../prompts/', import.meta.url))).filter(
      (f) => f.endsWith('.md') && f !== 'README.md',
    );
    expect(files.map((f) => f.replace(/\.md$/, '')).sort()).toEqual(Object.keys(RELEASED).sort());
  });

  it('name conversation replies by pair number from @5 on, and ask for facts over pleasantries', () => {
    const text = promptText(CONVERSATION_PROMPT_VERSION);
    expect(promptEntry(CONVERSATION_PROMPT_VERSION)).toMatchObject({ itemKey: 'pair', projectable: true, current: true });
    expect(text).toMatch(/tagged with its pair number/);
    expect(text).not.toMatch(/message id/);
    expect(text).toMatch(/Leave out greetings, thanks, praise/);
    // Older versions stay as released, still projectable, and name replies by message id.
    for (const v of ['conversation-compaction@2', 'conversation-compaction@3', 'conversation-compaction@4']) {
      expect(promptEntry(v)).toMatchObject({ itemKey: 'id', projectable: true, current: false });
      expect(isProjectable(v)).toBe(true);
    }
  });

  it('tell the summarizer of both systems that every figure must be copied from the material', () => {
    for (const version of [CONVERSATION_PROMPT_VERSION, RUN_PROMPT_VERSION]) {
      expect(promptText(version)).toMatch(/Every figure must be copied from the material/);
    }
  });
});
