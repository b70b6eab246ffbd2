import pino, { type Logger } from 'pino';
import pretty from 'pino-pretty';

export type { Logger };

/**
 * The process logger: JSON lines for machines; pretty, colourless-safe lines
 * only when a person is watching (a TTY, or SOURCEBOUND_PRETTY_LOGS=1).
 * Pretty printing runs in-process (no worker thread), so nothing is lost when
 * the process exits right after logging.
 */
export function createLogger(options: { level: string; pretty: boolean; name?: string }): Logger {
  const base = { level: options.level, name: options.name ?? 'sourcebound' };
  if (!options.pretty) return pino(base);
  return pino(base, pretty({ sync: true, ignore: 'pid,hostname,name', translateTime: 'HH:MM:ss.l' }));
}

/** A logger that drops everything (library use without a logger, tests). */
export const silentLogger: Logger = pino({ level: 'silent' });
