import {
  pairsPageRead,
  summariesForRangesRead,
  type ProjectionPairRow,
  type ProjectionRead,
  type ProjectionSummaryRow,
  type Queryable,
  type ReadObserver,
} from '../db/queries/projection.ts';
import { sourceHash, type SourcePair } from '../conversation/source-hash.ts';
import { RANGE_SIZE } from '../conversation/plan.ts';
import { FORMATS, type Format } from './format.ts';
import type { PairItem, ProjectionItem, ProjectionProblem, SummaryItem, SummaryNotUsedReason } from './types.ts';
import { contiguous, hasTexts, judgeRange, pairItem, summaryItem, type TextPair } from './walk.ts';

/**
 * What a layout reads of a conversation, read once and only as far as the
 * layout asks (one snapshot: project.ts): pairs by index, newest pages first,
 * each pair's texts only when they could fit the budget; and per range, the
 * summary it may show now (binding.ts through judgeRange) or why not. The
 * layout (fidelity.ts, layout.ts) only decides; this object only reads.
 *
 * A stored inconsistency (a gap in the pair index, pairs that changed between
 * two reads) is never thrown: the pair or range reads as missing and the
 * problem is kept, with the repair it needs.
 */

/** A pair as the layout sees it: raw and whole, too large for the budget (its text was not read), or not provably there. */
export type PairSlot = { kind: 'pair'; item: PairItem } | { kind: 'too_large' } | { kind: 'missing' };

/** A range's summary now: usable (and smaller than its originals), or why not. */
export type RangeSummary = { kind: 'usable'; item: SummaryItem } | { kind: 'not_used'; reason: SummaryNotUsedReason; recordId?: string };

/** The most pairs one page reads (a bound on what a call reads beyond what it shows). */
export const MAX_PAGE_PAIRS = 100;
/** The newest pairs a call reads first when it has no stored layout to start from. */
export const FIRST_PAGE_PAIRS = 20;

/**
 * Thrown by a reader that may not read beyond what it was given (project.ts:
 * the one-statement read of a pool, outside a transaction). The call is then
 * made again inside a REPEATABLE READ snapshot, where every read sees one state.
 */
export class SnapshotNeeded extends Error {
  constructor() {
    super('sourcebound: the projection must read further: one snapshot is needed');
    this.name = 'SnapshotNeeded';
  }
}

/** A Queryable that never reads: a reader on it throws SnapshotNeeded where it would read. */
export const NO_FURTHER_READS: Queryable = {
  query: (() => Promise.reject(new SnapshotNeeded())) as unknown as Queryable['query'],
};

/**
 * Items made by earlier calls (per pool, project.ts), and what was computed
 * of them: a pair read again whose ids, index, run and texts are equal to an
 * earlier one's is that same (frozen) item, so its bytes (format.ts memo), a
 * range's source hash over it and a layout's hash over it (layout.ts) are
 * computed once, not on every call. Only equal content is ever reused: the
 * texts are compared (a string comparison, far cheaper than JSON and SHA-256).
 * Past MEMO_TEXT_BYTES of texts the pairs not used for longest go first (second
 * chance: near enough to least recently used), then summaries.
 */
export const MEMO_TEXT_BYTES = 16 * 1024 * 1024;
const MEMO_HASHES = 4096;

export class ItemMemo {
  /**
   * Pair items by their user message's id (a message is in one pair at most; the
   * other fields are compared). A hit only marks the entry used: eviction gives
   * used entries a second chance (an approximation of least recently used that
   * costs a hit nothing, where moving the entry cost a delete and an insert).
   */
  private readonly pairs = new Map<string, { item: PairItem; bytes: number; used: boolean }>();
  private readonly summaries = new Map<string, { item: SummaryItem; pairs: readonly number[]; bytes: number }>();
  private readonly hashes = new Map<string, string>();
  private bytes = 0;

  /** The item of a pair with its texts: an equal earlier one when there is one. */
  pair(row: TextPair): PairItem {
    const key = row.userMessageId;
    const found = this.pairs.get(key);
    if (found !== undefined) {
      const it = found.item;
      if (
        it.pairIndex === row.pairIndex &&
        it.runId === row.runId &&
        it.assistantMessageId === row.assistantMessageId &&
        it.userText === row.userText &&
        it.assistantText === row.assistantText
      ) {
        found.used = true;
        return it;
      }
      this.pairs.delete(key);
      this.bytes -= found.bytes;
    }
    const item = Object.freeze(pairItem(row));
    const bytes = row.userText.length + row.assistantText.length + 200;
    this.pairs.set(key, { item, bytes, used: false });
    this.bytes += bytes;
    this.evict();
    return item;
  }

  /**
   * The item of a usable summary: an equal earlier one when there is one. A
   * summary item is made of its record and its pairs' user messages: the
   * earlier one is equal when the record's fields are, and its pairs are the
   * same items (equal content makes the same pair item; texts are not
   * compared again).
   */
  summary(record: ProjectionSummaryRow & { summary: string }, pairs: readonly PairItem[]): SummaryItem {
    // Pair items by their serials: an entry does not keep the items it was made of alive.
    const serials = pairs.map(itemSerial);
    const found = this.summaries.get(record.id);
    if (found !== undefined) {
      this.summaries.delete(record.id);
      if (sameSummary(found.item, record) && found.pairs.length === serials.length && found.pairs.every((n, i) => n === serials[i])) {
        this.summaries.set(record.id, found);
        return found.item;
      }
      this.bytes -= found.bytes;
    }
    const fresh = summaryItem(record, pairs);
    const item = Object.freeze({
      ...fresh,
      userMessages: Object.freeze(fresh.userMessages.map((m) => Object.freeze(m))),
      ungrounded: Object.freeze(fresh.ungrounded),
    }) as SummaryItem;
    const bytes = fresh.summary.length + fresh.userMessages.reduce((n, m) => n + m.text.length, 0) + 500;
    this.summaries.set(record.id, { item, pairs: serials, bytes });
    this.bytes += bytes;
    this.evict();
    return item;
  }

  /** sourceHash of a range's pairs (their items: pair()), computed once for the same items. */
  sourceHash(items: readonly PairItem[], version: number): string {
    const key = `${version}:${items.map(itemSerial).join(',')}`;
    let hash = this.hashes.get(key);
    if (hash === undefined) {
      hash = sourceHash(items as readonly SourcePair[], version);
      if (this.hashes.size >= MEMO_HASHES) this.hashes.delete(this.hashes.keys().next().value!);
      this.hashes.set(key, hash);
    }
    return hash;
  }

  private evict(): void {
    while (this.bytes > MEMO_TEXT_BYTES && (this.pairs.size > 0 || this.summaries.size > 0)) {
      if (this.pairs.size > 0) {
        const [key, entry] = this.pairs.entries().next().value!;
        this.pairs.delete(key);
        if (entry.used) {
          // Used since it was last looked at here: to the back of the line, unmarked.
          entry.used = false;
          this.pairs.set(key, entry);
          continue;
        }
        this.bytes -= entry.bytes;
        continue;
      }
      const [key, entry] = this.summaries.entries().next().value!;
      this.summaries.delete(key);
      this.bytes -= entry.bytes;
    }
  }
}

/** Whether a summary item was made from a record with these fields (its label follows from them; its user messages from its pairs). */
function sameSummary(a: SummaryItem, r: ProjectionSummaryRow & { summary: string }): boolean {
  const ungrounded = r.ungrounded ?? [];
  return (
    a.fromPair === r.fromPair &&
    a.toPair === r.toPair &&
    a.recordId === r.id &&
    a.promptVersion === r.promptVersion &&
    a.model === r.model &&
    a.summary === r.summary &&
    a.ungrounded.length === ungrounded.length &&
    a.ungrounded.every((f, i) => f === ungrounded[i])
  );
}

const serials = new WeakMap<object, number>();
let nextSerial = 0;

/** A number for each item object (stable while it lives): what memos of computations over items are keyed by. */
export function itemSerial(item: ProjectionItem): number {
  let n = serials.get(item);
  if (n === undefined) serials.set(item, (n = nextSerial++));
  return n;
}

const memos = new WeakMap<object, ItemMemo>();

/** The memo of a pool (or of any other object the reads go through). */
export function memoFor(owner: object): ItemMemo {
  let memo = memos.get(owner);
  if (memo === undefined) memos.set(owner, (memo = new ItemMemo()));
  return memo;
}

export interface ReaderArgs {
  conversationId: string;
  scope: string;
  /** Eligible pairs now. */
  count: number;
  budgetBytes: number;
  onRead: ReadObserver | undefined;
  /** The client whose JSON the layout is sized in (Default: Anthropic's). */
  format?: Format;
  /** What a projectionRead already read in this snapshot: its pairs and records are taken as read. */
  prefetch?: ProjectionRead;
  /** Items of earlier calls (Default: none kept). */
  memo?: ItemMemo;
}

export class ConversationReader {
  readonly count: number;
  /** The client whose JSON the layout is sized in: its `sizeOf` and `projectedBytes` size every candidate. */
  readonly format: Format;
  readonly problems: ProjectionProblem[] = [];
  private readonly rows = new Map<number, ProjectionPairRow>();
  /** Pairs from here up to count-1 have been read (as pages). */
  private readFrom: number;
  private pageSize = FIRST_PAGE_PAIRS;
  private readonly items = new Map<number, PairItem>();
  private readonly records = new Map<number, ProjectionSummaryRow[]>();
  /** Ranges from here up have their records read. */
  private recordsFrom: number;
  private readonly summaries = new Map<string, Promise<RangeSummary | 'changed'>>();
  private readonly texts = new Map<number, Promise<TextPair[] | null>>();
  private brokenAt: number | null = null;

  private readonly memo: ItemMemo;

  constructor(
    private readonly db: Queryable,
    private readonly args: ReaderArgs,
  ) {
    this.count = args.count;
    this.format = args.format ?? FORMATS.anthropic;
    this.memo = args.memo ?? new ItemMemo();
    this.readFrom = args.count;
    this.recordsFrom = Math.ceil(args.count / RANGE_SIZE);
    const read = args.prefetch;
    if (read !== undefined && read.fromPair < this.count) {
      // As preload(fromPair) would have read it.
      this.pageSize = this.readFrom - read.fromPair;
      this.pageSize = Math.min(MAX_PAGE_PAIRS, Math.max(this.pageSize, FIRST_PAGE_PAIRS) * 2);
      this.takePage(read.pairs, read.fromPair, this.count - 1);
    }
    if (read !== undefined) {
      for (const k of read.recordRanges) this.records.set(k, []);
      for (const r of read.records) this.records.get(Math.floor(r.fromPair / RANGE_SIZE))?.push(r);
      // Every range from the first read up to the newest: as readRecords would have left it.
      const ks = read.recordRanges;
      if (ks.length > 0 && ks.at(-1) === this.recordsFrom - 1 && ks.every((k, j) => k === ks[0]! + j)) this.recordsFrom = ks[0]!;
    }
  }

  /** Pair i, read with its page when first asked for. */
  async pair(i: number): Promise<PairSlot> {
    if (i < 0 || i >= this.count) return { kind: 'missing' };
    if (this.brokenAt !== null && i <= this.brokenAt) return { kind: 'missing' };
    while (i < this.readFrom) await this.readPage();
    return this.slotOf(i);
  }

  /** Pair i when its page is read already (no await: a kept layout's pairs are looked at on every call), else null: ask pair(i). */
  pairIfRead(i: number): PairSlot | null {
    if (i < this.readFrom || i >= this.count) return null;
    return this.slotOf(i);
  }

  /** Pair i of a page read. */
  private slotOf(i: number): PairSlot {
    if (this.brokenAt !== null && i <= this.brokenAt) return { kind: 'missing' };
    const row = this.rows.get(i)!;
    if (!hasTexts(row)) return { kind: 'too_large' };
    let item = this.items.get(i);
    if (item === undefined) this.items.set(i, (item = this.memo.pair(row)));
    return { kind: 'pair', item };
  }

  /** Reads pairs fromPair..count-1 in one page (a kept layout's span), when they are not read yet. */
  async preload(fromPair: number): Promise<void> {
    if (fromPair >= this.readFrom || this.brokenAt !== null) return;
    this.pageSize = this.readFrom - Math.max(0, fromPair);
    await this.readPage();
  }

  /**
   * The summary range k may show now (the preferred usable record, binding.ts
   * byPreference; or only `recordId`, the one a stored layout shows), or why
   * not; 'changed' when its pairs changed while being read.
   */
  summary(k: number, recordId?: string): Promise<RangeSummary | 'changed'> {
    const key = `${k}:${recordId ?? ''}`;
    let found = this.summaries.get(key);
    if (found === undefined) this.summaries.set(key, (found = this.judge(k, recordId)));
    return found;
  }

  /** Pairs below this one cannot be shown: the index is broken there (null: it is not). */
  get broken(): number | null {
    return this.brokenAt;
  }

  /** Marks the pairs changed during the read at a range: nothing at or below it is shown. */
  changedAt(pairIndex: number): void {
    if (this.brokenAt === null || pairIndex > this.brokenAt) this.brokenAt = pairIndex;
    this.problems.push({
      kind: 'pairs_changed_during_read',
      atPair: pairIndex,
      message: 'the pairs changed while the projection read them; pass a pg.Pool (one REPEATABLE READ snapshot) or retry',
    });
  }

  private async readPage(): Promise<void> {
    const toPair = this.readFrom - 1;
    const fromPair = Math.max(0, toPair - this.pageSize + 1);
    this.pageSize = Math.min(MAX_PAGE_PAIRS, Math.max(this.pageSize, FIRST_PAGE_PAIRS) * 2);
    const { conversationId, scope, budgetBytes, onRead } = this.args;
    // A pair whose texts alone exceed the budget cannot fit: its JSON is longer than its texts.
    const page = await pairsPageRead(this.db, { conversationId, scope, fromPair, toPair, maxTextBytes: budgetBytes }, onRead);
    this.takePage(page, fromPair, toPair);
  }

  private takePage(page: readonly ProjectionPairRow[], fromPair: number, toPair: number): void {
    const { conversationId, scope } = this.args;
    this.readFrom = fromPair;
    if (contiguous(page, fromPair, toPair)) {
      for (const row of page) this.rows.set(row.pairIndex, row);
      return;
    }
    // Keep the newest pairs still in order; below them nothing can be placed.
    const byIndex = new Map<number, ProjectionPairRow[]>();
    for (const p of page) byIndex.set(p.pairIndex, [...(byIndex.get(p.pairIndex) ?? []), p]);
    let i = toPair;
    for (; byIndex.get(i)?.length === 1; i--) this.rows.set(i, byIndex.get(i)![0]!);
    this.brokenAt = i;
    this.readFrom = 0;
    this.problems.push({
      kind: 'pair_index_gap',
      atPair: i,
      message:
        `the pair index of conversation ${conversationId} has a gap at or before pair ${i} ` +
        `(pairs_drift() reports the rows); run \`sourcebound repair ${conversationId} --scope ${scope}\``,
    });
  }

  private async judge(k: number, recordId: string | undefined): Promise<RangeSummary | 'changed'> {
    const fromPair = k * RANGE_SIZE;
    const toPair = Math.min(fromPair + RANGE_SIZE - 1, this.count - 1);
    for (let i = toPair; i >= fromPair; i--) {
      if ((this.pairIfRead(i) ?? (await this.pair(i))).kind === 'missing') return { kind: 'not_used', reason: 'not_yet_summarized' };
    }
    const pairs = Array.from({ length: toPair - fromPair + 1 }, (_, j) => this.rows.get(fromPair + j)!);
    if (!this.records.has(k)) while (k < this.recordsFrom) await this.readRecords(k);
    const records = (this.records.get(k) ?? []).filter((r) => recordId === undefined || r.id === recordId);
    const v = await judgeRange({
      fromPair,
      pairs,
      records,
      count: this.count,
      texts: () => this.rangeTexts(k, pairs),
      hash: (p, version) =>
        this.memo.sourceHash(
          (p as TextPair[]).map((row) => this.itemOf(row)),
          version,
        ),
    });
    if (v === 'changed') return 'changed';
    if (!v.usable) return { kind: 'not_used', reason: v.reason, ...(v.recordId === undefined ? {} : { recordId: v.recordId }) };
    const items = v.pairs.map((row) => this.itemOf(row));
    const item = this.memo.summary(v.record, items);
    // walk.ts smallerThanOriginal, sized with the memo's items (their bytes are computed once).
    const rawBytes = items.reduce((n, p) => n + this.format.sizeOf(p), 0);
    if (!(this.format.sizeOf(item) + this.format.breakpointBytes < rawBytes))
      return { kind: 'not_used', reason: 'larger_than_original', recordId: v.record.id };
    return { kind: 'usable', item };
  }

  /** The item of a row with its texts: the one pair() made of this very row (its texts were compared once), else the memo's. */
  private itemOf(row: TextPair): PairItem {
    const made = this.rows.get(row.pairIndex) === row ? this.items.get(row.pairIndex) : undefined;
    return made ?? this.memo.pair(row);
  }

  /** Records of ranges from k down, a page of ranges at a time (those of the same pages of pairs). */
  private async readRecords(k: number): Promise<void> {
    const kHi = this.recordsFrom - 1;
    const kLo = Math.max(0, Math.min(k, kHi - MAX_PAGE_PAIRS / RANGE_SIZE + 1));
    const { conversationId, scope, onRead } = this.args;
    const rows = await summariesForRangesRead(
      this.db,
      {
        conversationId,
        scope,
        fromPair: kLo * RANGE_SIZE,
        toPair: kHi * RANGE_SIZE + RANGE_SIZE - 1,
      },
      onRead,
    );
    for (let j = kLo; j <= kHi; j++) this.records.set(j, []);
    for (const r of rows) this.records.get(Math.floor(r.fromPair / RANGE_SIZE))?.push(r);
    this.recordsFrom = kLo;
  }

  /** The range's pairs with every text (read again without the size limit if some were left out); null if they changed. */
  private rangeTexts(k: number, pairs: readonly ProjectionPairRow[]): Promise<TextPair[] | null> {
    let found = this.texts.get(k);
    if (found === undefined) {
      found = (async () => {
        if (pairs.every(hasTexts)) return pairs as TextPair[];
        const fromPair = k * RANGE_SIZE;
        const toPair = fromPair + pairs.length - 1;
        const { conversationId, scope, onRead } = this.args;
        const all = await pairsPageRead(this.db, { conversationId, scope, fromPair, toPair, maxTextBytes: null }, onRead);
        const same =
          contiguous(all, fromPair, toPair) &&
          all.every((p, j) => p.userMessageId === pairs[j]!.userMessageId && p.assistantMessageId === pairs[j]!.assistantMessageId);
        return same && all.every(hasTexts) ? (all as TextPair[]) : null;
      })();
      this.texts.set(k, found);
    }
    return found;
  }
}
