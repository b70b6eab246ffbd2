import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { projectConversationHistory, type ConversationProjection, type ReadEvent } from '../src/projection/index.ts';
import { APP_GOAL, appRole, type AppRole } from './lib/app-role.ts';
import type { BenchContext } from './lib/context.ts';
import type { BenchResult } from './lib/report.ts';
import { benchPool } from './lib/server.ts';
import { requestSplit } from './lib/split.ts';
import { timeStatements, type TimedStatement } from './lib/statements.ts';
import { p50p99, percentile, rotated, roundRatios, spread } from './lib/stats.ts';
import { bulkPairs, createConversations } from './lib/writes.ts';
import { BUDGET, summarizeAll } from './p2-projection.ts';

/**
 * P2b the request path: what projectConversationHistory costs the
 * application on every model request, against the read it replaces: one
 * SELECT of the whole conversation's messages in order (what an app does
 * without sourcebound). Conversations of 40, 100 and 1,000 pairs of real
 * text (the shared threads, written set-based as P2 writes them), every
 * plannable range with a completed, source-bound summary; default options
 * (stable layout, layout stored), 64 KiB budget.
 *
 * The plain read is an application's own table: `(conversation_id,
 * position)` as its primary key, role and text, filled with the same
 * messages; one statement, the rows in order. Beside it, without a goal, the
 * same read from sourcebound's tables (messages joined to their runs for the
 * order), which an app that stores its messages there would send.
 *
 * Each side is measured twice: as the owner (as before the roles existed),
 * and through a pool whose sessions are `sourcebound_app` with row security
 * on and `sourcebound.scope` naming the conversations' scope (lib/app-role.ts).
 * The app's own table then has row security too, its policy the one an app
 * would write (the row's scope is the session's), so the floor is read under
 * the same condition as the projection it is compared with.
 *
 * Calls are interleaved one by one (sides, roles and sizes rotated), per round
 * a p50 and p99 per side, role and size; headlines: per-round p50 ratios.
 * Afterwards a breakdown pass as the owner (statements timed as the client
 * sees them, rows counted by the projection's own `onRead`): where a
 * projection's time goes.
 */
const SIZES = [40, 100, 1000];
const GOALS: Record<number, number> = { 40: 1.5, 100: 1.5, 1000: 1.0 };
const SCOPE = 'bench';

type Side = 'projection' | 'plain' | 'sourcebound';
const PLAIN_READ = 'select role, content from bench_app_messages where conversation_id = $1 order by position';
const SIDES: Side[] = ['projection', 'plain', 'sourcebound'];
type Who = 'owner' | 'app';
const WHO: Who[] = ['owner', 'app'];
const AS: Record<Who, string> = { owner: 'as the owner', app: 'as the app role with row security' };
/** Every side as each role, in one list the rounds rotate through. */
const CALLS = WHO.flatMap((who) => SIDES.map((side) => ({ side, who })));

export async function benchRequestPath(ctx: BenchContext): Promise<BenchResult> {
  const rounds = ctx.full ? 9 : 5;
  const perRound = ctx.full ? 200 : 40;
  const breakdownCalls = 50;
  const url = await ctx.server.freshDatabase('p2b_request_path');
  const pool = benchPool(url, 4);
  const timer = timeStatements(pool);
  const result: BenchResult = {
    id: 'P2b',
    title: 'request path: projection versus a plain read of the conversation',
    status: 'ok',
    seconds: 0,
    params: {
      budgetBytes: BUDGET,
      sizes: SIZES,
      layout: 'stable (default)',
      rounds,
      callsPerRoundSizeSideAndRole: perRound,
      breakdownCalls,
      app: `sourcebound_app, row security on (sourcebound's tables and the app's own), scope '${SCOPE}'`,
    },
    figures: [],
    headlines: [],
    notes: [],
  };
  let app: AppRole | undefined;
  const extraPools: pg.Pool[] = [];
  try {
    const conversations = await createConversations(pool, SIZES.length, SCOPE);
    let offset = 0;
    for (const [i, size] of SIZES.entries()) {
      await bulkPairs(pool, [conversations[i]!], size, offset);
      offset += size;
      const ranges = await summarizeAll(pool, conversations[i]!, size);
      ctx.log(`P2b: ${size} pairs, ${ranges} summarized ranges`);
    }
    await pool.query('delete from graphile_worker._private_jobs');
    // The application's own message table: the plain read's floor.
    // Its scope column and policy are what an app on row security would add; the owner bypasses them.
    await pool.query(`create table bench_app_messages (
      conversation_id uuid not null, position int not null, scope text not null, role text not null, content text not null,
      primary key (conversation_id, position))`);
    await pool.query(`create policy app_scope on bench_app_messages using (scope = current_setting('sourcebound.scope', true))`);
    await pool.query('grant select on bench_app_messages to sourcebound_app');
    await pool.query(
      `insert into bench_app_messages (conversation_id, position, scope, role, content)
      select p.conversation_id, 2 * p.pair_index + (m.role = 'assistant')::int, $2, m.role, m.content
      from sourcebound.pairs p join sourcebound.messages m on m.id in (p.user_message_id, p.assistant_message_id)
      where p.conversation_id = any($1::uuid[])`,
      [conversations, SCOPE],
    );
    await pool.query('vacuum analyze');
    app = await appRole(url, SCOPE, ['bench_app_messages']);
    // A fresh pool for each side and role, none of them the one that built the fixture and wrote
    // the layouts: a backend that has just spent CPU on one kind of read is scheduled later for
    // the next (bench/README.md, "A loaded machine..."), and the app's reads of sourcebound's
    // tables cost more than the owner's; on shared pools that leaked into the app's other figures
    // (its plain read took 1.7 times the owner's on one pool, 1.1 on its own). And the pool that
    // wrote a layout projected it faster, interleaved, than another pool of the same role (by
    // 1.2-1.3 at 100 and 1,000 pairs, owner against owner).
    const poolFor = (u: string) => {
      const p = benchPool(u, 4);
      extraPools.push(p);
      return p;
    };
    const ownerProjection = poolFor(url);
    const breakdownTimer = timeStatements(ownerProjection);
    const pools: Record<Who, Record<Side, pg.Pool>> = {
      owner: { projection: ownerProjection, plain: poolFor(url), sourcebound: poolFor(url) },
      app: { projection: poolFor(app.url), plain: poolFor(app.url), sourcebound: poolFor(app.url) },
    };

    const call = async (
      side: Side,
      conversationId: string,
      onRead?: (e: ReadEvent) => void,
      who: Who = 'owner',
    ): Promise<{ ms: number; projection?: ConversationProjection; rows?: number }> => {
      const t0 = performance.now();
      if (side === 'projection') {
        const projection = await projectConversationHistory({
          pool: pools[who].projection,
          conversationId,
          scope: SCOPE,
          budgetBytes: BUDGET,
          onRead,
        });
        return { ms: performance.now() - t0, projection };
      }
      const { rows } = await pools[who][side].query(
        side === 'plain'
          ? PLAIN_READ
          : `select m.role, m.content from sourcebound.messages m join sourcebound.runs r on r.id = m.run_id
           where m.conversation_id = $1 order by r.seq, m.role desc`,
        [conversationId],
      );
      return { ms: performance.now() - t0, rows: rows.length };
    };

    // What each side returns, and warm-up (the first projection lays out and stores its layout).
    for (const [i, size] of SIZES.entries()) {
      // The first call lays the history out and stores its layout (a rewrite); later ones only read it.
      timer.start();
      const t0 = performance.now();
      const first = {
        ms: 0,
        projection: await projectConversationHistory({ pool, conversationId: conversations[i]!, scope: SCOPE, budgetBytes: BUDGET }),
      };
      first.ms = performance.now() - t0;
      const firstStatements = timer.stop();
      const p = first.projection!;
      const write = firstStatements.filter((x) => x.kind.includes('projection_layouts'));
      const summaries = p.items.filter((it) => it.kind === 'summary').length;
      const raw = p.items.filter((it) => it.kind === 'pair').length;
      const plain = await pool.query<{ bytes: string }>(
        'select sum(octet_length(content))::text as bytes from bench_app_messages where conversation_id = $1',
        [conversations[i]!],
      );
      const rows = (await call('plain', conversations[i]!)).rows!;
      const sbRows = (await call('sourcebound', conversations[i]!)).rows!;
      if (rows !== 2 * size || sbRows !== 2 * size)
        throw new Error(`P2b: the plain reads returned ${rows} and ${sbRows} messages at ${size} pairs (expected ${2 * size})`);
      // The app sees the same: its scope is the conversations' (a policy that hid rows would make its reads cheaper, not comparable).
      const appRows = [
        (await call('plain', conversations[i]!, undefined, 'app')).rows!,
        (await call('sourcebound', conversations[i]!, undefined, 'app')).rows!,
      ];
      const appItems = (await call('projection', conversations[i]!, undefined, 'app')).projection!.items;
      if (appRows.some((n) => n !== 2 * size) || JSON.stringify(appItems) !== JSON.stringify(p.items)) {
        throw new Error(
          `P2b: at ${size} pairs the app role read ${appRows.join(' and ')} messages${JSON.stringify(appItems) === JSON.stringify(p.items) ? '' : ' and another projection'} (expected ${2 * size} and the owner's projection)`,
        );
      }
      result.notes.push(
        `${size} pairs: the projection is ${p.bytes} bytes (${summaries} summarized ranges, ${raw} raw pairs${p.omitted.length > 0 ? `, pairs before ${p.omitted.at(-1)!.toPair + 1} left out` : ''}); the plain read returns ${rows} messages, ${Number(plain.rows[0]!.bytes).toLocaleString('en-US')} bytes of text. ` +
          `The first call (a rewrite: '${p.cache.rewrite}') took ${first.ms.toFixed(2)} ms in ${firstStatements.length} statements, the layout write ${write.length === 0 ? 'none' : `${write.reduce((t, x) => t + x.ms, 0).toFixed(2)} ms`}; the measured calls find the layout stored and write nothing.`,
      );
      for (let w = 0; w < 10; w++) for (const c of CALLS) await call(c.side, conversations[i]!, undefined, c.who);
    }

    const p50 = new Map<string, number[]>();
    const p99 = new Map<string, number[]>();
    const key = (side: Side, k: number, who: Who = 'owner') => `${side} ${k} ${who}`;
    for (let r = 0; r < rounds; r++) {
      const samples = new Map<string, number[]>();
      for (let j = 0; j < perRound; j++) {
        // Sizes, sides and roles rotated, so none always follows the same one.
        for (let s = 0; s < SIZES.length; s++) {
          const k = (s + j) % SIZES.length;
          for (const { side, who } of rotated(j + r, CALLS)) {
            const list = samples.get(key(side, k, who)) ?? [];
            list.push((await call(side, conversations[k]!, undefined, who)).ms);
            samples.set(key(side, k, who), list);
          }
        }
      }
      for (const [name, xs] of samples) {
        const q = p50p99(xs);
        p50.set(name, [...(p50.get(name) ?? []), q.p50]);
        p99.set(name, [...(p99.get(name) ?? []), q.p99]);
      }
      const last = (side: Side, k: number, who: Who) =>
        p50
          .get(key(side, k, who))!
          .at(-1)!
          .toFixed(2);
      ctx.log(
        `P2b round ${r + 1}/${rounds}: p50 projection / plain, owner | app ${SIZES.map((size, k) => `${size}: ${last('projection', k, 'owner')} / ${last('plain', k, 'owner')} | ${last('projection', k, 'app')} / ${last('plain', k, 'app')} ms`).join(', ')}`,
      );
    }

    for (const [k, size] of SIZES.entries()) {
      const at = (side: Side, who: Who = 'owner') => ({ p50: p50.get(key(side, k, who))!, p99: p99.get(key(side, k, who))! });
      const proj = at('projection');
      const plain = at('plain');
      const sb = at('sourcebound');
      const n = size.toLocaleString('en-US');
      result.figures.push(
        { label: `${n} pairs: projection, p50`, unit: 'ms', value: spread(proj.p50) },
        { label: `${n} pairs: projection, p99`, unit: 'ms', value: spread(proj.p99) },
        { label: `${n} pairs: plain read (app table, one SELECT in order), p50`, unit: 'ms', value: spread(plain.p50) },
        { label: `${n} pairs: plain read, p99`, unit: 'ms', value: spread(plain.p99) },
        { label: `${n} pairs: the same read from sourcebound's messages and runs, p50`, unit: 'ms', value: spread(sb.p50) },
      );
      result.headlines.push(
        {
          label: `P2b projection p50 / plain read p50 at ${n} pairs`,
          ratio: spread(roundRatios(proj.p50, plain.p50)),
          goal: { op: '<=', target: GOALS[size]! },
          // The floor beside the goal, and the tail beside the median (p99 of each round, median over rounds).
          floor:
            `plain read p50 ${spread(plain.p50).median.toFixed(2)} ms, p99 ${spread(plain.p99).median.toFixed(2)} ms; ` +
            `projection p50 ${spread(proj.p50).median.toFixed(2)} ms, p99 ${spread(proj.p99).median.toFixed(2)} ms`,
        },
        { label: `P2b projection p99 / plain read p99 at ${n} pairs`, ratio: spread(roundRatios(proj.p99, plain.p99)), goal: null },
        {
          label: `P2b projection p50 / sourcebound-table read p50 at ${n} pairs`,
          ratio: spread(roundRatios(proj.p50, sb.p50)),
          goal: null,
        },
      );
      const appSide = { projection: at('projection', 'app'), plain: at('plain', 'app'), sourcebound: at('sourcebound', 'app') };
      result.figures.push(
        { label: `${n} pairs: projection, p50, ${AS.app}`, unit: 'ms', value: spread(appSide.projection.p50) },
        { label: `${n} pairs: projection, p99, ${AS.app}`, unit: 'ms', value: spread(appSide.projection.p99) },
        { label: `${n} pairs: plain read, p50, ${AS.app} (on the app's table too)`, unit: 'ms', value: spread(appSide.plain.p50) },
        {
          label: `${n} pairs: the same read from sourcebound's messages and runs, p50, ${AS.app}`,
          unit: 'ms',
          value: spread(appSide.sourcebound.p50),
        },
      );
      result.headlines.push(
        {
          label: `P2b projection p50 / plain read p50 at ${n} pairs, both ${AS.app}`,
          ratio: spread(roundRatios(appSide.projection.p50, appSide.plain.p50)),
          goal: null,
          floor: `plain read p50 ${spread(appSide.plain.p50).median.toFixed(2)} ms; projection p50 ${spread(appSide.projection.p50).median.toFixed(2)} ms`,
        },
        {
          label: `P2b projection p50 at ${n} pairs, ${AS.app} / ${AS.owner}`,
          ratio: spread(roundRatios(appSide.projection.p50, proj.p50)),
          goal: { op: '<=', target: APP_GOAL },
          floor: `owner ${spread(proj.p50).median.toFixed(2)} ms, app ${spread(appSide.projection.p50).median.toFixed(2)} ms`,
        },
        {
          label: `P2b plain read p50 at ${n} pairs, ${AS.app} / ${AS.owner}`,
          ratio: spread(roundRatios(appSide.plain.p50, plain.p50)),
          goal: null,
        },
        {
          label: `P2b sourcebound-table read p50 at ${n} pairs, ${AS.app} / ${AS.owner}`,
          ratio: spread(roundRatios(appSide.sourcebound.p50, sb.p50)),
          goal: null,
        },
      );
    }

    // Where a projection's time goes: statements as the client sees them, rows by onRead.
    for (const [k, size] of SIZES.entries()) {
      const calls: { ms: number; statements: TimedStatement[]; reads: ReadEvent[] }[] = [];
      for (let c = 0; c < breakdownCalls; c++) {
        const reads: ReadEvent[] = [];
        breakdownTimer.start();
        const { ms } = await call('projection', conversations[k]!, (e) => reads.push(e));
        calls.push({ ms, statements: breakdownTimer.stop(), reads });
        await call('plain', conversations[k]!);
      }
      result.notes.push(breakdown(size, calls));
      const split = await requestSplit(pool, `${size.toLocaleString('en-US')} pairs`, calls, {
        text: PLAIN_READ,
        values: [conversations[k]!],
      });
      result.notes.push(split.note);
      result.figures.push(...split.figures);
      ctx.log(`P2b ${split.note}`);
      const headline = result.headlines.find(
        (h) => h.label === `P2b projection p50 / plain read p50 at ${size.toLocaleString('en-US')} pairs`,
      );
      if (headline !== undefined) headline.floor = `${headline.floor ?? ''}; ${split.short}`;
      const med = (f: (c: (typeof calls)[number]) => number) =>
        percentile(
          calls.map(f).sort((a, b) => a - b),
          50,
        );
      const n = size.toLocaleString('en-US');
      result.figures.push(
        {
          label: `${n} pairs: statements per projection (round trips)`,
          unit: 'statements',
          value: spread([med((c) => c.statements.length)]),
        },
        {
          label: `${n} pairs: projection time outside its statements (JavaScript, pool checkout), p50`,
          unit: 'ms',
          value: spread([med((c) => c.ms - c.statements.reduce((s, x) => s + x.ms, 0))]),
        },
      );
    }
  } finally {
    for (const p of extraPools) await p.end();
    await app?.close();
    await pool.end();
  }
  importTimes(result, rounds);
  return result;
}

/**
 * Import time of the package's entry points, as an app pays it at start: the
 * built files (npm run build), each in a fresh node process, interleaved;
 * `sourcebound/app` (turns and projection) against `sourcebound` (everything).
 */
function importTimes(result: BenchResult, rounds: number): void {
  const root = fileURLToPath(new URL('..', import.meta.url));
  execFileSync('npm', ['run', 'build'], { cwd: root, stdio: 'ignore' });
  const once = (entry: string): number =>
    Number(
      execFileSync(
        process.execPath,
        [
          '--input-type=module',
          '-e',
          `const t = process.hrtime.bigint(); await import(${JSON.stringify(`${root}dist/src/${entry}.js`)}); console.log(Number(process.hrtime.bigint() - t) / 1e6);`,
        ],
        { cwd: root, encoding: 'utf8' },
      ).trim(),
    );
  const app: number[] = [];
  const full: number[] = [];
  for (let r = 0; r < Math.max(5, rounds) * 2; r++) {
    app.push(once('app'));
    full.push(once('index'));
  }
  result.figures.push(
    { label: 'import sourcebound/app (turns, projection, adapters), built', unit: 'ms', value: spread(app) },
    { label: 'import sourcebound (everything, with the worker), built', unit: 'ms', value: spread(full) },
  );
  result.headlines.push({
    label: 'P2b import sourcebound/app / import sourcebound',
    ratio: spread(roundRatios(app, full)),
    goal: { op: '<=', target: 1 / 3 },
    floor: `sourcebound/app ${spread(app).median.toFixed(0)} ms, sourcebound ${spread(full).median.toFixed(0)} ms (a fresh node process each)`,
  });
}

const LABELS: Record<string, string> = {
  projection_read: 'projection_read (count, layout, pairs and records in one statement)',
  'begin isolation': 'BEGIN of the snapshot (repeatable read, read only)',
  rollback: 'ROLLBACK ending it',
  'insert into sourcebound.projection_layouts': 'the layout write',
};

/** One line: round trips and rows per call, and the p50 time of each kind of statement and of what lies outside them. */
function breakdown(size: number, calls: { ms: number; statements: TimedStatement[]; reads: ReadEvent[] }[]): string {
  const p50 = (xs: number[]) =>
    percentile(
      [...xs].sort((a, b) => a - b),
      50,
    );
  const kinds = [...new Set(calls.flatMap((c) => c.statements.map((s) => s.kind)))];
  const parts = kinds.map((kind) => {
    const perCall = calls.map((c) => c.statements.filter((s) => s.kind === kind));
    const count = p50(perCall.map((x) => x.length));
    const ms = p50(perCall.map((x) => x.reduce((s, y) => s + y.ms, 0)));
    const rows = p50(perCall.map((x) => x.reduce((s, y) => s + y.rows, 0)));
    const present = perCall.filter((x) => x.length > 0).length;
    return `${LABELS[kind] ?? kind} ${count === 1 ? '' : `x${count} `}${ms.toFixed(3)} ms${rows > 0 ? `, ${rows} rows` : ''}${present < calls.length ? ` (in ${present} of ${calls.length} calls)` : ''}`;
  });
  const total = p50(calls.map((c) => c.ms));
  const inStatements = p50(calls.map((c) => c.statements.reduce((s, x) => s + x.ms, 0)));
  const outside = p50(calls.map((c) => c.ms - c.statements.reduce((s, x) => s + x.ms, 0)));
  const pairRows = p50(calls.map((c) => c.reads.filter((e) => e.query === 'pairsPageRead').reduce((s, e) => s + e.rows, 0)));
  const textRows = p50(calls.map((c) => c.reads.filter((e) => e.query === 'pairsPageRead').reduce((s, e) => s + (e.textRows ?? 0), 0)));
  const summaryRows = p50(calls.map((c) => c.reads.filter((e) => e.query === 'summariesForRangesRead').reduce((s, e) => s + e.rows, 0)));
  const statements = p50(calls.map((c) => c.statements.length));
  return (
    `${size} pairs, where a projection's time goes (p50 of ${calls.length} calls, statements timed as the client sees them): ` +
    `${total.toFixed(2)} ms a call, ${statements} statements (round trips) taking ${inStatements.toFixed(2)} ms, ${outside.toFixed(2)} ms outside them (JavaScript, pool checkout); ` +
    `rows read: ${pairRows} pairs (${textRows} with their texts), ${summaryRows} summary records. By statement: ${parts.join('; ')}.`
  );
}
