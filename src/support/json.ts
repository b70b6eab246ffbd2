/**
 * The size of a value as a request body carries it: the UTF-8 bytes of its
 * JSON text. Both byte budgets (the read projection's and a run's) measure
 * with this one function, so a figure computed on one side is the figure the
 * other side would compute.
 */
export function jsonBytes(value: unknown): number {
  return Buffer.byteLength(JSON.stringify(value), 'utf8');
}
