import type { Logger } from '../support/logger.ts';
import type { Queryable } from '../db/queryable.ts';
import { claimRenew } from '../db/queries/summaries.ts';

/**
 * A claim's lease, held while its call runs: renewed every `renewEveryMs`
 * (sourcebound.claim_renew()), so the lease itself can be short and a dead
 * holder's range is taken over within it, however long calls take. When a
 * renewal finds the claim no longer ours (taken over after a lost lease, or
 * settled), `signal` aborts: the call's answer could not commit, so it is not
 * worth waiting for. A renewal that fails (the connection) is tried again at
 * the next tick; the lease has two more in hand.
 */
export interface HeldLease {
  /** Aborts when the caller's signal does or the claim is lost. */
  signal: AbortSignal;
  /** True once a renewal found the claim taken over or settled. */
  lost(): boolean;
  /** Stops renewing (idempotent). */
  release(): void;
}

export interface LeaseClaim {
  summaryId: string;
  attemptId: number;
  workerId: string;
  leaseMs: number;
}

export function holdLease(
  db: Queryable,
  claim: LeaseClaim,
  options: { renewEveryMs: number; logger: Logger; signal?: AbortSignal },
): HeldLease {
  const lostController = new AbortController();
  const signal = options.signal ? AbortSignal.any([options.signal, lostController.signal]) : lostController.signal;
  let released = false;
  let timer: NodeJS.Timeout | null = null;

  const renew = async () => {
    timer = null;
    try {
      const until = await claimRenew(db, claim);
      if (released) return;
      if (until === null) {
        options.logger.warn({ recordId: claim.summaryId }, 'claim lost during the call (taken over or settled): the call is abandoned');
        lostController.abort(new Error('the claim was taken over or settled during the call'));
        return;
      }
    } catch (error) {
      if (released) return;
      options.logger.warn({ err: error, recordId: claim.summaryId }, "renewing the claim's lease failed; trying again at the next tick");
    }
    schedule();
  };
  const schedule = () => {
    if (released || options.renewEveryMs <= 0) return;
    timer = setTimeout(() => void renew(), options.renewEveryMs);
    timer.unref();
  };
  schedule();

  return {
    signal,
    lost: () => lostController.signal.aborted,
    release() {
      released = true;
      if (timer !== null) clearTimeout(timer);
      timer = null;
    },
  };
}
