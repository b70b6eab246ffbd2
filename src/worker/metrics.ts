import type pg from 'pg';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { Outcome, Summarizer, SummaryRequest } from '../support/summary-contract.ts';
import type { RangeResult } from '../conversation/compact.ts';
import { compactionQueueRead } from '../db/queries/queue.ts';

/**
 * Worker metrics (Prometheus, via prom-client), one registry per worker so two
 * workers in one process never share counters. Counters count what *this
 * process* did; the queue gauges are read from the database at scrape time and
 * are the same for every worker of a fleet (alert on them from one series).
 *
 * Terminology, as in the README's metrics table:
 * - job: a graphile-worker job (`compact_conversation`, `sweep_compaction`).
 * - range: ten pairs of a conversation; one compaction pass reports a result per range.
 * - attempt: one summarizer call's outcome (`ok`, `invalid`, `unknown` spend an
 *   attempt; `deferred`, `config` do not).
 */
export interface WorkerMetrics {
  registry: Registry;
  jobs: Counter<'task' | 'outcome'>;
  ranges: Counter<'result'>;
  attempts: Counter<'outcome' | 'reason'>;
  summarizerSeconds: Histogram<'outcome'>;
  admissionWaitSeconds: Histogram<'result'>;
  restarts: Counter<'reason'>;
  runnerUp: Gauge;
  databaseLastOk: Gauge;
  fleetModelIdentities: Gauge;
  deadWorkers: Counter<'what'>;
}

/** Scrapes must answer even when the database does not: the queue query gets this long. */
const QUEUE_TIMEOUT_MS = 2000;

export function createWorkerMetrics(options: { pool: pg.Pool; defaultMetrics?: boolean }): WorkerMetrics {
  const registry = new Registry();
  if (options.defaultMetrics ?? true) collectDefaultMetrics({ register: registry });
  const registers = [registry];
  // The three queue gauges share one query per scrape (prom-client collects all metrics at once).
  let read: { at: number; promise: Promise<{ depth: number; oldest: number } | null> } | null = null;
  const readQueue = () => {
    if (read === null || Date.now() - read.at > 500) {
      read = {
        at: Date.now(),
        promise: withTimeout(compactionQueueRead(options.pool), QUEUE_TIMEOUT_MS).then(
          (row) => row,
          () => null,
        ),
      };
    }
    return read.promise;
  };
  new Gauge({
    name: 'sourcebound_queue_depth',
    help: 'compact_conversation jobs runnable now and not locked (fleet-wide)',
    registers,
    async collect() {
      const q = await readQueue();
      if (q) this.set(q.depth);
    },
  });
  new Gauge({
    name: 'sourcebound_queue_oldest_job_age_seconds',
    help: 'how long the oldest runnable compact_conversation job has waited (fleet-wide)',
    registers,
    async collect() {
      const q = await readQueue();
      if (q) this.set(q.oldest);
    },
  });
  new Gauge({
    name: 'sourcebound_queue_scrape_ok',
    help: '1 when the queue gauges were read from the database at this scrape, 0 when the query failed (they keep their last values)',
    registers,
    async collect() {
      this.set((await readQueue()) ? 1 : 0);
    },
  });
  return {
    registry,
    jobs: new Counter({
      name: 'sourcebound_jobs_total',
      help: 'graphile-worker jobs run by this worker, by task and outcome (success, error: will retry, failed: no retries left)',
      labelNames: ['task', 'outcome'],
      registers,
    }),
    ranges: new Counter({
      name: 'sourcebound_ranges_total',
      help: 'ranges handled by compaction passes, by result (completed, attempt_spent, failed, stale, busy, deferred, lease_lost, already_completed, gone)',
      labelNames: ['result'],
      registers,
    }),
    attempts: new Counter({
      name: 'sourcebound_summarizer_outcomes_total',
      help: 'summarizer calls by outcome (ok, invalid, unknown spend an attempt; deferred, config do not) and reason',
      labelNames: ['outcome', 'reason'],
      registers,
    }),
    summarizerSeconds: new Histogram({
      name: 'sourcebound_summarizer_duration_seconds',
      help: 'summarizer call latency including admission, by outcome',
      labelNames: ['outcome'],
      buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120],
      registers,
    }),
    admissionWaitSeconds: new Histogram({
      name: 'sourcebound_admission_wait_seconds',
      help: 'time waited for a per-process and fleet admission slot, by result (admitted, timeout, aborted)',
      labelNames: ['result'],
      buckets: [0.001, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30],
      registers,
    }),
    restarts: new Counter({
      name: 'sourcebound_worker_restarts_total',
      help: 'times this worker replaced its graphile-worker runner after losing the database or the runner, by reason',
      labelNames: ['reason'],
      registers,
    }),
    runnerUp: new Gauge({
      name: 'sourcebound_worker_runner_up',
      help: '1 while a graphile-worker runner is taking jobs, 0 while the worker recovers',
      registers,
    }),
    databaseLastOk: new Gauge({
      name: 'sourcebound_database_last_ok_timestamp_seconds',
      help: "when the worker's health probe last got an answer from PostgreSQL (unix time)",
      registers,
    }),
    deadWorkers: new Counter({
      name: 'sourcebound_dead_workers_total',
      help: 'what this worker handed back from workers that stopped beating (SIGKILL, OOM, a lost host): what=workers reaped, jobs unlocked, claims released',
      labelNames: ['what'],
      registers,
    }),
    fleetModelIdentities: new Gauge({
      name: 'sourcebound_fleet_model_identities',
      help: 'distinct summarizer model identities among the workers on this database, this one included (above 1: they compete for the same ranges)',
      registers,
    }),
  };
}

/** Counts a pass's range results. */
export function recordRanges(metrics: WorkerMetrics, ranges: readonly { result: RangeResult }[]): void {
  for (const r of ranges) metrics.ranges.inc({ result: r.result });
}

/**
 * Reasons are bounded for labels: the first two `:`-separated parts
 * (`stop_reason:max_tokens`, `connect_failed:ECONNREFUSED`), at most 64
 * characters; a second part with white space is prose, not a name (`ungrounded:
 * 3 fact(s) ...`, `summarizer_threw: <message>`), and is left out: a label
 * value per count or message would grow the series without bound.
 */
export function reasonLabel(reason: string): string {
  const [first = '', second] = reason.split(':', 2);
  return (second === undefined || /\s/.test(second) ? first : `${first}:${second}`).slice(0, 64);
}

/** The summarizer, timed and counted; its behaviour is unchanged. */
export function instrumentSummarizer(summarizer: Summarizer, metrics: WorkerMetrics): Summarizer {
  return {
    get model() {
      return summarizer.model;
    },
    async summarize(request: SummaryRequest): Promise<Outcome> {
      const end = metrics.summarizerSeconds.startTimer();
      let outcome: Outcome;
      try {
        outcome = await summarizer.summarize(request);
      } catch (error) {
        end({ outcome: 'thrown' });
        metrics.attempts.inc({ outcome: 'thrown', reason: reasonLabel((error as Error)?.name ?? 'error') });
        throw error;
      }
      end({ outcome: outcome.kind });
      metrics.attempts.inc({ outcome: outcome.kind, reason: outcome.kind === 'ok' ? '' : reasonLabel(outcome.reason) });
      return outcome;
    },
  };
}

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms`)), ms);
    promise.then(
      (v) => {
        clearTimeout(timer);
        resolve(v);
      },
      (e) => {
        clearTimeout(timer);
        reject(e);
      },
    );
  });
}
