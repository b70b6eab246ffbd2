import type { Config } from '../support/config.ts';
import type { Logger } from '../support/logger.ts';
import {
  createAdmission,
  createAnthropicSummarizer,
  createGateway,
  createOfflineSummarizer,
  createOpenAISummarizer,
  type Admission,
  type Gateway,
  type Summarizer,
} from './index.ts';

export interface ConfiguredGateway {
  gateway: Gateway;
  admission: Admission;
  close(): Promise<void>;
}

/**
 * The summarizer configuration chooses (SOURCEBOUND_SUMMARIZER): Anthropic,
 * an OpenAI-compatible server, or the deterministic offline summarizer (its
 * own model identity, so its records never pass for a model's).
 */
export function summarizerFromConfig(config: Readonly<Config>, logger: Logger): Summarizer {
  const common = { maxChars: config.summaryMaxChars, timeoutMs: config.modelTimeoutMs, logger };
  switch (config.summarizer) {
    case 'anthropic':
      return createAnthropicSummarizer({
        apiKey: config.anthropic.apiKey,
        baseURL: config.anthropic.baseURL,
        model: config.anthropic.model,
        ...common,
      });
    case 'openai':
      return createOpenAISummarizer({
        apiKey: config.openai!.apiKey,
        baseURL: config.openai!.baseURL,
        model: config.openai!.model,
        ...common,
      });
    case 'offline':
      return createOfflineSummarizer({ maxChars: config.summaryMaxChars });
  }
}

/**
 * The gateway a worker uses: the summarizer configuration chooses, or the
 * one given (a custom summarizer: `startWorker({ summarizer })`, `sourcebound
 * worker --summarizer`), always behind the per-process and fleet-wide
 * admission limits and the gateway's checks, so a custom summarizer keeps the
 * guarantees of a built-in one.
 */
export function gatewayFromConfig(
  config: Readonly<Config>,
  /** A direct session (DATABASE_DIRECT_URL): fleet slots are session advisory locks on one dedicated connection. */
  connectionString: string,
  logger: Logger,
  observe: { admissionWait?: (seconds: number, result: 'admitted' | 'timeout' | 'aborted') => void } = {},
  custom?: Summarizer,
): ConfiguredGateway {
  const summarizer = custom ?? summarizerFromConfig(config, logger);
  if (custom) logger.info({ model: summarizer.model }, 'summarizing with a custom summarizer');
  else if (config.summarizer === 'offline')
    logger.info(
      { model: summarizer.model },
      'no model configured (ANTHROPIC_API_KEY or SOURCEBOUND_SUMMARIZER): using the offline extractive summarizer',
    );
  else
    logger.info(
      {
        model: summarizer.model,
        baseURL: config.summarizer === 'openai' ? (config.openai!.baseURL ?? 'https://api.openai.com/v1') : undefined,
      },
      `summarizing with ${config.summarizer === 'openai' ? 'an OpenAI-compatible server' : 'Anthropic'}`,
    );
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
