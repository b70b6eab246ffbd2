import type { Task } from 'graphile-worker';
import { z } from 'zod';
import { compactConversation, SummarizerConfigError, type CompactionContext, type CompactionReport } from '../../conversation/compact.ts';
import { compactionJobAtAdd, compactionLeaseWatchAdd, conversationScopeRead } from '../../db/queries/summaries.ts';

const Payload = z.object({ conversationId: z.uuid() });

/**
 * compact_conversation: validate the payload, compact the conversation,
 * reschedule when a deferral or a retry says to come back later, and watch
 * the lease of a range another worker holds (in case that worker died).
 * A bad payload or an unknown conversation ends the job with a logged reason
 * and no retry storm; a summarizer configuration error fails it loudly.
 */
export function compactConversationTask(
  ctx: Omit<CompactionContext, 'logger'> & { logger: CompactionContext['logger'] } & {
    /** Observes every finished pass (metrics); it must not throw. */
    onPass?: (report: CompactionReport) => void;
  },
): Task {
  return async (payload, helpers) => {
    const parsed = Payload.safeParse(payload);
    const base = { task: 'compact_conversation', jobId: helpers.job.id };
    if (!parsed.success) {
      ctx.logger.error({ ...base, payload, reason: z.prettifyError(parsed.error) }, 'invalid compact_conversation payload: job dropped');
      return;
    }
    const { conversationId } = parsed.data;
    const logger = ctx.logger.child({ ...base, conversationId });
    try {
      // The marks say what needs work: no pair count or history is read first.
      const report = await compactConversation({ ...ctx, logger }, conversationId, helpers.abortSignal);
      if (report.ranges.length === 0 && (await conversationScopeRead(ctx.pool, conversationId)) === null) {
        logger.warn('conversation does not exist (deleted?): job dropped');
        return;
      }
      ctx.onPass?.(report);
      if (report.rescheduleAt) await compactionJobAtAdd(ctx.pool, conversationId, report.rescheduleAt);
      if (report.leaseWatchAt) await compactionLeaseWatchAdd(ctx.pool, conversationId, report.leaseWatchAt);
      logger.info(
        {
          ranges: report.ranges.map((r) => `${r.fromPair}-${r.toPair}:${r.result}`),
          rescheduleAt: report.rescheduleAt,
          leaseWatchAt: report.leaseWatchAt,
        },
        'compaction pass done',
      );
    } catch (error) {
      if (error instanceof SummarizerConfigError) logger.error({ err: error }, error.message);
      throw error;
    }
  };
}
