/**
 * Grounding probes: rewrites a model makes of the facts it copies, and
 * tampered ones, each checked by src/grounding/index.ts against its material
 * (one reply). A faithful rewrite must be grounded (else it is a false flag:
 * under `reject` it spends an attempt), a tampered one flagged (else it is an
 * evasion). Cases marked `left` are outside the documented rules and reported,
 * not counted. Exits 1 when any other case is wrong.
 *
 *   node --import tsx bench/grounding-probes.ts
 *
 * Round 2, session 14: written from the probes that found the false flags and
 * evasions of that session's CHANGELOG entry. The module before them got
 * 37 of the 307 wrong (33 false flags, 4 evasions); it gets none now.
 */
import { groundSummary } from '../src/grounding/index.ts';
import { PROBES } from './lib/grounding-probes.ts';

let wrong = 0;
let leftWrong = 0;
for (const p of PROBES) {
  const g = groundSummary(p.summary, [{ id: 'm1', text: p.material }]);
  const grounded = g.ungrounded.length === 0;
  if (grounded === p.grounded) continue;
  const what = p.grounded ? 'false flag' : 'evasion';
  if (p.left !== undefined) {
    leftWrong++;
    process.stdout.write(`left (${p.left}): ${what} ${JSON.stringify(p.summary)} against ${JSON.stringify(p.material)}\n`);
    continue;
  }
  wrong++;
  process.stdout.write(
    `WRONG: ${what} ${JSON.stringify(p.summary)} against ${JSON.stringify(p.material)}: ${JSON.stringify(g.ungrounded)}\n`,
  );
}
const faithful = PROBES.filter((p) => p.grounded).length;
process.stdout.write(
  `${PROBES.length} probes (${faithful} faithful, ${PROBES.length - faithful} tampered): ${wrong} wrong, ${leftWrong} left by rule\n`,
);
process.exit(wrong > 0 ? 1 : 0);
