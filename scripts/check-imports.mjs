#!/usr/bin/env node
// `npm run check:imports`: the shape of src/ as a rule, not a hope. Reports
//   - import circles (any cycle among src/ files, type-only imports included),
//   - imports that run back up (a module importing from a layer above its own),
//   - files not in any layer, and files over MAX_LINES lines,
//   - two files with the same name (a name should say which file it is),
// and exits 1 when it found any. No dependencies: it reads import specifiers
// with a regular expression (relative ones only; packages are not layered).
//
// Layers, lowest first. A module may import from its own layer and from those
// below it, never from one above. Folders on one rank (conversation, projection,
// run, turns) may import from one another as long as no circle results.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { basename, dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const LAYERS = [
  ['support'], // leaves: logger, backoff, integers, config, errors, json helpers, shared contract types
  ['db'], // schema, connection, queries by noun, database errors
  ['grounding'], // the check of a summary against its material
  ['gateway'], // summarizers: providers, offline, admission, fleet
  ['conversation', 'projection', 'run', 'turns'], // System 1, the read path, System 2, the turn API
  ['worker'], // the graphile-worker process, its supervisor, health, metrics, tasks
  ['cli'], // one file per command
  ['index.ts', 'app.ts'], // the public API (app.ts: its request path alone)
];
const MAX_LINES = 450;
// File names that may repeat: a folder's entry point and its types.
const SHARED_NAMES = new Set(['index.ts', 'types.ts']);

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const src = join(root, 'src');

function walk(dir) {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return walk(path);
    return name.endsWith('.ts') ? [path] : [];
  });
}

const rankOf = (file) => {
  const first = relative(src, file).split(sep)[0];
  const rank = LAYERS.findIndex((layer) => layer.includes(first));
  return rank < 0 ? null : rank;
};
const show = (file) => relative(root, file);

const IMPORT = /(?:\bfrom\s*|\bimport\s*\(?\s*)['"](\.{1,2}\/[^'"]+)['"]/g;
const files = walk(src).sort();
const graph = new Map();
const problems = { circles: [], upward: [], unlayered: [], long: [], names: [] };

for (const file of files) {
  const text = readFileSync(file, 'utf8');
  const lines = text.split('\n').length - (text.endsWith('\n') ? 1 : 0);
  if (lines > MAX_LINES) problems.long.push(`${show(file)}: ${lines} lines (at most ${MAX_LINES})`);
  const rank = rankOf(file);
  if (rank === null) problems.unlayered.push(`${show(file)}: not in any layer (LAYERS in scripts/check-imports.mjs)`);
  const targets = new Set();
  // Comments may quote imports; only code counts.
  const code = text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/(^|[^:'"`])\/\/.*$/gm, '$1');
  for (const [, spec] of code.matchAll(IMPORT)) {
    const target = resolve(dirname(file), spec);
    if (!target.startsWith(src + sep)) continue;
    targets.add(target);
    const targetRank = rankOf(target);
    if (rank !== null && targetRank !== null && targetRank > rank) {
      problems.upward.push(`${show(file)} -> ${show(target)} (${LAYERS[rank].join('/')} imports from ${LAYERS[targetRank].join('/')})`);
    }
  }
  graph.set(file, [...targets]);
}

// Circles: strongly connected components of more than one file (Tarjan), or a file importing itself.
{
  let index = 0;
  const indexOf = new Map();
  const low = new Map();
  const stack = [];
  const onStack = new Set();
  const visit = (v) => {
    indexOf.set(v, index);
    low.set(v, index);
    index += 1;
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!indexOf.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v), low.get(w)));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v), indexOf.get(w)));
    }
    if (low.get(v) === indexOf.get(v)) {
      const component = [];
      let w;
      do {
        w = stack.pop();
        onStack.delete(w);
        component.push(w);
      } while (w !== v);
      if (component.length > 1 || (graph.get(v) ?? []).includes(v)) problems.circles.push(component.map(show).sort().join(' <-> '));
    }
  };
  for (const file of files) if (!indexOf.has(file)) visit(file);
}

{
  const byName = new Map();
  for (const file of files) {
    const name = basename(file);
    if (SHARED_NAMES.has(name)) continue;
    byName.set(name, [...(byName.get(name) ?? []), show(file)]);
  }
  for (const [name, paths] of byName) if (paths.length > 1) problems.names.push(`${name}: ${paths.join(', ')}`);
}

const total = files.reduce((sum, f) => sum + readFileSync(f, 'utf8').split('\n').length - 1, 0);
const sections = [
  ['import circles', problems.circles],
  ['imports that run back up', problems.upward],
  ['files in no layer', problems.unlayered],
  [`files over ${MAX_LINES} lines`, problems.long],
  ['file names used twice', problems.names],
];
let failed = false;
for (const [title, list] of sections) {
  if (list.length === 0) continue;
  failed = true;
  console.log(`${list.length} ${title}:`);
  for (const line of list) console.log(`  ${line}`);
}
console.log(`src/: ${files.length} files, ${total} lines; ${sections.map(([t, l]) => `${l.length} ${t}`).join(', ')}`);
process.exit(failed ? 1 : 0);
