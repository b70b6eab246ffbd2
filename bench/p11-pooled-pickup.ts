import { execFileSync } from 'node:child_process';
import type pg from 'pg';
import { loadConfig } from '../src/support/config.ts';
import { createPool, openDatabase, poolEnd, type Database } from '../src/db/database.ts';
import { silentLogger } from '../src/support/logger.ts';
import { startWorker, type WorkerHandle } from '../src/worker/supervisor.ts';
import { pgbouncerBinary, startPgBouncer, type PgBouncer } from '../test/support/pgbouncer.ts';
import type { BenchContext } from './lib/context.ts';
import type { BenchResult } from './lib/report.ts';
import { benchClient } from './lib/server.ts';
import { p50p99, roundRatios, sleep, spread, until } from './lib/stats.ts';
import { instantSummarizer } from './lib/workers.ts';
import { createConversations } from './lib/writes.ts';

/**
 * P11 pickup through PgBouncer (issue 16): how much later a worker whose
 * DATABASE_URL is a transaction pooler starts a new job than one connected
 * directly. Two fresh databases on the same server; a real PgBouncer in
 * `pool_mode = transaction` (test/support/pgbouncer.ts, 6 server connections)
 * in front of the server. One startWorker per side with the same settings:
 * the pooled side has DATABASE_URL through PgBouncer and DATABASE_DIRECT_URL
 * the server (graphile-worker's LISTEN goes there, its job queries through
 * the pooler, without prepared statements), the direct side both the server.
 * The poll interval is a minute, so only LISTEN/NOTIFY can make a pickup fast.
 *
 * A sample: `select sourcebound.enqueue_compaction($1)` for a new empty
 * conversation on a direct client of the side's database, in a transaction
 * committed asynchronously; the clock reads just before COMMIT is sent, and
 * stops at graphile-worker's `job:start` for that conversation; then wait
 * for the job to complete (it finds nothing to plan) and 5 ms, so no sample
 * queues behind another.
 *
 * Why the clock starts before COMMIT and not when it returns (as it did
 * until a run printed a ratio of -5.44x): the NOTIFY reaches the worker at
 * commit, before the committing backend has sent its reply, and on a loaded
 * machine the worker's whole pickup (the notification, get_job and its
 * reply: three processes woken in turn) can finish before the enqueuing
 * client reads that reply. Such a sample was negative; a round whose direct
 * side had more than half of them had a negative p50, and the ratio's sign
 * flipped. No job can start before its COMMIT is sent, so every sample is now
 * a latency. What the clock now includes beyond the pickup, the COMMIT's trip
 * to the server and the commit itself, is the same on every side, and the
 * commit is asynchronous (the enqueue's durability is not what is measured)
 * so no WAL flush sits in it. The samples whose job started before COMMIT
 * returned are counted in a note.
 *
 * A third side splits the difference (informational, no goal): a worker on
 * the server directly whose database is marked pooled, so graphile-worker
 * runs without prepared statements as it does behind PgBouncer, without the
 * PgBouncer hop. The three sides rotate sample by sample (A B C, B C A,
 * C A B, ...): each goes first, second and third alike, and each round's
 * PgBouncer / direct ratio is still of samples taken side by side.
 *
 * No PgBouncer installed: this throws with the reason (never a skip).
 */
export async function benchPooledPickup(ctx: BenchContext): Promise<BenchResult> {
  const poolSize = 6;
  const concurrency = 4;
  const pollIntervalMs = 60_000;
  // A round is about a second (quick): more, shorter rounds than P4, so a burst of load on a
  // shared machine spoils one ratio of many, not the median.
  const rounds = ctx.full ? 15 : 9;
  const perRound = ctx.full ? 200 : 40;
  const warmup = 10;
  // A pickup by polling would take up to the poll interval: a sample this slow means LISTEN did not work.
  const pickupTimeoutMs = 20_000;

  const binary = pgbouncerBinary();
  const bouncer: PgBouncer = await startPgBouncer({ serverUrl: ctx.server.adminUrl, poolSize });
  const result: BenchResult = {
    id: 'P11',
    title: 'new-job pickup through PgBouncer versus direct',
    status: 'ok',
    seconds: 0,
    params: {
      pgbouncer: pgbouncerVersion(binary!),
      poolMode: 'transaction',
      pgbouncerServerConnections: poolSize,
      poolSize,
      concurrency,
      pollIntervalMs,
      rounds,
      samplesPerRoundAndSide: perRound,
      warmupPerSide: warmup,
    },
    figures: [],
    headlines: [],
    notes: [],
  };
  const opened: { database: Database; handle: WorkerHandle }[] = [];
  const clients: pg.Client[] = [];
  try {
    const directDbUrl = await ctx.server.freshDatabase('p11_direct');
    const pooledDbUrl = await ctx.server.freshDatabase('p11_pooled');
    const unpreparedDbUrl = await ctx.server.freshDatabase('p11_unprepared');
    const pooledDbName = new URL(pooledDbUrl).pathname.slice(1);
    const count = warmup + rounds * perRound;

    const side = async (label: string, url: string, directUrl: string, markPooled = false) => {
      const config = loadConfig({
        DATABASE_URL: url,
        DATABASE_DIRECT_URL: directUrl,
        SOURCEBOUND_WORKER_CONCURRENCY: String(concurrency),
        SOURCEBOUND_POLL_INTERVAL_MS: String(pollIntervalMs),
        LOG_LEVEL: 'silent',
      });
      const database = markPooled ? unpreparedDirect(url, poolSize) : await openDatabase(config, silentLogger, poolSize);
      const handle = await startWorker({ config, logger: silentLogger, database, summarizer: instantSummarizer(), skipMigrations: true });
      opened.push({ database, handle });
      const writer = await benchClient(directUrl);
      clients.push(writer);
      const conversations = await createConversations(writer, count);
      const started = new Map<string, number>();
      const completed = new Set<string>();
      const errors: unknown[] = [];
      const conversationOf = (payload: unknown) => String((payload as { conversationId?: string } | null)?.conversationId);
      handle.runner.events.on('job:start', ({ job }) => {
        const c = conversationOf(job.payload);
        if (job.task_identifier === 'compact_conversation' && !started.has(c)) started.set(c, performance.now());
      });
      handle.runner.events.on('job:complete', ({ job, error }) => {
        if (error) errors.push(error);
        if (job.task_identifier === 'compact_conversation') completed.add(conversationOf(job.payload));
      });
      let next = 0;
      const early = { count: 0, samples: 0 };
      const sample = async (): Promise<number> => {
        const c = conversations[next++]!;
        await writer.query('begin');
        await writer.query('set local synchronous_commit = off');
        await writer.query('select sourcebound.enqueue_compaction($1)', [c]);
        // Before COMMIT is sent: the job cannot start earlier (see the header).
        const t0 = performance.now();
        await writer.query('commit');
        const committed = performance.now();
        await until(
          () => started.has(c) || errors.length > 0,
          pickupTimeoutMs,
          `${label}: job:start (a pickup this slow is a poll, not LISTEN)`,
          1,
        );
        await until(() => completed.has(c) || errors.length > 0, 30_000, `${label}: the job to complete`, 1);
        if (errors.length > 0) throw new Error(`${label}: a compaction job failed`, { cause: errors[0] });
        early.samples++;
        if (started.get(c)! < committed) early.count++;
        await sleep(5);
        return started.get(c)! - t0;
      };
      return { label, database, sample, early };
    };
    const direct = await side('direct', directDbUrl, directDbUrl);
    const pooled = await side('through PgBouncer', bouncer.url(pooledDbName), pooledDbUrl);
    const unprepared = await side('direct, prepared statements off', unpreparedDbUrl, unpreparedDbUrl, true);
    if (direct.database.pooled || !pooled.database.pooled)
      throw new Error('P11: the sides are not what they claim (direct must be unpooled, the PgBouncer side pooled)');
    const sides = [direct, pooled, unprepared];
    const rotation = (i: number) => [...sides.slice(i % 3), ...sides.slice(0, i % 3)];

    ctx.log('P11: warm-up');
    for (let i = 0; i < warmup; i++) {
      for (const s of rotation(i)) await s.sample();
    }
    const q = { dP50: [] as number[], dP99: [] as number[], pP50: [] as number[], pP99: [] as number[], uP50: [] as number[] };
    let slowest = 0;
    for (let r = 0; r < rounds; r++) {
      const d: number[] = [];
      const p: number[] = [];
      const u: number[] = [];
      for (let i = 0; i < perRound; i++) {
        for (const s of rotation(i)) {
          const ms = await s.sample();
          (s === direct ? d : s === pooled ? p : u).push(ms);
          slowest = Math.max(slowest, ms);
        }
      }
      const qd = p50p99(d);
      const qp = p50p99(p);
      q.dP50.push(qd.p50);
      q.dP99.push(qd.p99);
      q.pP50.push(qp.p50);
      q.pP99.push(qp.p99);
      q.uP50.push(p50p99(u).p50);
      ctx.log(
        `P11 round ${r + 1}/${rounds}: pickup p50 through PgBouncer ${qp.p50.toFixed(2)} ms, direct ${qd.p50.toFixed(2)} ms (prepared statements off: ${q.uP50.at(-1)!.toFixed(2)} ms)`,
      );
    }
    const serverConnections = await bouncer.serverConnections(pooledDbName);

    result.figures.push(
      { label: 'pickup through PgBouncer (enqueue COMMIT sent to job:start), p50', unit: 'ms', value: spread(q.pP50) },
      { label: 'pickup through PgBouncer, p99', unit: 'ms', value: spread(q.pP99) },
      { label: 'direct pickup (enqueue COMMIT sent to job:start), p50', unit: 'ms', value: spread(q.dP50) },
      { label: 'direct pickup, p99', unit: 'ms', value: spread(q.dP99) },
      { label: 'direct pickup with prepared statements off, p50', unit: 'ms', value: spread(q.uP50) },
    );
    result.headlines.push(
      {
        label: 'P11 pickup through PgBouncer p50 / direct pickup p50',
        ratio: spread(roundRatios(q.pP50, q.dP50)),
        goal: { op: '<=', target: 2 },
        floor: `direct pickup ${spread(q.dP50).median.toFixed(2)} ms`,
      },
      { label: 'P11 pickup through PgBouncer p99 / direct pickup p99', ratio: spread(roundRatios(q.pP99, q.dP99)), goal: null },
      { label: 'P11 split: direct with prepared statements off p50 / direct p50', ratio: spread(roundRatios(q.uP50, q.dP50)), goal: null },
      {
        label: 'P11 split: through PgBouncer p50 / direct with prepared statements off p50',
        ratio: spread(roundRatios(q.pP50, q.uP50)),
        goal: null,
      },
    );
    result.notes.push(
      `The clock starts just before the enqueue's COMMIT is sent (asynchronous commit). Jobs started before that COMMIT had returned, which a clock started on its return read as negative: ${sides.map((s) => `${s.label} ${s.early.count} of ${s.early.samples}`).join(', ')}.`,
      `Poll interval ${pollIntervalMs / 1000} s on every side: the slowest of all ${3 * (warmup + rounds * perRound)} pickups took ${slowest.toFixed(1)} ms, so every job was started by LISTEN/NOTIFY, not by a poll.`,
      `The pooled side's job queries go through PgBouncer without prepared statements (graphile-worker's noPreparedStatements); the direct side's are prepared. PgBouncer held ${serverConnections} server connection(s) for the pooled database at the end (of ${poolSize}).`,
      'The split: a third worker on the server directly, its database marked pooled so graphile-worker runs without prepared statements (as behind PgBouncer) but without the PgBouncer hop. PgBouncer / direct is the product of the two split ratios, round by round.',
      `p99 of ${perRound} samples per round is close to their maximum; only the p50 ratio has a goal (issue 16).`,
    );
  } finally {
    for (const { handle } of opened) await handle.stop().catch(() => {});
    for (const { database } of opened) await database.close().catch(() => {});
    for (const c of clients) await c.end().catch(() => {});
    await bouncer.stop().catch(() => {});
  }
  return result;
}

/**
 * The server directly, marked pooled: startWorker then runs graphile-worker
 * with noPreparedStatements and sends the claim and commit unnamed, as it does
 * behind a transaction pooler. (openDatabase marks pooled only when the two
 * URLs differ; this side exists to split P11's figure.)
 */
function unpreparedDirect(url: string, poolSize: number): Database {
  const pool = createPool(url, silentLogger, poolSize);
  return { connectionString: url, directConnectionString: url, pooled: true, pool, close: () => poolEnd(pool) };
}

function pgbouncerVersion(binary: string): string {
  try {
    return execFileSync(binary, ['--version'], { encoding: 'utf8' }).split('\n')[0]!.trim();
  } catch {
    return binary;
  }
}
