import { providerText } from './text.ts';

/**
 * Thrown errors as text fit to store on an attempt and show in `inspect`:
 * what happened (name, code, message, causes), never a credential.
 */

/** Code points kept of a thrown error's description. */
const ERROR_DESCRIPTION_MAX_CHARS = 600;

/**
 * A thrown value as `<name>[ <code>]: <message>`, then `; cause: ...` for up
 * to two causes, secrets masked (maskSecrets) and bounded: `TypeError: fetch
 * failed; cause: Error ECONNRESET: read ECONNRESET`, never a bare `Error`.
 * The name is the class's when the error kept the generic `Error`.
 */
export function describeError(error: unknown): string {
  const parts: string[] = [];
  let current: unknown = error;
  for (let depth = 0; depth < 3 && current !== undefined && current !== null; depth++) {
    if (current instanceof Error || typeof current === 'object') {
      const e = current as Record<string, unknown>;
      const ctor = (current as { constructor?: { name?: unknown } }).constructor?.name;
      const name =
        typeof e['name'] === 'string' && e['name'] !== 'Error' ? e['name'] : typeof ctor === 'string' && ctor !== 'Object' ? ctor : 'Error';
      const code = typeof e['code'] === 'string' || typeof e['code'] === 'number' ? ` ${String(e['code'])}` : '';
      const message = typeof e['message'] === 'string' && e['message'] !== '' ? `: ${e['message']}` : '';
      parts.push(`${name}${code}${message}`);
      current = e['cause'];
    } else {
      parts.push(`${typeof current}: ${String(current)}`);
      break;
    }
  }
  return providerText(maskSecrets(parts.join('; cause: ')), ERROR_DESCRIPTION_MAX_CHARS);
}

/**
 * `text` with what looks like a credential masked: bearer tokens, `sk-...`
 * keys, the password of a URL, and the value after a name such as `api_key`,
 * `token`, `secret`, `password` or `authorization`. An error message can
 * quote a request (a URL with a key in its query, a header), and the
 * description is stored on the attempt and shown by `inspect`.
 */
export function maskSecrets(text: string): string {
  return text
    .replace(/\b(Bearer|Basic)\s+[^\s"',;]+/gi, '$1 ***')
    .replace(/\bsk-[A-Za-z0-9_-]{6,}/g, 'sk-***')
    .replace(/(\/\/[^\s/:@]*):[^\s/@]*@/g, '$1:***@')
    .replace(
      /\b([\w-]*(?:api[_-]?key|token|secret|password|passwd|authorization)[\w-]*)(["']?\s*[:=]\s*["']?)(?!\*\*\*)[^\s"'&,;]+/gi,
      '$1$2***',
    );
}
