import { fileURLToPath } from 'node:url';
import { format, resolveConfig } from 'prettier';

/**
 * Docs pages show code that examples/ runs, and tests hold the two to be the
 * same code. The examples are formatted by `npm run format`, the docs' code
 * blocks are wrapped by hand: both sides are compared as Prettier prints them,
 * so a change of layout on either side passes and any other change (a name, a
 * call, a comment, a line more or less) fails.
 */

/**
 * The code of the fenced TypeScript block of `markdown` that contains
 * `marker`, from `marker` to the end of the block. Throws when no block or
 * more than one contains it.
 */
export function docCodeFrom(markdown: string, marker: string): string {
  const blocks = [...markdown.matchAll(/^```ts\n([\s\S]*?)^```$/gm)].map((m) => m[1]!).filter((b) => b.includes(marker));
  if (blocks.length !== 1) throw new Error(`${blocks.length} \`\`\`ts blocks contain ${JSON.stringify(marker)} (expected one)`);
  return blocks[0]!.slice(blocks[0]!.indexOf(marker));
}

/** `code` (TypeScript) as Prettier prints it with the repository's config (.prettierrc.json). */
export async function formatted(code: string): Promise<string> {
  const config = await resolveConfig(fileURLToPath(new URL('../../examples/write-turns.ts', import.meta.url)));
  if (config === null) throw new Error('no Prettier config found for examples/');
  return format(code, { ...config, parser: 'typescript' });
}
