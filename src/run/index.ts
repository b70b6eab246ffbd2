/**
 * Run compaction (docs/runs.md): keep one long Run's next model
 * request under byte pressure without letting a summary rewrite what
 * happened. See src/run/README.md and the Terminology in types.ts.
 */
export {
  startRun,
  recordCorrection,
  recordModelTurn,
  recordModelRequest,
  recordToolCall,
  recordToolResult,
  readRunBudget,
} from './record.ts';
export type { StartRunOptions, RecordModelTurnOptions, RecordModelRequestOptions, RecordToolResultOptions } from './record.ts';
export { storeResult, readResult, READ_MAX_BYTES } from './results.ts';
export type { StoreResultOptions, ReadResultOptions, ReadResult, ResultRange } from './results.ts';
export { prepareRunRequest } from './prepare.ts';
export type { PrepareRunRequestOptions, PreparedRunRequest } from './prepare.ts';
export { recoverRunContext } from './recover.ts';
export type { OpenUnit, RecoverRunContextOptions, RecoveryReport, SummaryReceipt } from './recover.ts';
export { toAnthropicRequest, turnOfMessage } from './wire.ts';
export type { AnthropicRunRequest, ModelTurn, ProviderMessage } from './wire.ts';
export { READ_RESULT_TOOL, readResultTool } from './tool.ts';
export type { ReadResultToolOptions } from './tool.ts';
export { DEFAULT_RUN_POLICY, resolvePolicy } from './policy.ts';
export { measureRequest } from './fitting.ts';
export { SUMMARY_NOTE } from './checkpoint-item.ts';
export { type RequestInput } from './request-slots.ts';
export type { CannotFit, ByteHolder, ExhaustedIdentity } from './reports.ts';
export { RUN_HASH_VERSION } from './run-hash.ts';
export {
  RunCompactionError,
  RunNotFoundError,
  RunHistoryError,
  BlankTextError,
  ResultNotFoundError,
  RunPolicyError,
} from './run-errors.ts';
export type { ToolUnitState } from '../db/queries/run-history.ts';
export type * from './types.ts';
export type * from './reports.ts';
