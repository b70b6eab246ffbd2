/**
 * The product's reserved markers, and how content is kept from passing for
 * them. sourcebound adds words of its own to a projected request (wording.ts):
 * every one of them starts with `[sourcebound` (the summary label, the notes
 * about what was left out). Content (a user message, a reply, a summary) that
 * imitates one would read, to the model, as sourcebound speaking.
 *
 * - In the request, every `[sourcebound` in content, with any spacing, case or
 *   invisible characters between the bracket and the word, has its bracket
 *   turned into a parenthesis: `(sourcebound`. Same length, same bytes, so no
 *   budget arithmetic changes; only the genuine markers open with
 *   `[sourcebound` (test/projection/markers.test.ts checks both).
 * - A summary that carries a marker, or a line that speaks as another role
 *   (`User:`, `System:`...), is not a summary: an invalid answer (the
 *   attempt is spent).
 */

/** `[`, then spacing or invisible characters, then `sourcebound`, any case. */
const MARKER = /\[(?=[\s\u00ad\u180e\u200b-\u200f\u2028-\u202f\u205f-\u2064\u3000\ufeff]*sourcebound)/giu;

/** Content as it may appear in a request: the reserved opening `[sourcebound` made `(sourcebound`. */
export function neutralizeMarkers(text: string): string {
  // Almost every text has no `[`: the common case allocates nothing.
  if (!text.includes('[')) return text;
  return text.replace(MARKER, '(');
}

/** Lines a transcript would use to give another speaker the word. */
const ROLE_LINE = /^[\s>*_#-]*(?:user|human|system|assistant|developer|tool)\s*:/imu;
const ROLE_LINES = /^([\s>*_#-]*(?:user|human|system|assistant|developer|tool)\s*):/gimu;

/**
 * Text an extractive summary quotes, made safe to stand as a summary: markers
 * neutralized and a line's leading `User:` (any role) turned into `User -`.
 * For summarizers that copy their material (the offline one), which would
 * otherwise fail on a reply that shows a transcript.
 */
export function neutralizeQuoted(text: string): string {
  return neutralizeMarkers(text).replace(ROLE_LINES, '$1 -');
}

/**
 * Why a summary imitates the product's markers or another speaker, or null
 * when it does not: `marker` (it opens a `[sourcebound` bracket) or
 * `role_line` (a line that gives the word to a role).
 */
export function markerImitation(summary: string): 'marker' | 'role_line' | null {
  MARKER.lastIndex = 0;
  if (MARKER.test(summary)) return 'marker';
  if (ROLE_LINE.test(summary)) return 'role_line';
  return null;
}
