// The grounding verdict: each fact of a summary grounded by key or by occurrence,
// and what the policy makes of the ungrounded ones.
import {
  DEFAULT_GROUNDING_POLICY,
  type Fact,
  type Grounding,
  type GroundingPolicy,
  type MaterialItem,
  type Outcome,
} from '../support/summary-contract.ts';
import { markerImitation } from '../support/markers.ts';
import { isAsciiDigit } from './chars.ts';
import { locatedFacts } from './extract.ts';
import { attachedScale, dateReadings, poundsWeight } from './keys.ts';
import { type MaterialIndex, afterRangeStart, materialIndex } from './material-index.ts';
import { NO_IDS, occurs, occursAsWritten, occursUnchanged } from './occurs.ts';
import { type Sliced, inSlices, whole } from './slices.ts';
import { SCALE_ZEROS, UNIT_ALIASES, currencySpellings } from './tables.ts';

/** At most this many ungrounded facts are named in an invalid outcome's reason (all are stored). */
const REASON_FACTS = 5;

/**
 * The answer after the grounding check: a non-`ok` outcome unchanged; an `ok`
 * one with its `grounding` attached, turned `invalid` when it imitates the
 * product's markers or a speaker (`imitates_marker:marker|role_line`,
 * support/markers.ts) and, under `reject`, when a fact is not in the material
 * (`ungrounded:...`). Runs whole: at the largest material it holds the event
 * loop for as long as the check takes (groundOutcomeAsync does not).
 */
export function groundOutcome(
  outcome: Outcome,
  material: readonly MaterialItem[],
  policy: GroundingPolicy = DEFAULT_GROUNDING_POLICY,
): Outcome {
  if (outcome.kind !== 'ok') return outcome;
  return verdict(outcome, whole(grounding(outcome.text, material)), policy);
}

/**
 * `groundOutcome`, in slices: it lets the event loop in at least every
 * SLICE_MS milliseconds of the check (plus at most one of its steps), so a
 * worker's other jobs, heartbeats and lease renewals, or an app's requests,
 * are not held while a summary of a large material is checked. The same
 * outcome as `groundOutcome`.
 */
export async function groundOutcomeAsync(
  outcome: Outcome,
  material: readonly MaterialItem[],
  policy: GroundingPolicy = DEFAULT_GROUNDING_POLICY,
): Promise<Outcome> {
  if (outcome.kind !== 'ok') return outcome;
  return verdict(outcome, await inSlices(grounding(outcome.text, material)), policy);
}

/** What an `ok` answer becomes with its grounding (groundOutcome's rules). */
function verdict(outcome: Extract<Outcome, { kind: 'ok' }>, grounding: Grounding, policy: GroundingPolicy): Outcome {
  // A summary that carries the product's marker or gives the word to a role would pass for sourcebound, or for a speaker, in the request.
  const imitation = markerImitation(outcome.text);
  if (imitation !== null) {
    return {
      kind: 'invalid',
      reason: `imitates_marker:${imitation}`,
      model: outcome.model,
      usage: outcome.usage,
      requestId: outcome.requestId,
      grounding,
    };
  }
  if (grounding.ungrounded.length === 0 || policy === 'flag') return { ...outcome, grounding };
  const named = grounding.ungrounded.slice(0, REASON_FACTS).join(', ');
  const more = grounding.ungrounded.length > REASON_FACTS ? ` and ${grounding.ungrounded.length - REASON_FACTS} more` : '';
  return {
    kind: 'invalid',
    reason: `ungrounded: ${grounding.ungrounded.length} fact(s) not in the material: ${named}${more}`,
    model: outcome.model,
    usage: outcome.usage,
    requestId: outcome.requestId,
    grounding,
  };
}

/** Checks every fact of `summary` against `material`. */
export function groundSummary(summary: string, material: readonly MaterialItem[]): Grounding {
  return whole(grounding(summary, material));
}

/** The check, pausing after each fact and within the material's normalization and extraction. */
export function* grounding(summary: string, material: readonly MaterialItem[]): Sliced<Grounding> {
  const { prepared, facts } = locatedFacts(summary);
  const checked: string[] = [];
  const ungrounded: string[] = [];
  if (facts.length === 0) return { checked, ungrounded };
  yield;
  const index = materialIndex(material);
  const seen = new Set<string>();
  for (const { at, fact } of facts) {
    const label = `${fact.kind}:${fact.text}`;
    if (seen.has(label)) continue;
    seen.add(label);
    checked.push(label);
    yield;
    if (!(yield* isGrounded(fact, index, prepared, at))) ungrounded.push(label);
  }
  return { checked, ungrounded };
}

/** Whether `fact`, found at `at` of the (prepared) summary `summary`, is in the material. */
function* isGrounded(fact: Fact, index: MaterialIndex, summary: string, at: number): Sliced<boolean> {
  if (occursUnchanged(fact, index.raw, index.ids)) return true;
  const ungrouped = /\d/.test(fact.text) ? index.ungrouped() : null;
  if (ungrouped !== null && occursUnchanged(fact, ungrouped, NO_IDS)) return true;
  const normalized = yield* index.normalized();
  if (occursAsWritten(fact, normalized)) return true;
  // `GPT4` for `GPT-4` anywhere in the material (in code too, where it is no identifier fact).
  if (fact.kind === 'identifier' && occurs(normalized.unhyphenated(), fact.key, fact.truncated)) return true;
  // A hex digest shortened, as a commit hash is (`a1b2c3d` of `a1b2c3d4e5f6a7b8…`): the start of a material digest.
  if (fact.kind === 'identifier' && SHORT_HEX.test(fact.text) && startsDigest(normalized.folded, fact.key)) return true;
  if (fact.truncated || fact.kind === 'code' || fact.kind === 'path') return false;
  const keys = yield* normalized.keys();
  if (keys.has(`${fact.kind}:${fact.key}`)) return true;
  // An end of a material range written with the unit or currency the range writes once (`10%` of
  // `10-20%`); not the second end of the summary's own range after a bare first one (`4 minutes` of
  // `2-4 minutes`, which `4-5 minutes` does not ground): that end is checked as the material writes its ends.
  if (keys.has(`range:${fact.kind}:${fact.key}`) && !(isAsciiDigit(fact.text.charCodeAt(0)) && afterRangeStart(summary, at))) return true;
  // An ambiguous slashed or dotted date (`03/05/2024`, `5.3.2024`): by a material date under either reading.
  if (fact.kind === 'date') return dateReadings(fact.key).some((iso) => keys.has(`date:${iso}`));
  // A figure and its unit or currency written apart, as structured data has them (`"size_bytes": 1048576`,
  // `{"amount": 1250.5, "currency": "USD"}`): the bare figure, and the unit or currency named in the material.
  if ((fact.kind === 'number' || fact.kind === 'money') && namedApart(fact, keys, normalized.folded)) return true;
  // `150 pounds` (money by its word) is also a weight: `150 lb` grounds it.
  const pounds = poundsWeight(fact);
  if (pounds !== null && keys.has(`number:${pounds}`)) return true;
  if (fact.kind !== 'number') return false;
  // A bare number is grounded by the same number anywhere: in a figure, a date, an amount.
  if (!/\D$/.test(fact.key)) return keys.has(`n:${fact.key}`);
  // `10k`, `5M`, `7B` attached: the kelvin, metres, bytes, or the figure scaled (`10,000`, `7 billion`).
  const scale = attachedScale(fact.text);
  return scale !== null && keys.has(`n:${scale}`);
}

/**
 * Seven to 63 hex digits, a letter and a digit among them: the start of a digest (commit hashes are
 * shown by their first seven; none is longer than 64, and a whole one is found as written).
 */
const SHORT_HEX = /^(?=[0-9a-f]*[a-f])(?=[a-f]*[0-9])[0-9a-f]{7,63}$/i;
/** A material token of at least this many hex digits is a digest a shorter start of which may stand for it. */
const DIGEST_MIN = 12;
/**
 * `hex` (lower case) starts a token of `folded` that is a longer hex digest
 * of DIGEST_MIN digits or more. The rest of the digest is taken whole (a
 * look-ahead does not backtrack), so the search is linear in `folded`.
 */
function startsDigest(folded: string, hex: string): boolean {
  // Most shortened digests a summary invents are nowhere in the material: a plain search (twice as
  // fast as the regex, which a look-behind starts) answers those.
  if (!folded.includes(hex)) return false;
  const more = Math.max(1, DIGEST_MIN - hex.length);
  return new RegExp(`(?<![\\p{L}\\p{N}])${hex}(?=([0-9a-f]{${more},}))\\1(?![\\p{L}\\p{N}])`, 'u').test(folded);
}

/**
 * A figure with a unit or an amount of money whose figure the material has
 * bare (a `number` fact without a unit: not one with another unit or
 * currency) and whose unit or currency it names elsewhere, by a spelling of
 * two characters or more (a unit) or by its code, word or a symbol other
 * than `$` (a currency: `$` is also a shell prompt or a template's mark).
 */
function namedApart(fact: Fact, keys: Set<string>, folded: string): boolean {
  if (fact.kind === 'money') {
    const at = fact.key.indexOf(':');
    if (!keys.has(`number:${fact.key.slice(at + 1)}`)) return false;
    return (currencySpellings().get(fact.key.slice(0, at)) ?? []).some((s) =>
      s.length === 1 ? folded.includes(s) : occurs(folded, s, false),
    );
  }
  const m = /^(\d+(?:\.\d+)?)(\D.*)$/.exec(fact.key);
  if (m === null || SCALE_ZEROS[m[2]!] !== undefined || !keys.has(`number:${m[1]}`)) return false;
  return (UNIT_ALIASES[m[2]!] ?? []).some((s) => s.length >= 2 && occurs(folded, s, false));
}
