import { createServer } from 'node:http';
import type { Registry } from 'prom-client';
import type { WorkerHealth } from './health.ts';
import { SourceboundError } from '../support/errors.ts';

/**
 * The worker's opt-in HTTP port (SOURCEBOUND_METRICS_PORT): `/healthz` for a
 * liveness probe and `/metrics` for Prometheus. Read-only, no other routes.
 *
 * `/healthz` is 200 while a runner is taking jobs and PostgreSQL answered the
 * health probe within the last `staleAfterMs`; otherwise 503 with the reason.
 * During a recovery it is 503: a liveness probe should allow for
 * SOURCEBOUND_RECOVERY_TIMEOUT_MS before it restarts the process (the worker
 * exits 1 by itself when that passes).
 */
export interface WorkerHttp {
  port: number;
  close(): Promise<void>;
}

/**
 * The port could not be opened (in use, not allowed, or the host does not
 * resolve to an address of this machine). One line naming both settings; the
 * CLI prints it without a stack and exits 1.
 */
export class MetricsListenError extends SourceboundError {
  override name = 'MetricsListenError';
  readonly exitQuietly = true;
  constructor(host: string, port: number, cause: NodeJS.ErrnoException) {
    const why =
      cause.code === 'EADDRINUSE'
        ? 'the port is already in use'
        : cause.code === 'ENOTFOUND' || cause.code === 'EAI_AGAIN'
          ? 'the host name does not resolve'
          : cause.code === 'EADDRNOTAVAIL'
            ? "the address is not one of this machine's"
            : cause.code === 'EACCES'
              ? 'permission denied (a port below 1024 needs privileges)'
              : cause.message;
    super(
      `cannot serve /healthz and /metrics on ${host}:${port} (SOURCEBOUND_METRICS_HOST, SOURCEBOUND_METRICS_PORT): ${why} (${cause.code ?? cause.message})`,
      { cause },
    );
  }
}

/** @throws MetricsListenError when the server cannot listen. */
export async function startWorkerHttp(options: {
  host: string;
  port: number;
  registry: Registry;
  health: () => WorkerHealth;
  probeIntervalMs: number;
  /** A heartbeat older than this: the other workers reap this one (liveness.ts), so it is not healthy. */
  beatStaleAfterMs: number;
}): Promise<WorkerHttp> {
  const staleAfterMs = Math.max(10_000, options.probeIntervalMs * 5);
  const server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD' }).end();
      return;
    }
    if (path === '/healthz') {
      const h = options.health();
      const databaseAgeMs = h.databaseOkAt === null ? null : Date.now() - h.databaseOkAt;
      const beatAgeMs = h.beatOkAt === null ? null : Date.now() - h.beatOkAt;
      const streak = h.restartStreak;
      const problem = streak
        ? `the graphile-worker runner stopped ${streak.runnersStopped} times in a row, each soon after its start: jobs are not being completed ` +
          `(last: ${streak.lastReason}${streak.lastError === null ? '' : `: ${streak.lastError}`})`
        : !h.running
          ? h.recovering
            ? 'recovering: reconnecting to PostgreSQL'
            : 'no runner'
          : databaseAgeMs === null || databaseAgeMs > staleAfterMs
            ? `PostgreSQL has not answered for ${databaseAgeMs ?? 'ever'} ms`
            : beatAgeMs === null || beatAgeMs > options.beatStaleAfterMs
              ? `the heartbeat has not been recorded for ${beatAgeMs ?? 'ever'} ms: the other workers take this worker's jobs and claims over`
              : null;
      const body = JSON.stringify({ status: problem === null ? 'ok' : 'unhealthy', problem, ...h, databaseAgeMs, beatAgeMs });
      res.writeHead(problem === null ? 200 : 503, { 'content-type': 'application/json' }).end(body);
      return;
    }
    if (path === '/metrics') {
      options.registry.metrics().then(
        (text) => res.writeHead(200, { 'content-type': options.registry.contentType }).end(text),
        (error: unknown) => res.writeHead(500, { 'content-type': 'text/plain' }).end(String(error)),
      );
      return;
    }
    res.writeHead(404, { 'content-type': 'text/plain' }).end('not found: /healthz, /metrics\n');
  });
  await new Promise<void>((resolve, reject) => {
    const failed = (error: NodeJS.ErrnoException) => {
      server.close();
      reject(new MetricsListenError(options.host, options.port, error));
    };
    server.once('error', failed);
    server.listen(options.port, options.host, () => {
      server.off('error', failed);
      resolve();
    });
  });
  const address = server.address();
  const port = typeof address === 'object' && address !== null ? address.port : options.port;
  return {
    port,
    close: () =>
      new Promise((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
