import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

let root: string | undefined;

/**
 * The folder of the sourcebound package this code belongs to: the repository
 * when run from source (src/…), the installed package when run compiled
 * (node_modules/sourcebound/dist/src/…). The migrations, prompts and demo data
 * ship beside package.json, so they are found from there, never from the
 * current directory.
 */
export function packageRoot(): string {
  if (root !== undefined) return root;
  let folder = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const manifest = join(folder, 'package.json');
    if (existsSync(manifest) && (JSON.parse(readFileSync(manifest, 'utf8')) as { name?: unknown }).name === 'sourcebound') {
      root = folder;
      return folder;
    }
    const parent = dirname(folder);
    if (parent === folder) throw new Error(`sourcebound: no package.json named "sourcebound" above ${fileURLToPath(import.meta.url)}`);
    folder = parent;
  }
}

/** A file or folder shipped with the package (`migrations`, `prompts/x.md`, …). */
export function packageFile(...segments: string[]): string {
  return join(packageRoot(), ...segments);
}
