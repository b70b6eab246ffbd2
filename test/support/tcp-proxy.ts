import { createServer, connect, type Server, type Socket } from 'node:net';
import { freePort } from '../../src/db/embedded.ts';

/**
 * A TCP proxy on 127.0.0.1 in front of PostgreSQL that a test can take down
 * and bring back on the same port: what a worker sees of a PostgreSQL restart
 * (every connection cut, new ones refused, then accepted again), without
 * touching the server other tests use. The fault suite restarts a real
 * (embedded) server; this is the cheap version for `npm test`.
 */
export interface TcpProxy {
  port: number;
  /** `url` (any database on the proxied server) with the proxy's host and port. */
  through(url: string): string;
  /** Cuts every connection and refuses new ones. */
  down(): Promise<void>;
  /** Accepts connections again. */
  up(): Promise<void>;
  /**
   * Arms a cut: the next client message containing `text` (e.g. a function
   * name in the SQL) is forwarded, and its connection is cut the moment the
   * server starts to answer, the answer dropped. So the statement ran (and, in
   * autocommit, committed) but the client sees only a lost connection: an
   * in-doubt outcome. Resolves once the cut happened.
   */
  cutReplyTo(text: string): Promise<void>;
  close(): Promise<void>;
}

export async function startTcpProxy(target: { host: string; port: number }): Promise<TcpProxy> {
  const port = await freePort();
  const sockets = new Set<Socket>();
  let server: Server | null = null;
  let armed: { text: string; cut: () => void } | null = null;

  const listen = () =>
    new Promise<void>((resolve, reject) => {
      const s = createServer((client) => {
        const upstream = connect(target.port, target.host);
        sockets.add(client);
        sockets.add(upstream);
        const drop = () => {
          client.destroy();
          upstream.destroy();
          sockets.delete(client);
          sockets.delete(upstream);
        };
        client.on('error', drop).on('close', drop);
        upstream.on('error', drop).on('close', drop);
        // Forwarded by hand (not piped) so a cut can sit between a statement and its answer.
        let cutting: (() => void) | null = null;
        client.on('data', (chunk: Buffer) => {
          if (armed && chunk.includes(armed.text)) {
            cutting = armed.cut;
            armed = null;
          }
          upstream.write(chunk);
        });
        upstream.on('data', (chunk: Buffer) => {
          if (cutting) {
            drop();
            cutting();
            return;
          }
          client.write(chunk);
        });
      });
      s.once('error', reject);
      s.listen(port, '127.0.0.1', () => {
        s.off('error', reject);
        server = s;
        resolve();
      });
    });
  const down = async () => {
    const s = server;
    server = null;
    for (const socket of sockets) socket.destroy();
    sockets.clear();
    if (s) await new Promise<void>((resolve) => s.close(() => resolve()));
  };
  await listen();
  return {
    port,
    through(url: string) {
      const u = new URL(url);
      u.host = `127.0.0.1:${port}`;
      return u.toString();
    },
    down,
    up: () => (server ? Promise.resolve() : listen()),
    cutReplyTo: (text) =>
      new Promise<void>((resolve) => {
        armed = { text, cut: resolve };
      }),
    close: down,
  };
}
