import { type CheckpointRow } from '../db/queries/run-checkpoints.ts';
import { ungroundedWarning } from '../projection/wording.ts';
import { cutBytes } from './cut-bytes.ts';
import { type CheckpointSummaryItem, type RunCompactionPolicy } from './types.ts';
import { escapedBytes } from './wire.ts';

/**
 * A checkpoint as the request shows it: one `checkpoint_summary` item with
 * its summary, the note that says what a summary is worth, and a bounded
 * account of the tool calls it replaced; and the least room such an item
 * needs, which the plan and the net-benefit gate reserve for it.
 */

/** A checkpoint as projection uses it; `hypothetical` is one being evaluated before commit. */
export type ProjectedCheckpoint = Pick<
  CheckpointRow,
  'id' | 'segment' | 'fromSeq' | 'toSeq' | 'compactedSeqs' | 'summary' | 'toolResultRefs' | 'ungrounded'
>;

/** Said on every summary: it describes work; records stay the authority. */
export const SUMMARY_NOTE =
  'Non-authoritative, lossy summary of earlier model work, not a record of what happened: the user request and ' +
  'corrections are verbatim and prevail; tool effects count only as their settlement says.';

/** Failed or unknown proposal ids (and tool names) a checkpoint item lists before it says "+N more". */
const LISTED_IDS = 5;

export function summaryItem(cp: ProjectedCheckpoint): CheckpointSummaryItem {
  const item: CheckpointSummaryItem = {
    kind: 'checkpoint_summary',
    checkpointId: cp.id,
    segment: cp.segment,
    fromSeq: cp.fromSeq,
    toSeq: cp.toSeq,
    authoritative: false,
    note: summaryNote(cp.ungrounded),
    text: cp.summary,
    toolUnits: cp.toolResultRefs.length,
    toolCalls: toolCallsText(cp),
  };
  if (cp.ungrounded.length > 0) item.ungrounded = [...cp.ungrounded];
  return item;
}

/**
 * A checkpoint's note: SUMMARY_NOTE, and for a summary accepted under the
 * `flag` grounding policy the warning that names its ungrounded facts (the
 * conversation label's rule: up to five, src/projection/wording.ts). A
 * summary with none has the note it always had, to the byte.
 */
export function summaryNote(ungrounded: readonly string[]): string {
  return SUMMARY_NOTE + ungroundedWarning(ungrounded, 'the work it summarizes');
}

/** The length of the one fact a flagged note's warning is reserved room for (see warningReserve). */
const RESERVED_FACT_CHARS = 32;
const WARNING_RESERVE = escapedBytes(summaryNote([`identifier:${'x'.repeat(RESERVED_FACT_CHARS)}`])) - escapedBytes(SUMMARY_NOTE);

/**
 * Under the `flag` grounding policy, the room a summary's allowance keeps for
 * its note's warning: one ungrounded fact of 32 characters (about 110 bytes);
 * the summarizer is told the allowance less this. A summary accepted with its
 * facts costs their warning in every later request, so the plan counts it:
 * otherwise a flagged answer at its allowance would save less than the
 * minimum and be refused (and a refused answer is never judged again). An
 * answer whose warning is larger is measured as it is, by the gate. 0 under
 * `reject`: no accepted summary has a warning.
 */
export function warningReserve(policy: Readonly<RunCompactionPolicy>): number {
  return policy.grounding === 'flag' ? WARNING_RESERVE : 0;
}

/** The least room a summary needs in the request: `minSummaryBytes` of text, and under `flag` the warning's reserve. */
export function minSummaryRoom(policy: Readonly<RunCompactionPolicy>): number {
  return policy.minSummaryBytes + warningReserve(policy);
}

/**
 * A bounded account of the tool calls a checkpoint covers: counts by tool and
 * by settlement, the first failed and unknown proposal ids, and how to list
 * every result. Its size does not grow with the number of calls (beyond the
 * digits of the counts), so 10,000 compacted calls cost what 10 do.
 */
function toolCallsText(cp: ProjectedCheckpoint): string {
  const refs = cp.toolResultRefs;
  if (refs.length === 0) return 'No tool calls.';
  const byTool = new Map<string, number>();
  const failed: string[] = [];
  const unknown: string[] = [];
  for (const r of refs) {
    byTool.set(r.tool, (byTool.get(r.tool) ?? 0) + 1);
    if (r.settlement === 'failed') failed.push(r.proposalId);
    if (r.settlement === 'unknown') unknown.push(r.proposalId);
  }
  const tools = [...byTool].slice(0, LISTED_IDS).map(([t, n]) => `${cutBytes(t, 40)} ${n}`);
  if (byTool.size > LISTED_IDS) tools.push(`${byTool.size - LISTED_IDS} more tools`);
  const ids = (list: string[]) =>
    list.length === 0
      ? ''
      : `: ${list
          .slice(0, LISTED_IDS)
          .map((id) => cutBytes(id, 64))
          .join(', ')}${list.length > LISTED_IDS ? ` +${list.length - LISTED_IDS} more` : ''}`;
  const settled = refs.length - failed.length - unknown.length;
  return (
    `${refs.length} tool call(s) (${tools.join(', ')}): ${settled} settled, ${failed.length} FAILED${ids(failed)}, ` +
    `${unknown.length} UNKNOWN (effect unknown)${ids(unknown)}. Their results stay stored: list them with read_result {"checkpoint": ${cp.segment}}.`
  );
}
