// Type-checked with tsc against the installed declarations (no skipLibCheck).
import pg from 'pg';
import {
  projectConversationHistory, toAnthropicMessages, loadConfig, migrateDatabase, createOfflineSummarizer,
  type ConversationProjection, type ProjectionItem, type Config, type Summarizer,
} from 'sourcebound';
import { conversations, conversationSummaries } from 'sourcebound/schema';

type ConversationRow = typeof conversations.$inferSelect;
type SummaryStatus = (typeof conversationSummaries.$inferSelect)['status'];

export async function nextRequest(pool: pg.Pool, conversationId: string, question: string) {
  const history: ConversationProjection = await projectConversationHistory({ pool, conversationId, scope: 'tenant-42', budgetBytes: 65536 });
  const kinds: ProjectionItem['kind'][] = history.items.map((item) => item.kind);
  const messages = [...toAnthropicMessages(history), { role: 'user' as const, content: question }];
  return { kinds, messages, omitted: history.omitted.length };
}

export function settings(): { config: Readonly<Config>; summarizer: Summarizer } {
  return { config: loadConfig({ DATABASE_URL: 'postgres://localhost/app' }), summarizer: createOfflineSummarizer({ maxChars: 4000 }) };
}

export const migrate = (url: string, logger: Parameters<typeof migrateDatabase>[1]): Promise<void> => migrateDatabase(url, logger);
export const scopeOf = (row: ConversationRow): string => row.scope;
export const done = (status: SummaryStatus): boolean => status === 'completed';
// @ts-expect-error the budget is a number of bytes
projectConversationHistory({ pool: new pg.Pool(), conversationId: 'x', scope: 's', budgetBytes: '64k' });
