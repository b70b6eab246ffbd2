import { spawnSourcebound, type LogLine, type WorkerProcess } from '../../support/processes.ts';
import type { MessagesServer } from '../../support/messages-server.ts';

/**
 * A fleet of real `sourcebound worker` processes that a scenario can kill and
 * restart. Every exit is recorded; an exit the scenario did not cause is
 * "unexpected" and, with `autoRestart`, the slot is started again after a
 * short pause (the way a process manager would), so a scenario can tell a
 * worker that reconnects from one that had to be restarted.
 */

/** Environment every fault scenario's workers share; a scenario overrides what it tests. */
export function workerEnv(databaseUrl: string, server: MessagesServer, overrides: Record<string, string> = {}): Record<string, string> {
  return {
    DATABASE_URL: databaseUrl,
    ANTHROPIC_API_KEY: server.apiKey,
    ANTHROPIC_BASE_URL: server.url,
    SOURCEBOUND_MODEL: 'claude-test',
    SOURCEBOUND_POLL_INTERVAL_MS: '250',
    // One process's calls are bounded by its own limit; the fleet limit has its own tests.
    SOURCEBOUND_FLEET_CONCURRENCY: '0',
    SOURCEBOUND_WORKER_CONCURRENCY: '2',
    SOURCEBOUND_MODEL_CONCURRENCY: '2',
    // Lease > admission wait + model deadline: only a dead worker's claim is taken over.
    SOURCEBOUND_LEASE_MS: '3000',
    SOURCEBOUND_MODEL_TIMEOUT_MS: '2500',
    SOURCEBOUND_ADMISSION_WAIT_MS: '200',
    SOURCEBOUND_SHUTDOWN_TIMEOUT_MS: '3000',
    LOG_LEVEL: 'info',
    ...overrides,
  };
}

export interface ExitRecord {
  slot: number;
  code: number | string;
  expected: boolean;
  stderrTail: string;
  at: number;
}

interface Slot {
  proc: WorkerProcess;
  /** Set before the harness signals it, so its exit counts as expected. */
  expectingExit: boolean;
}

export class Fleet {
  readonly slots: (Slot | null)[];
  readonly exits: ExitRecord[] = [];
  /** Log lines of every process that ever ran in the fleet. */
  readonly logs: LogLine[][] = [];
  kills = 0;
  restarts = 0;
  private stopped = false;
  private readonly pendingRestarts = new Set<NodeJS.Timeout>();

  constructor(
    readonly size: number,
    private env: Record<string, string>,
    private readonly options: { autoRestart?: boolean; restartDelayMs?: number; startTimeoutMs?: number } = {},
  ) {
    this.slots = Array.from({ length: size }, () => null);
  }

  /** Starts every slot and waits until each logs `worker started`. */
  async start(): Promise<void> {
    await Promise.all(this.slots.map((_, i) => this.spawn(i)));
  }

  /** Replaces part of the environment for processes started from now on. */
  setEnv(overrides: Record<string, string>): void {
    this.env = { ...this.env, ...overrides };
  }

  /** Starts slot i and waits for `worker started` (resolves false if it exited first). */
  async spawn(i: number): Promise<boolean> {
    const proc = spawnSourcebound(['worker'], this.env);
    const slot: Slot = { proc, expectingExit: false };
    this.slots[i] = slot;
    this.logs.push(proc.logs);
    void proc.exited.then((code) => this.onExit(i, slot, code));
    const started = proc
      .waitForLog((l) => l.msg === 'worker started', this.options.startTimeoutMs ?? 120_000)
      .then(
        () => true,
        () => false,
      );
    return Promise.race([started, proc.exited.then(() => false)]);
  }

  private onExit(i: number, slot: Slot, code: number | string): void {
    this.exits.push({ slot: i, code, expected: slot.expectingExit, stderrTail: slot.proc.stderr.slice(-1500), at: Date.now() });
    if (this.slots[i] === slot) this.slots[i] = null;
    if (!slot.expectingExit && this.options.autoRestart && !this.stopped) {
      const timer = setTimeout(() => {
        this.pendingRestarts.delete(timer);
        if (this.stopped || this.slots[i] !== null) return;
        this.restarts++;
        void this.spawn(i);
      }, this.options.restartDelayMs ?? 1000);
      this.pendingRestarts.add(timer);
    }
  }

  /** Indexes of slots with a live process. */
  alive(): number[] {
    return this.slots.flatMap((s, i) => (s === null ? [] : [i]));
  }

  /** Signals slot i (SIGKILL by default) and waits for it to exit. */
  async kill(i: number, signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    const slot = this.slots[i];
    if (!slot) return;
    slot.expectingExit = true;
    slot.proc.child.kill(signal);
    await slot.proc.exited;
    if (signal === 'SIGKILL') this.kills++;
  }

  /** Unexpected exits so far (the harness did not signal the process). */
  unexpectedExits(): ExitRecord[] {
    return this.exits.filter((e) => !e.expected);
  }

  /** Log lines of every process, matching a predicate. */
  findLogs(predicate: (l: LogLine) => boolean): LogLine[] {
    return this.logs.flatMap((lines) => lines.filter(predicate));
  }

  /** SIGTERM every live process (graceful), SIGKILL after `timeoutMs`. */
  async stop(timeoutMs = 20_000): Promise<void> {
    this.stopped = true;
    for (const t of this.pendingRestarts) clearTimeout(t);
    this.pendingRestarts.clear();
    await Promise.all(
      this.slots.map(async (slot) => {
        if (!slot) return;
        slot.expectingExit = true;
        slot.proc.child.kill('SIGTERM');
        const timer = setTimeout(() => slot.proc.child.kill('SIGKILL'), timeoutMs);
        await slot.proc.exited;
        clearTimeout(timer);
      }),
    );
  }
}
