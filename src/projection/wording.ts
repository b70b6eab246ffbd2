/**
 * The only words sourcebound itself adds to a projected history. They cost
 * budget bytes like everything else (src/projection/anthropic.ts counts them).
 */

/**
 * The label in front of a summary: it says the text is a model-written,
 * non-authoritative summary of the assistant replies of pairs fromPair-toPair,
 * never the user's words nor the assistant's original text. A summary
 * accepted under the `flag` grounding policy names the facts its sources do
 * not contain.
 */
export function summaryLabel(fromPair: number, toPair: number, ungrounded: readonly string[] = []): string {
  return (
    `[sourcebound: non-authoritative summary of the assistant's replies for pairs ${fromPair}-${toPair}. ` +
    `The user's ${toPair - fromPair + 1} original messages for these pairs are in the previous turn, verbatim; ` +
    `this summary is not the assistant's original text and may be incomplete.` +
    ungroundedWarning(ungrounded, 'the replies it summarizes') +
    ']'
  );
}

/**
 * The warning a summary accepted under the `flag` grounding policy carries,
 * empty when every fact is grounded: it names the first LABEL_FACTS facts
 * (`sources`: what the summary was made from). One rule for both systems: the
 * conversation label (above) and a run checkpoint's note (src/run/fitting.ts).
 */
export function ungroundedWarning(ungrounded: readonly string[], sources: string): string {
  if (ungrounded.length === 0) return '';
  return ` Warning: ${ungrounded.length === 1 ? 'this figure is' : 'these figures are'} not in ${sources} and may be wrong: ${named(ungrounded)}.`;
}

/** At most this many ungrounded facts are named in a label, each cut to `LABEL_FACT_CHARS` (the label costs budget bytes). */
const LABEL_FACTS = 5;
const LABEL_FACT_CHARS = 80;

function named(facts: readonly string[]): string {
  const shown = facts.slice(0, LABEL_FACTS).map((f) => {
    const colon = f.indexOf(':');
    // `number:0.9%` -> `0.9%`: the fact as written, without its kind.
    const text = colon < 0 ? f : f.slice(colon + 1);
    const points = [...text];
    return points.length > LABEL_FACT_CHARS ? `${points.slice(0, LABEL_FACT_CHARS - 1).join('')}…` : text;
  });
  return shown.join('; ') + (facts.length > LABEL_FACTS ? ` and ${facts.length - LABEL_FACTS} more` : '');
}

/** The note at the start of the history when `omittedPairs` (> 0) earlier exchanges were left out. */
export function omittedNote(omittedPairs: number): string {
  const what = omittedPairs === 1 ? '1 earlier exchange was' : `${omittedPairs} earlier exchanges were`;
  return `[sourcebound note: ${what} left out of this request.]`;
}

/**
 * The note in the user turn after pairs fromPair..toPair were left out between
 * two items: after the summaries (the budget), or one exchange too large for
 * the request (`too_large`), so older ones that fit still come.
 */
export function gapNote(fromPair: number, toPair: number, reason: 'budget' | 'too_large' | 'inconsistent' = 'budget'): string {
  const n = toPair - fromPair + 1;
  const what = n === 1 ? `1 exchange (pair ${fromPair}) was` : `${n} exchanges (pairs ${fromPair}-${toPair}) were`;
  const why = reason === 'too_large' ? ', too large for it,' : '';
  return `[sourcebound note: ${what} left out of this request${why} here, between the turn above and this one.]`;
}
