/** `text` cut to at most `maxBytes` UTF-8 bytes at a character boundary (with `…` when cut, counted in). */
export function cutBytes(text: string, maxBytes: number): string {
  // Fast path: even at 3 bytes per UTF-16 unit it fits.
  if (text.length * 3 <= maxBytes) return text;
  const head = text.length > maxBytes ? text.slice(0, maxBytes) : text;
  const buf = Buffer.from(head, 'utf8');
  if (head.length === text.length && buf.length <= maxBytes) return text;
  const room = Math.max(0, maxBytes - 3); // '…' is 3 bytes
  let end = Math.min(room, buf.length);
  while (end > 0 && (buf[end]! & 0xc0) === 0x80) end--;
  return buf.toString('utf8', 0, end) + '…';
}
