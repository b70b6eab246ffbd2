import type { Evaluated } from './assemble.ts';
import { isSettled } from './request-slots.ts';
import type { RunCompactionPolicy, RunRequest } from './types.ts';
import type { ByteHolder, CannotFit } from './reports.ts';

/**
 * Why a request cannot be sent: what holds its bytes, largest first, so the
 * application can decide (finish partially, drop a tool, ask the user to
 * shorten a correction) instead of sending a request over the threshold.
 * The holders add up to `bytes`.
 */
export function cannotFitOf(final: Evaluated, request: RunRequest, policy: Readonly<RunCompactionPolicy>): CannotFit {
  const { projection: p, fitted } = final;
  const holders = new Map<ByteHolder['what'], ByteHolder>();
  const add = (what: ByteHolder['what'], bytes: number, seq: number | null = null) => {
    const h = holders.get(what) ?? { what, bytes: 0, seqs: [], largest: [] };
    h.bytes += bytes;
    if (seq !== null) {
      h.seqs.push(seq);
      h.largest.push({ seq, bytes });
    }
    holders.set(what, h);
  };
  add('envelope', p.envelopeBytes);
  add('catalog', fitted.catalog === 'full' ? p.catalogFull.bytes : p.catalogCompact.bytes);
  add('response_reserve', p.responseReserveBytes);
  for (const s of p.slots) {
    if (s.kind !== 'fixed') continue;
    if (s.item.kind === 'user_request' || s.item.kind === 'correction') add('protected_originals', s.bytes, s.item.seq);
    else if (s.item.kind === 'checkpoint_summary') add('checkpoint_summaries', s.bytes, s.item.fromSeq);
  }
  const recentFrom = p.visibleGroups.length - policy.keepRecentGroups;
  let pending = false;
  for (const [i, g] of p.visibleGroups.entries()) {
    pending ||= !isSettled(g);
    const what = i >= recentFrom ? 'recent_work' : pending ? 'work_after_a_pending_effect' : 'older_work';
    add(what, fitted.groupBytes.get(g.seq) ?? 0, g.seq);
  }
  const list = [...holders.values()].filter((h) => h.bytes > 0).sort((a, b) => b.bytes - a.bytes);
  for (const h of list) h.largest = h.largest.sort((a, b) => b.bytes - a.bytes).slice(0, 5);
  return { kind: 'cannot_fit', bytes: fitted.bytes, thresholdBytes: policy.thresholdBytes, holders: list, unsent: request };
}
