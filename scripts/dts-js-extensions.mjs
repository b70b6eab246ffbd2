// After `tsc -p tsconfig.build.json`: tsc rewrites the relative `.ts` import
// specifiers of the emitted JavaScript (rewriteRelativeImportExtensions), but
// not those of the emitted .d.ts files (microsoft/TypeScript#61037). TypeScript
// 5 resolves them anyway; TypeScript 4.x and some editors do not. Rewrite them
// to the `.js` the declarations sit beside, and fail on one that names no file.
import { readdirSync, readFileSync, writeFileSync, existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';

const root = resolve(process.argv[2] ?? 'dist');
// `from './x.ts'`, `import('./x.ts')`, `import './x.ts'`: relative specifiers only.
const SPECIFIER = /(\bfrom\s+|\bimport\s*\(\s*|\bimport\s+)(['"])(\.\.?\/[^'"]*?)\.ts\2/g;
let files = 0;
let rewritten = 0;
for (const file of walk(root)) {
  if (!file.endsWith('.d.ts')) continue;
  files++;
  const text = readFileSync(file, 'utf8');
  const next = text.replace(SPECIFIER, (_, head, quote, path) => {
    if (!existsSync(join(dirname(file), `${path}.d.ts`))) throw new Error(`${file}: ${path}.ts has no declaration file beside it`);
    rewritten++;
    return `${head}${quote}${path}.js${quote}`;
  });
  if (next !== text) writeFileSync(file, next);
}
if (files === 0) throw new Error(`no .d.ts files under ${root}: run tsc first`);
process.stdout.write(`${rewritten} relative .ts specifiers in ${files} declaration files now end in .js\n`);

function* walk(folder) {
  for (const entry of readdirSync(folder, { withFileTypes: true })) {
    const path = join(folder, entry.name);
    if (entry.isDirectory()) yield* walk(path);
    else yield path;
  }
}
