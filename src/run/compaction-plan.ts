import type { RunState } from '../db/queries/run-state.ts';
import type { Evaluated } from './assemble.ts';
import { bareCheckpoint, cutChunks, summaryBytes, type Candidate, type Chunk, type MaterialSizes } from './candidate.ts';
import { minSummaryRoom } from './checkpoint-item.ts';
import { floorOf, type Floor } from './fitting.ts';
import { layOutRequest, type Group, type RequestInput } from './request-slots.ts';
import type { RunCompactionPolicy } from './types.ts';

/**
 * The compaction plan: how many checkpoints the request needs to reach the
 * target, and how much room the candidate's summary may take. The candidate
 * (candidate.ts) is the plan's first chunk; the rest of the compactable work
 * is cut the same way.
 */

/**
 * How the request gets to the target: the candidate first, then the next
 * chunks of compactable work, each its own checkpoint (oldest first, each
 * summarizer input bounded), as few as reach the target.
 */
export interface Plan {
  /** The chunks, the candidate first. When the target is out of reach: every compactable chunk. */
  chunks: Chunk[];
  /** The floor (exact) with every chunk of the plan in place under an empty summary. */
  floor: Floor;
  /** floor.bytes plus the summaries' minimum room is at or under the target. */
  reachable: boolean;
  /**
   * The candidate's summary allowance in bytes: an equal share of the room the
   * plan leaves under the target, at most the cap, no more than keeps the
   * candidate's own saving at the minimum, and no more than the work it
   * replaces allows (scaled: 6 B a tool call + 12 B a turn, at least 512 B).
   */
  allowance: number;
}

/**
 * The plan from `first` (the candidate: selected, or pinned by an unknown
 * outcome) over the compactable groups after it. Sizes come from the floor of
 * the current projection (reversible fitting taken all the way, since the
 * summaries' room may be made by referencing more bodies): each chunk removes
 * its groups' floor bytes and adds its summary item. The chosen plan's floor
 * is then measured exactly on a projection with the chunks in place.
 */
export function planCompaction(
  state: RunState,
  current: Evaluated,
  input: RequestInput,
  policy: Readonly<RunCompactionPolicy>,
  first: Candidate,
  compactable: readonly Group[],
  sizes: MaterialSizes,
  base: Floor = floorOf(current.projection, policy),
): Plan {
  const chunks: Chunk[] = [
    first,
    ...cutChunks(
      compactable.filter((g) => g.seq > first.toSeq),
      policy,
      sizes,
      base,
      first.segment + 1,
    ),
  ];
  const share = (floorBytes: number, k: number) => Math.min(policy.summaryCapBytes, Math.floor((policy.targetBytes - floorBytes) / k));
  const exact = (k: number) => floorOf(layOutRequest(state, input, policy, chunks.slice(0, k).map(bareCheckpoint)), policy);
  const firstSaving = (floorBytes: number) => current.fitted.bytes - policy.minSavingBytes - floorBytes;

  let estimate = base.bytes;
  let firstFloor = 0;
  for (let k = 1; k <= chunks.length; k++) {
    const c = chunks[k - 1]!;
    let groupBytes = 0;
    for (const seq of c.seqs) groupBytes += base.groupBytes.get(seq) ?? 0;
    estimate += summaryBytes(bareCheckpoint(c, k - 1)) - groupBytes;
    if (k === 1) firstFloor = estimate;
    if (share(estimate, k) < minSummaryRoom(policy)) continue;
    const floor = exact(k);
    if (share(floor.bytes, k) < minSummaryRoom(policy)) continue;
    return {
      chunks: chunks.slice(0, k),
      floor,
      reachable: true,
      allowance: Math.min(share(floor.bytes, k), firstSaving(k === 1 ? floor.bytes : firstFloor), scaled(first, policy)),
    };
  }
  const floor = exact(chunks.length);
  return {
    chunks,
    floor,
    reachable: false,
    allowance: Math.min(share(floor.bytes, chunks.length), firstSaving(firstFloor), scaled(first, policy)),
  };
}

/** Bytes of summary a checkpoint may hold per tool call it replaces, and per model turn (see scaled). */
export const SUMMARY_BYTES_PER_CALL = 6;
export const SUMMARY_BYTES_PER_TURN = 12;
/** The least a summary is allowed whatever it replaces: a few sentences (see scaled). */
export const SUMMARY_FLOOR_BYTES = 512;

/**
 * The most a checkpoint's summary may take for the work it replaces:
 * SUMMARY_BYTES_PER_CALL bytes per tool call plus SUMMARY_BYTES_PER_TURN per
 * model turn, at least SUMMARY_FLOOR_BYTES (and never below minSummaryRoom,
 * so a plan found reachable at that minimum keeps its allowance).
 *
 * Why: every checkpoint stays in every later request, so the summaries add
 * up over a Run. Allowed the cap (6,000 B) or an equal share of the room
 * whatever they replace, they grow with the number of checkpoints, not with
 * the work: chunks of a few turns with large bodies each save the minimum
 * with little work, and the 10,000-call soak held 181,791 B of summaries at
 * step 2,423 (30 and more checkpoints of up to 6,000 B), with nothing left
 * for the newest work: cannotFit. Scaled by the work, the summaries of N tool calls in T turns
 * take at most 6N + 12T bytes (plus 512 B for each checkpoint small enough
 * to be at the floor): at 10,000 calls in about 2,900 turns, about 95 KB,
 * under half of the 208 KiB a request body has at the 224 KiB target after
 * the 16 KiB reserve. A summary is a lossy note of older work clues (docs/runs.md),
 * not the record of each call: the calls, their
 * settlements and results stay in the checkpoint's references and the
 * result store, rereadable by id, so a few bytes a call are enough.
 */
function scaled(c: Chunk, policy: Readonly<RunCompactionPolicy>): number {
  return Math.max(
    SUMMARY_FLOOR_BYTES,
    SUMMARY_BYTES_PER_CALL * c.toolResultRefs.length + SUMMARY_BYTES_PER_TURN * c.groups.length,
    minSummaryRoom(policy),
  );
}
