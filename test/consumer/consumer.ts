// Type-checked with tsc against the installed declarations (no skipLibCheck).
import pg from 'pg';
import {
  projectConversationHistory,
  toAnthropicMessages,
  loadConfig,
  migrateDatabase,
  createOfflineSummarizer,
  beginTurn,
  completeTurn,
  failTurn,
  TurnInputError,
  SourceboundError,
  type ConversationProjection,
  type ProjectionItem,
  type Config,
  type Summarizer,
  type BegunTurn,
  type CompletedTurnStatus,
  type RunStatus,
} from 'sourcebound';
import { conversations, conversationSummaries } from 'sourcebound/schema';
import { beginTurn as beginTurnLight, projectConversationHistory as projectLight } from 'sourcebound/app';
void beginTurnLight;
void projectLight;

type ConversationRow = typeof conversations.$inferSelect;
type SummaryStatus = (typeof conversationSummaries.$inferSelect)['status'];

export async function nextRequest(pool: pg.Pool, conversationId: string, question: string) {
  const history: ConversationProjection = await projectConversationHistory({
    pool,
    conversationId,
    scope: 'tenant-42',
    budgetBytes: 65536,
  });
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

export async function writeTurn(pool: pg.Pool, question: string, reply: string, status: CompletedTurnStatus): Promise<RunStatus> {
  const turn: BegunTurn = await beginTurn({ pool, scope: 'tenant-42', userText: question });
  await completeTurn({ pool, scope: 'tenant-42', runId: turn.runId, assistantText: reply, status });
  return status;
}
export const isInputError = (e: unknown): boolean => e instanceof TurnInputError && e instanceof SourceboundError && e.field.length > 0;
// @ts-expect-error a turn fails as 'failed' or 'cancelled'
failTurn({ pool: new pg.Pool(), scope: 's', runId: 'x', status: 'done' });
