#!/usr/bin/env node
// Every relative link in README.md and docs/*.md must name a file that exists,
// and a link with a #fragment must name a heading of that file (GitHub's slugs).
// Usage: node scripts/check-links.mjs [file.md ...]; exit 1 with one line per broken link.
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const files =
  process.argv.length > 2
    ? process.argv.slice(2).map((f) => resolve(f))
    : [
        join(root, 'README.md'),
        ...readdirSync(join(root, 'docs'))
          .filter((f) => f.endsWith('.md'))
          .map((f) => join(root, 'docs', f)),
      ];

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens, repeats numbered. */
function anchors(markdown) {
  const seen = new Map();
  const out = new Set();
  for (const line of stripCode(markdown).split('\n')) {
    const m = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (!m) continue;
    const base = m[1]
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, '')
      .replace(/\s/g, '-');
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

/** The text without fenced code blocks and inline code, where a `[x](y)` is no link. */
function stripCode(markdown) {
  return markdown.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, '').replace(/`[^`\n]*`/g, '');
}

const problems = [];
for (const file of files) {
  const text = readFileSync(file, 'utf8');
  const links = [...stripCode(text).matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)].map((m) => m[1]);
  for (const link of links) {
    if (/^[a-z][a-z0-9+.-]*:/i.test(link)) continue; // http:, https:, mailto:
    const [path, fragment] = link.split('#', 2);
    const target = path === '' ? file : resolve(dirname(file), decodeURIComponent(path));
    const where = relative(root, file);
    if (!existsSync(target)) {
      problems.push(`${where}: ${link}: no such file`);
      continue;
    }
    if (fragment !== undefined && statSync(target).isFile() && target.endsWith('.md')) {
      if (!anchors(readFileSync(target, 'utf8')).has(fragment))
        problems.push(`${where}: ${link}: no heading #${fragment} in ${relative(root, target)}`);
    }
  }
}
for (const p of problems) process.stderr.write(`${p}\n`);
process.stdout.write(`check-links: ${files.length} files, ${problems.length} broken links\n`);
process.exitCode = problems.length > 0 ? 1 : 0;
