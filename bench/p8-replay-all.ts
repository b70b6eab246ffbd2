/**
 * P8's price check on many real threads: the longest `--threads` threads of
 * the shared data (default 50), each replayed turn by turn at every
 * `--budgets` budget in both layouts, the projection asked before every
 * request, a summary (the offline summarizer's, written as a completed
 * record) arriving `--lag` turns after its range becomes plannable, and every
 * request priced as prompt caching bills it (bench/lib/prompt-cache.ts)
 * against sending the whole history. Prints per budget the mean and worst
 * cost / whole and how many replays cost more than the whole history. The
 * README's figures for replays that cost more than sending everything come
 * from it. Not part of `npm run bench` (no goal; minutes of runtime).
 *
 * With `--moving`, each budget is a window: the projection is asked for what
 * it leaves after the new user message (a budget that moves every turn).
 * With `--edit-back N`, at 70% of each thread the user message N pairs back
 * is edited in place (in the database and in the whole history alike).
 *
 *   DATABASE_URL=postgres://... node --import tsx bench/p8-replay-all.ts [--threads 50] [--budgets 32768,65536] [--lag 3] [--moving] [--edit-back 3]
 */
import { parseArgs } from 'node:util';
import pg from 'pg';
import { withDatabase } from '../src/db/database.ts';
import { migrateDatabase } from '../src/db/migrate.ts';
import { silentLogger } from '../src/support/logger.ts';
import { dataset } from './lib/data.ts';
import { replayThread } from './lib/replay.ts';

const { values } = parseArgs({
  options: {
    threads: { type: 'string', default: '50' },
    budgets: { type: 'string', default: '8192,16384,32768,65536' },
    lag: { type: 'string', default: '3' },
    moving: { type: 'boolean', default: false },
    'edit-back': { type: 'string' },
  },
});
const url = process.env.DATABASE_URL;
if (!url) {
  process.stderr.write('p8-replay-all: set DATABASE_URL (a server where a scratch database may be created)\n');
  process.exit(2);
}
const editBack = values['edit-back'] === undefined ? null : Number(values['edit-back']);
if (editBack !== null && !(Number.isInteger(editBack) && editBack >= 1)) {
  process.stderr.write(
    `p8-replay-all: --edit-back wants a whole number of pairs, 1 or more (got ${JSON.stringify(values['edit-back'])})\n`,
  );
  process.exit(2);
}
const budgets = values.budgets.split(',').map(Number);
const lag = Number(values.lag);
const name = 'sourcebound_p8_replay_all';

const admin = new pg.Client({ connectionString: url });
await admin.connect();
await admin.query(`drop database if exists ${name} with (force)`);
await admin.query(`create database ${name}`);
await migrateDatabase(withDatabase(url, name), silentLogger);
const pool = new pg.Pool({ connectionString: withDatabase(url, name), max: 4 });

const threads = [...dataset().threads]
  .sort((a, b) => b.pairs.length - a.pairs.length || a.id.localeCompare(b.id))
  .slice(0, Number(values.threads));
const costs = new Map<string, number[]>();
const above: string[] = [];
try {
  for (const thread of threads) {
    // `--edit-back N`: at 70% of the thread, the user message N pairs back is edited in place.
    const at = Math.floor(thread.pairs.length * 0.7);
    const edits = editBack === null ? [] : [{ turn: at, pair: Math.max(0, at - editBack) }];
    for (const [key, cost] of await replayThread(pool, thread, {
      budgets,
      layouts: ['stable', 'newest-first'],
      lag,
      moving: values.moving,
      edits,
    })) {
      costs.set(key, [...(costs.get(key) ?? []), cost]);
      if (key.endsWith(' stable') && cost > 1.0001) above.push(`${thread.id} at ${key.split(' ')[0]}: ${cost.toFixed(3)}`);
    }
  }
} finally {
  await pool.end();
  await admin.query(`drop database if exists ${name} with (force)`);
  await admin.end();
}

process.stdout.write(
  `${threads.length} threads (${threads.at(-1)?.pairs.length}-${threads[0]?.pairs.length} pairs), summaries ${lag} turns after plannable${values.moving ? ', budget = window less the new message' : ''}${values['edit-back'] === undefined ? '' : `, one user message ${values['edit-back']} pairs back edited at 70% of each thread`}; cost with caching / whole history, cached\n\n`,
);
process.stdout.write('| budget | layout | mean | worst | replays > 1 |\n|---|---|---:|---:|---:|\n');
for (const [key, list] of costs) {
  const [budget, layout] = key.split(' ');
  const mean = list.reduce((a, b) => a + b, 0) / list.length;
  process.stdout.write(
    `| ${budget} | ${layout} | ${mean.toFixed(3)} | ${Math.max(...list).toFixed(3)} | ${list.filter((c) => c > 1.0001).length} |\n`,
  );
}
if (above.length > 0) process.stdout.write(`\nStable replays above 1: ${above.join('; ')}\n`);
