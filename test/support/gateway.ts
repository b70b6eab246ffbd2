import { createAnthropicSummarizer, createGateway, type Gateway } from '../../src/gateway/index.ts';
import type { MessagesServer } from './messages-server.ts';

/**
 * The real gateway over the real SDK, talking HTTP to the local Messages API server.
 * The default deadline is generous: a test that is not about deadlines must not see its
 * first call (cold SDK, cold connection) end as unknown on a loaded machine. Tests of the
 * deadline pass `timeoutMs` themselves.
 */
export function gatewayFor(server: MessagesServer, options: { model?: string; timeoutMs?: number; maxChars?: number } = {}): Gateway {
  const maxChars = options.maxChars ?? 6000;
  const timeoutMs = options.timeoutMs ?? 30_000;
  return createGateway({
    summarizer: createAnthropicSummarizer({
      apiKey: server.apiKey,
      baseURL: server.url,
      model: options.model ?? 'claude-test',
      maxChars,
      timeoutMs,
    }),
    defaults: { maxChars, deadlineMs: timeoutMs },
  });
}
