import type { Summarizer } from '../../src/support/summary-contract.ts';

/** What the P6 research agent sends with every request: model, a system prompt (~2 KB) and three tool schemas. */
export const RUN_INPUT = {
  model: 'claude-sonnet-4-5',
  system: `You are a research agent. Work step by step, cite what you read, and reread stored results by id and range. ${'Be precise. '.repeat(150)}`,
  tools: [
    {
      name: 'fetch_document',
      description: 'Fetch a document by URL',
      input_schema: { type: 'object', properties: { url: { type: 'string' }, page: { type: 'integer' } }, required: ['url'] },
    },
    {
      name: 'search',
      description: 'Search the web',
      input_schema: { type: 'object', properties: { query: { type: 'string' } }, required: ['query'] },
    },
    {
      name: 'read_result',
      description: 'Reread a stored result by id, version and range',
      input_schema: { type: 'object', properties: { resultId: { type: 'string' }, version: { type: 'integer' } } },
    },
  ],
};

/** An instant summarizer for run compaction; `elapsed()` is the time spent inside it (subtracted: the model call is excluded). */
export function instantRunSummarizer(): Summarizer & { elapsed(): number; reset(): void } {
  let ms = 0;
  return {
    model: 'bench/instant',
    async summarize(r) {
      const t0 = performance.now();
      // No figures: a count of the items would be a fact the material does not hold, and the
      // grounding check (issue 13) rightly refuses it.
      const text = `Summary of the earlier research work, item by item.`;
      ms += performance.now() - t0;
      return { kind: 'ok', text, model: 'bench/instant', usage: null, requestId: null };
    },
    elapsed: () => ms,
    reset: () => {
      ms = 0;
    },
  };
}
