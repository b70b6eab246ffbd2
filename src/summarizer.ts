import type { Config } from './config.ts';
import type { Logger } from './logger.ts';
import { createAdmission, createAnthropicSummarizer, createGateway, createOfflineSummarizer, type Admission, type Gateway } from './gateway/index.ts';

export interface ConfiguredGateway {
  gateway: Gateway;
  admission: Admission;
  close(): Promise<void>;
}

/**
 * The gateway a worker uses, from configuration: Anthropic when
 * ANTHROPIC_API_KEY is set, otherwise the deterministic offline summarizer
 * (its own model identity, so its records never pass for a model's); both
 * behind the per-process and fleet-wide admission limits.
 */
export function gatewayFromConfig(
  config: Readonly<Config>,
  /** A direct session (DATABASE_DIRECT_URL): fleet slots are session advisory locks on one dedicated connection. */
  connectionString: string,
  logger: Logger,
  observe: { admissionWait?: (seconds: number, result: 'admitted' | 'timeout' | 'aborted') => void } = {},
): ConfiguredGateway {
  const summarizer = config.anthropic.apiKey
    ? createAnthropicSummarizer({
        apiKey: config.anthropic.apiKey,
        baseURL: config.anthropic.baseURL,
        model: config.anthropic.model,
        maxChars: config.summaryMaxChars,
        timeoutMs: config.modelTimeoutMs,
        logger,
      })
    : createOfflineSummarizer({ maxChars: config.summaryMaxChars });
  if (!config.anthropic.apiKey) {
    logger.info({ model: summarizer.model }, 'ANTHROPIC_API_KEY is not set: using the offline extractive summarizer');
  } else {
    logger.info({ model: summarizer.model }, 'summarizing with Anthropic');
  }
  const admission = createAdmission({
    connectionString,
    localLimit: config.modelConcurrency,
    fleetLimit: config.fleetConcurrency,
    waitTimeoutMs: config.admissionWaitMs,
    logger,
    onWait: observe.admissionWait,
  });
  const gateway = createGateway({
    summarizer,
    admission,
    defaults: { maxChars: config.summaryMaxChars, deadlineMs: config.modelTimeoutMs },
    logger,
  });
  return { gateway, admission, close: () => admission.close() };
}
