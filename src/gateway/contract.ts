import { answerText, classifyThrown } from './classify.ts';
import { freshNonce, renderMaterial, type ItemTag } from './fence.ts';
import { silentGatewayLogger, type GatewayLogger } from './gateway-logger.ts';
import { promptEntry, promptText } from './prompts.ts';
import { codePointLength, isBlank } from './text.ts';
import { SUMMARY_CHAR_CEILING, type Outcome, type SummaryRequest, type Usage } from '../support/summary-contract.ts';

/**
 * The summary contract as helpers, shared by the built-in summarizers and
 * exported for a custom one (README, "A summarizer of your own"): what to
 * send (prepareSummary), what an answer is (outcomeFromAnswer) and what a
 * thrown error is (outcomeFromError). A custom summarizer that uses them
 * sends what the built-in ones send and classifies as they do; the worker's
 * gateway adds admission and the checks on what comes back, and compaction
 * the grounding check, whatever the summarizer.
 */

/**
 * 600,000 characters is about 150k tokens of English: well inside a 200k-token
 * context with the prompt and the answer, and ten replies far larger than any
 * conversation block we plan. Larger material is a bug upstream, not a summary.
 * It is only a guard: text of about one character a token (CJK) can be over
 * the window well below it; the API then answers 400 "prompt is too long",
 * which classify() makes `invalid` like this guard's answer.
 */
export const DEFAULT_MAX_INPUT_CHARS = 600_000;

const TAG_FOR_INPUT: Readonly<Record<string, ItemTag>> = { assistant_replies: 'reply', run_work: 'item' };

/** What to send for one request, or the outcome that settles it without a call. */
export type PreparedSummary =
  | {
      send: true;
      /** The released prompt of the request's version, then the character limit. */
      system: string;
      /** The material fenced as data with a fresh nonce (fence.ts), then the closing instruction. */
      user: string;
      /** The cap the answer is judged by. */
      maxChars: number;
    }
  | { send: false; outcome: Outcome };

export interface PrepareOptions {
  /** The identity recorded on an `invalid` outcome. */
  model: string;
  /** The cap when the request gives none (the gateway always gives one). (Default: 6000) */
  maxChars?: number | undefined;
  /** Largest material accepted, in code points of item texts and ids. (Default: 600,000) */
  maxInputChars?: number | undefined;
  logger?: GatewayLogger | undefined;
}

/**
 * The system and user text of a summary call, exactly as the built-in
 * summarizers send them, or the outcome that needs no call: an unknown or
 * retired prompt version (`config`), material with nothing visible or over
 * `maxInputChars` (`invalid`), a request already aborted (`deferred`).
 */
export function prepareSummary(request: SummaryRequest, options: PrepareOptions): PreparedSummary {
  const { model } = options;
  const maxChars = request.maxChars ?? options.maxChars ?? SUMMARY_CHAR_CEILING;
  const maxInputChars = options.maxInputChars ?? DEFAULT_MAX_INPUT_CHARS;
  const done = (outcome: Outcome): PreparedSummary => ({ send: false, outcome });
  const entry = promptEntry(request.promptVersion);
  if (entry === undefined) return done({ kind: 'config', reason: `unknown_prompt_version:${request.promptVersion}`, status: null });
  const tag = TAG_FOR_INPUT[entry.inputKind];
  if (!entry.current || tag === undefined) return done({ kind: 'config', reason: `prompt_not_current:${entry.version}`, status: null });

  // Material with nothing visible (see isBlank) can only come back as an empty or invented summary.
  if (request.items.every((item) => isBlank(item.text))) {
    return done({ kind: 'invalid', reason: 'empty_input', model, usage: null, requestId: null });
  }
  const inputChars = request.items.reduce((sum, item) => sum + codePointLength(item.text) + codePointLength(item.id), 0);
  if (inputChars > maxInputChars) {
    (options.logger ?? silentGatewayLogger).warn(
      { inputChars, maxInputChars, promptVersion: request.promptVersion },
      'summary input too large; not sent',
    );
    return done({ kind: 'invalid', reason: 'input_too_large', model, usage: null, requestId: null });
  }
  if (request.signal?.aborted) return done({ kind: 'deferred', reason: 'aborted_before_send', retryAfterMs: null });

  const nonce = freshNonce(request.items.flatMap((item) => [item.id, item.text]));
  return {
    send: true,
    system: `${promptText(entry.version).trimEnd()}\n\nCharacter limit: at most ${maxChars} characters.`,
    user: renderMaterial(request.items, { tag, nonce, maxChars, key: entry.itemKey }),
    maxChars,
  };
}

/** Finish reasons that mean "the model ended its answer by itself": Chat Completions' and the Messages API's. */
const NORMAL_FINISH = new Set(['stop', 'end_turn']);

export interface Answer {
  model: string;
  /** The cap of the call (prepareSummary's `maxChars`). */
  maxChars: number;
  /** The answer's text, joined if it came in parts. */
  text: string;
  /** Why generation ended, as the provider said: `stop` or `end_turn` is a normal finish; anything else is `invalid`. */
  finishReason: string | null;
  usage?: Usage | null | undefined;
  requestId?: string | null | undefined;
}

/**
 * An answer judged by the contract: `ok` only for a normal finish and a
 * text that is non-blank, storable and at most `maxChars` code points;
 * otherwise `invalid` (`finish_reason:<reason>`, `empty_text`, `too_long:...`),
 * which spends the attempt. A tool call or a refusal is not a summary either:
 * pass its finish reason, or return `invalid` yourself.
 */
export function outcomeFromAnswer(answer: Answer): Outcome {
  const usage = answer.usage ?? null;
  const requestId = answer.requestId ?? null;
  if (answer.finishReason === null || !NORMAL_FINISH.has(answer.finishReason)) {
    return { kind: 'invalid', reason: `finish_reason:${String(answer.finishReason)}`, model: answer.model, usage, requestId };
  }
  return answerText(typeof answer.text === 'string' ? answer.text : '', usage, requestId, {
    model: answer.model,
    maxChars: answer.maxChars,
  });
}

/**
 * A thrown error as an outcome, classified as the built-in summarizers'
 * are (classify.ts classifyThrown): a connection never established is
 * `deferred` (no attempt spent); an HTTP status by its meaning (429, 503:
 * deferred; 401, 403, 404: config; 5xx: unknown); anything else `unknown`,
 * described by name, code and message, secrets masked. The gateway does the
 * same with an error a summarizer throws.
 */
export function outcomeFromError(error: unknown, options: { model: string }): Outcome {
  return classifyThrown(error, { model: options.model });
}
