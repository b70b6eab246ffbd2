/**
 * sourcebound's public API. Everything else is internal.
 *
 * Terminology (the same words everywhere):
 * - Conversation: a durable thread in one scope (tenant). Nothing is read across scopes.
 * - Run: the execution of one request in a Conversation.
 * - Pair: the user message and completed assistant message of one eligible Run.
 * - Range: ten pairs aligned on a multiple of ten, the only shape a summary has.
 * - Summary record: an immutable, source-bound summary of a range's assistant replies.
 * - Projection: the history that goes into the next model request, within a byte budget.
 * - Turn: one Run written by the turn helpers: its user message, then its reply, then its settlement.
 * - Grounded: every checkable fact of a summary occurs in the material it summarizes (src/grounding/index.ts).
 */
// The request path (turns, projection, adapters): also `sourcebound/app`, which loads nothing else.
export * from './app.ts';

export { loadConfig, ConfigError, type Config } from './support/config.ts';
export { openDatabase, DatabaseUnreachableError, type Database } from './db/database.ts';
export { migrateDatabase } from './db/migrate.ts';
export { startWorker, type WorkerHandle, type WorkerOptions } from './worker/supervisor.ts';
export { compactConversation, SummarizerConfigError, type CompactionReport } from './conversation/compact.ts';
export { retryRange, RetryRefusedError, type RetryReport } from './conversation/retry.ts';
export { inspectConversation, type Inspection, type InspectionProblem } from './conversation/inspect.ts';
export { repairConversation, type RepairReport } from './conversation/repair.ts';
export { plannableRanges, type PairRange } from './conversation/plan.ts';
export { sourceHash, SOURCE_HASH_VERSION } from './conversation/source-hash.ts';
export {
  groundSummary,
  groundOutcome,
  groundOutcomeAsync,
  extractFacts,
  DEFAULT_GROUNDING_POLICY,
  type Grounding,
  type GroundingPolicy,
  type Fact,
  type FactKind,
} from './grounding/index.ts';

export {
  createGateway,
  createAnthropicSummarizer,
  createOpenAISummarizer,
  createOfflineSummarizer,
  createAdmission,
} from './gateway/index.ts';
export type { Outcome, Summarizer, SummaryRequest, MaterialItem, Usage } from './support/summary-contract.ts';
// The summary contract for a summarizer of your own (README, "A summarizer of your own").
export {
  prepareSummary,
  outcomeFromAnswer,
  outcomeFromError,
  renderMaterial,
  freshNonce,
  promptText,
  CONVERSATION_PROMPT_VERSION,
  type Answer,
  type PreparedSummary,
} from './gateway/index.ts';

export {
  startRun,
  recordCorrection,
  recordModelTurn,
  recordModelRequest,
  recordToolCall,
  recordToolResult,
  readRunBudget,
  storeResult,
  readResult,
  prepareRunRequest,
  recoverRunContext,
  toAnthropicRequest,
  turnOfMessage,
  READ_RESULT_TOOL,
  readResultTool,
  DEFAULT_RUN_POLICY,
  RunCompactionError,
  RunNotFoundError,
  RunHistoryError,
  BlankTextError,
  ResultNotFoundError,
  RunPolicyError,
} from './run/index.ts';
export type { PreparedRunRequest, PrepareRunRequestOptions, RecoveryReport, CannotFit, ModelTurn } from './run/index.ts';

export * as schema from './db/schema/index.ts';
