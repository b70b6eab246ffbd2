/** The summarizer gateway: the one door both compaction systems use to reach a summarizer. */
export type {
  ConfigOutcome,
  DeferredOutcome,
  InvalidOutcome,
  MaterialItem,
  OkOutcome,
  Outcome,
  OutcomeKind,
  Summarizer,
  SummaryRequest,
  UnknownOutcome,
  Usage,
} from '../support/summary-contract.ts';
export { createGateway, type Gateway, type GatewayOptions } from './gateway.ts';
export { createAnthropicSummarizer, type AnthropicSummarizerOptions } from './anthropic-summarizer.ts';
export { createOpenAISummarizer, openAIModelIdentity, type OpenAISummarizerOptions } from './openai-summarizer.ts';
export { createOfflineSummarizer, OFFLINE_MODEL } from './offline.ts';
export {
  DEFAULT_MAX_INPUT_CHARS,
  outcomeFromAnswer,
  outcomeFromError,
  prepareSummary,
  type Answer,
  type PreparedSummary,
  type PrepareOptions,
} from './contract.ts';
export { ADMISSION_LOCK_NAMESPACE, createAdmission, type Admission, type AdmissionOptions, type Slot } from './admission.ts';
export { classify, classifyThrown, type CallResult, type ClassifyOptions } from './classify.ts';
export { MAX_RETRY_AFTER_MS } from './provider-fields.ts';
export { describeError, maskSecrets } from './error-text.ts';
export { freshNonce, renderMaterial, type ItemTag } from './fence.ts';
export { DEFAULT_DEFERRAL_BACKOFF, type DeferralBackoffOptions } from './deferral.ts';
export type { GatewayLogger } from './gateway-logger.ts';
export {
  CONVERSATION_PROMPT_VERSION,
  RUN_PROMPT_VERSION,
  isProjectable,
  promptEntries,
  promptEntry,
  promptText,
  type PromptEntry,
  type PromptInputKind,
} from './prompts.ts';
