import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createAdmission, type Admission, type AdmissionOptions } from '../../src/gateway/admission.ts';
import { createAnthropicSummarizer } from '../../src/gateway/anthropic-summarizer.ts';
import { createGateway } from '../../src/gateway/gateway.ts';
import { CONVERSATION_PROMPT_VERSION } from '../../src/gateway/prompts.ts';
import type { GatewayLogger } from '../../src/gateway/gateway-logger.ts';
import { behaviours, startMessagesServer, type MessagesServer } from '../support/messages-server.ts';
import { databaseUrl, namespaceFor } from './database.ts';

/** This file's advisory-lock namespaces: 0x7E5A0100 + n (gateway.test.ts uses 0x7E5A0200 + n). */
const NAMESPACE_BASE = 0x7e5a0100;

let server: MessagesServer;
let observer: pg.Client;
const opened: Admission[] = [];

beforeAll(async () => {
  server = await startMessagesServer();
  observer = new pg.Client({ connectionString: databaseUrl() });
  observer.on('error', () => {});
  await observer.connect();
});
afterAll(async () => {
  await observer.end();
  await server.close();
});
afterEach(async () => {
  server.releaseHeld();
  await Promise.all(opened.splice(0).map((a) => a.close()));
  await server.waitFor(() => server.inFlight === 0);
  server.reset();
  server.setDefault(behaviours.echo());
});

/** An admission as one worker process would have it: its own dedicated connection. */
function admission(options: Partial<AdmissionOptions> & { namespace: number }): Admission {
  const a = createAdmission({
    connectionString: databaseUrl(),
    localLimit: 4,
    fleetLimit: 5,
    waitTimeoutMs: 5_000,
    pollMs: 50,
    ...options,
  });
  opened.push(a);
  return a;
}

/** Backend pids holding slots of `namespace`, one row per held slot. */
async function holders(namespace: number): Promise<{ pid: number; slot: number }[]> {
  const { rows } = await observer.query<{ pid: number; slot: number }>(
    `select pid, objid::int as slot from pg_locks
     where locktype = 'advisory' and classid = ($1::int4)::oid and objsubid = 2 and granted order by objid`,
    [namespace],
  );
  return rows;
}

function recordingLogger(): GatewayLogger & { lines: { level: string; msg: string }[] } {
  const lines: { level: string; msg: string }[] = [];
  return {
    lines,
    info: (_o, msg) => {
      lines.push({ level: 'info', msg });
    },
    warn: (_o, msg) => {
      lines.push({ level: 'warn', msg });
    },
    error: (_o, msg) => {
      lines.push({ level: 'error', msg });
    },
  };
}

describe('admission across processes', () => {
  it('3 processes (local 4, fleet 5) and 20 concurrent calls: never more than 5 in flight, all complete', async () => {
    const namespace = namespaceFor(NAMESPACE_BASE);
    // Every request parks at the server until the test lets one go: the fleet is then exactly full
    // at each step, whatever the machine's speed, and a sixth admitted call would show up as a sixth parked one.
    server.setDefault(behaviours.hold());
    const gateways = [0, 1, 2].map(() =>
      createGateway({
        summarizer: createAnthropicSummarizer({
          apiKey: server.apiKey,
          baseURL: server.url,
          model: 'claude-test-1',
          maxChars: 6000,
          timeoutMs: 60_000,
        }),
        admission: admission({ namespace, waitTimeoutMs: 60_000 }),
        defaults: { maxChars: 6000, deadlineMs: 60_000 },
      }),
    );
    /** Call i runs in process calls[i]. */
    const calls = Array.from({ length: 20 }, (_, i) => i % 3);
    const running = Promise.all(
      calls.map((p, i) =>
        gateways[p]!.summarize({
          promptVersion: CONVERSATION_PROMPT_VERSION,
          items: [{ id: String(i), text: `Reply number ${i}.` }],
        }),
      ),
    );
    /** The process a recorded request came from, read back from the item id it carries. */
    const processOf = (body: unknown) => {
      const content = (body as { messages: { content: string }[] }).messages[0]!.content;
      return Number(/<reply pair="(\d+)">/.exec(content)![1]) % 3;
    };

    let full: { pid: number; slot: number }[] = [];
    for (let done = 0; done < 20; done++) {
      // Released requests are the first `done` to arrive (parking is first in, first out). What can run
      // now: at most 5 in the fleet, at most 4 per process, at most what each process has left.
      const finished = server.requests.slice(0, done).map((r) => processOf(r.body));
      const left = [0, 1, 2].map((p) => calls.filter((c) => c === p).length - finished.filter((f) => f === p).length);
      const expected = Math.min(
        5,
        left.reduce((sum, n) => sum + Math.min(4, n), 0),
      );
      // The freed slot has been taken again, by a process that may take it.
      await server.waitFor(() => server.count === done + expected && server.held === expected, 30_000);
      if (done === 0) full = await holders(namespace);
      server.releaseHeld(1);
    }
    const outcomes = await running;

    // While the fleet was full, the five slots were five locks spread over more than one process.
    expect(full.map((h) => h.slot)).toEqual([0, 1, 2, 3, 4]);
    expect(new Set(full.map((h) => h.pid)).size).toBeGreaterThan(1);
    expect(outcomes.map((o) => o.kind)).toEqual(Array(20).fill('ok'));
    expect(server.count).toBe(20);
    expect(server.maxInFlight).toBe(5);
    // Every slot is given back (the unlock runs just after release returns).
    await waitUntil(async () => (await holders(namespace)).length === 0);
  });

  it('a process never takes a slot twice on its own connection (session locks are re-entrant)', async () => {
    const namespace = namespaceFor(NAMESPACE_BASE);
    const a = admission({ namespace, localLimit: 3, fleetLimit: 2, waitTimeoutMs: 150 });
    const first = await a.acquire();
    const second = await a.acquire();
    expect(first).not.toBeNull();
    expect(second).not.toBeNull();
    expect(await a.acquire()).toBeNull();
    expect((await holders(namespace)).map((h) => h.slot)).toEqual([0, 1]);
    first!.release();
    first!.release(); // idempotent: must not free a slot it no longer holds
    expect(await a.acquire()).not.toBeNull();
  });

  it('the local limit holds without a fleet limit (fleetLimit 0 needs no database)', async () => {
    server.setDefault(behaviours.echo(100));
    const gateway = createGateway({
      summarizer: createAnthropicSummarizer({ apiKey: server.apiKey, baseURL: server.url, model: 'm', maxChars: 6000, timeoutMs: 10_000 }),
      admission: admission({ namespace: 0, connectionString: undefined, localLimit: 2, fleetLimit: 0 }),
      defaults: { maxChars: 6000, deadlineMs: 10_000 },
    });
    const outcomes = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        gateway.summarize({
          promptVersion: CONVERSATION_PROMPT_VERSION,
          items: [{ id: `m${i}`, text: 'x' }],
        }),
      ),
    );
    expect(outcomes.every((o) => o.kind === 'ok')).toBe(true);
    expect(server.maxInFlight).toBe(2);
  });

  it('waiting past the timeout yields null, and the gateway turns it into deferred admission_timeout', async () => {
    const namespace = namespaceFor(NAMESPACE_BASE);
    const holder = admission({ namespace, fleetLimit: 1 });
    const slot = await holder.acquire();
    expect(slot).not.toBeNull();
    const waiter = admission({ namespace, fleetLimit: 1, waitTimeoutMs: 200 });
    const started = performance.now();
    expect(await waiter.acquire()).toBeNull();
    expect(performance.now() - started).toBeGreaterThanOrEqual(190);

    const gateway = createGateway({
      summarizer: createAnthropicSummarizer({ apiKey: server.apiKey, baseURL: server.url, model: 'm', maxChars: 6000, timeoutMs: 1_000 }),
      admission: waiter,
      defaults: { maxChars: 6000, deadlineMs: 1_000 },
    });
    expect(await gateway.summarize({ promptVersion: CONVERSATION_PROMPT_VERSION, items: [{ id: 'm', text: 'x' }] })).toEqual({
      kind: 'deferred',
      reason: 'admission_timeout',
      retryAfterMs: null,
    });
    expect(server.count).toBe(0);
  });

  it('an abort while waiting gives up at once', async () => {
    const namespace = namespaceFor(NAMESPACE_BASE);
    const holder = admission({ namespace, fleetLimit: 1 });
    await holder.acquire();
    const waiter = admission({ namespace, fleetLimit: 1, waitTimeoutMs: 30_000 });
    const controller = new AbortController();
    const pending = waiter.acquire(controller.signal);
    controller.abort();
    expect(await pending).toBeNull();
  });

  it('a release wakes a waiter in another process by notification, not by polling', async () => {
    const namespace = namespaceFor(NAMESPACE_BASE);
    const holder = admission({ namespace, fleetLimit: 1 });
    const slot = await holder.acquire();
    // Polls only once a minute: only the NOTIFY from the release can wake it in time.
    const applicationName = `sb-test-waiter-${namespace}`;
    const waiter = admission({ namespace, fleetLimit: 1, pollMs: 60_000, waitTimeoutMs: 5_000, applicationName });
    const pending = waiter.acquire();
    // Release only after the waiter has tried and failed once, so only a wake-up can get it the slot.
    await waitUntil(
      async () =>
        (
          await observer.query(
            `select 1 from pg_stat_activity where application_name = $1 and state = 'idle' and query like '%pg_try_advisory_lock%'`,
            [applicationName],
          )
        ).rowCount === 1,
    );
    const released = performance.now();
    slot!.release();
    expect(await pending).not.toBeNull();
    expect(performance.now() - released).toBeLessThan(4_000);
  });

  it('a crashed holder frees its slot: its backend is terminated and another process takes over', async () => {
    const namespace = namespaceFor(NAMESPACE_BASE);
    const logger = recordingLogger();
    const crashed = admission({ namespace, fleetLimit: 1, logger });
    const stale = await crashed.acquire();
    const [held] = await holders(namespace);
    expect(held).toBeDefined();

    const other = admission({ namespace, fleetLimit: 1, waitTimeoutMs: 10_000 });
    const pending = other.acquire();
    await observer.query('select pg_terminate_backend($1)', [held!.pid]);
    const taken = await pending;
    expect(taken).not.toBeNull();
    const [now] = await holders(namespace);
    expect(now!.pid).not.toBe(held!.pid);

    // The crashed process notices, logs, and its stale release does nothing harmful.
    await waitUntil(async () => logger.lines.some((l) => l.level === 'warn' && l.msg.includes('connection lost')));
    stale!.release();
    expect((await holders(namespace)).map((h) => h.pid)).toEqual([now!.pid]);

    // Once the slot is free again it reconnects and takes it.
    taken!.release();
    expect(await crashed.acquire()).not.toBeNull();
    expect(logger.lines.some((l) => l.msg.includes('re-established'))).toBe(true);
  });

  it('a process that closes without unlocking frees its slots', async () => {
    const namespace = namespaceFor(NAMESPACE_BASE);
    const a = createAdmission({ connectionString: databaseUrl(), localLimit: 2, fleetLimit: 2, waitTimeoutMs: 1_000, namespace });
    await a.acquire();
    await a.acquire();
    expect(await holders(namespace)).toHaveLength(2);
    await a.close();
    expect(await holders(namespace)).toEqual([]);
    expect(await a.acquire()).toBeNull();
  });

  it('an unreachable database means no slot (null after the wait), never a throw', async () => {
    const logger = recordingLogger();
    const a = createAdmission({
      connectionString: 'postgres://nobody@127.0.0.1:1/none',
      localLimit: 1,
      fleetLimit: 1,
      waitTimeoutMs: 300,
      pollMs: 50,
      logger,
      namespace: 1,
    });
    opened.push(a);
    expect(await a.acquire()).toBeNull();
    // Logged once per outage, not once per retry.
    expect(logger.lines.filter((l) => l.level === 'error')).toHaveLength(1);
  });

  it('rejects a fleet limit without a connection string', () => {
    expect(() => createAdmission({ localLimit: 1, fleetLimit: 2, waitTimeoutMs: 10 })).toThrow(/connection string/);
  });
});

/** Re-checks `condition` after each database round trip (no fixed sleep), for at most 10 s. */
async function waitUntil(condition: () => Promise<boolean>): Promise<void> {
  const until = Date.now() + 10_000;
  while (!(await condition())) {
    if (Date.now() > until) throw new Error('condition not met within 10 s');
    await observer.query('select pg_sleep(0.01)');
  }
}
