import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { Config } from '../support/config.ts';
import type { Logger } from '../support/logger.ts';
import { describeError } from '../gateway/error-text.ts';
import type { Summarizer } from '../support/summary-contract.ts';
import { SourceboundError } from '../support/errors.ts';

/** A `--summarizer` module that cannot be used: the CLI prints the message alone and exits 1. */
export class SummarizerModuleError extends SourceboundError {
  override name = 'SummarizerModuleError';
  readonly exitQuietly = true;
}

/** What a `--summarizer` module's factory receives. */
export interface SummarizerModuleContext {
  config: Readonly<Config>;
  logger: Logger;
}

/**
 * The summarizer a module exports, for `--summarizer <path>`: its default
 * export, or a named `summarizer` or `createSummarizer`; either a summarizer
 * (`{ model, summarize(request) }`) or a function given `{ config, logger }`
 * that returns one (or a promise of one). Its identity may not start with
 * `sourcebound/`: that is the offline summarizer's, whose records must never
 * pass for a model's or the other way round.
 * @throws SummarizerModuleError saying what is wrong and what the module must export.
 */
export async function loadSummarizerModule(path: string, context: SummarizerModuleContext): Promise<Summarizer> {
  const url = pathToFileURL(resolve(path)).href;
  let module: Record<string, unknown>;
  try {
    module = (await import(url)) as Record<string, unknown>;
  } catch (error) {
    throw new SummarizerModuleError(`cannot load the summarizer module ${path}: ${describeError(error)}`, { cause: error });
  }
  const exported = module['default'] ?? module['summarizer'] ?? module['createSummarizer'];
  if (exported === undefined) {
    throw new SummarizerModuleError(
      `the summarizer module ${path} exports no summarizer: export default (or export \`summarizer\` or \`createSummarizer\`) a summarizer or a function that returns one`,
    );
  }
  let value: unknown = exported;
  if (typeof exported === 'function') {
    try {
      value = await (exported as (c: SummarizerModuleContext) => unknown)(context);
    } catch (error) {
      throw new SummarizerModuleError(`the summarizer module ${path} failed to create its summarizer: ${describeError(error)}`, {
        cause: error,
      });
    }
  }
  const s = value as Partial<Summarizer> | null;
  if (s === null || typeof s !== 'object' || typeof s.summarize !== 'function' || typeof s.model !== 'string' || s.model.trim() === '') {
    throw new SummarizerModuleError(
      `the summarizer module ${path} gave no summarizer: it needs a non-empty \`model\` (the identity its summaries record, e.g. mistral/mistral-small-latest) and a \`summarize(request)\` function`,
    );
  }
  if (s.model.startsWith('sourcebound/')) {
    throw new SummarizerModuleError(
      `the summarizer module ${path} names itself ${s.model}: identities under sourcebound/ are the offline summarizer's; choose another (e.g. <provider>/<model>)`,
    );
  }
  return s as Summarizer;
}
