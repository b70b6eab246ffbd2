import { type ReceiptRow } from '../db/queries/run-receipts.ts';
import { type Candidate } from './candidate.ts';
import { type ExhaustedIdentity, type RefusedIdentity } from './reports.ts';
import { type RunCompactionPolicy } from './types.ts';

/**
 * Material that is never sent again, read from the Run's receipts: an
 * identity that spent every attempt on it (exhausted), or an answer the
 * net-benefit gate refused (refused). prepareRunRequest (prepare-steps.ts)
 * then moves the candidate to a later boundary, or stops and says which.
 */

/**
 * The identity that spent every attempt on exactly this material (same
 * predecessor, same groups; with `prefix`, on a part of it that starts it),
 * if any. An identity with an answer the gate refused is not exhausted but
 * refused (isRefusedAnswer, latestRefusal).
 */
export function exhaustedMaterial(
  receipts: readonly ReceiptRow[],
  c: Candidate,
  policy: Readonly<RunCompactionPolicy>,
  prefix = false,
): ExhaustedIdentity | null {
  const spent = new Map<string, ReceiptRow[]>();
  const within = (seqs: readonly number[]) =>
    prefix ? seqs.length < c.seqs.length && seqs.every((s, i) => c.seqs[i] === s) : seqs.join() === c.seqs.join();
  for (const r of receipts) {
    if (r.spent !== true || r.predecessorId !== c.predecessorId || !within(r.compactedSeqs)) continue;
    spent.set(r.identityKey, [...(spent.get(r.identityKey) ?? []), r]);
  }
  for (const [identityKey, rs] of spent) {
    if (rs.length < policy.maxAttempts) continue;
    if (rs.some((r) => isRefusedAnswer(r, policy))) continue;
    const last = rs.at(-1)!;
    return {
      identityKey,
      fromSeq: last.fromSeq,
      toSeq: last.toSeq,
      attempts: rs.length,
      lastOutcome: last.status as ExhaustedIdentity['lastOutcome'],
      reason: last.reason,
    };
  }
  return null;
}

/**
 * A summary that came back and was never committed: the net-benefit gate
 * refused it when it came back (its reason is on the receipt). Under
 * `reject`, an answer with ungrounded facts (accepted under `flag`) is no
 * answer at all: its attempt stays spent, and its identity may try again.
 */
export function isRefusedAnswer(r: ReceiptRow, policy: Readonly<RunCompactionPolicy>): boolean {
  return r.status === 'ok' && r.checkpointId === null && r.summary !== null && (policy.grounding === 'flag' || r.ungrounded.length === 0);
}

/** The refused answer on the candidate's predecessor with the latest boundary, if any. */
export function latestRefusal(refusals: readonly ReceiptRow[], c: Candidate): RefusedIdentity | null {
  let latest: ReceiptRow | null = null;
  for (const r of refusals) if (r.predecessorId === c.predecessorId && (latest === null || r.toSeq >= latest.toSeq)) latest = r;
  if (latest === null) return null;
  return {
    identityKey: latest.identityKey,
    fromSeq: latest.fromSeq,
    toSeq: latest.toSeq,
    summaryRequestId: latest.id,
    attempt: latest.attempt,
    summaryBytes: Buffer.byteLength(latest.summary!, 'utf8'),
    reason: latest.reason,
  };
}
