import { jsonBytes } from './to-anthropic.ts';

/**
 * Budgets a developer can state: tokens instead of bytes, and the parts of
 * the request that are not history (system prompt, tools, the new message),
 * so that the whole request stays within what the app asked for.
 *
 * Tokens become bytes at BYTES_PER_TOKEN (or `bytesPerToken`): every byte of
 * the history is charged, so N tokens allow N * 3 bytes. Real tokenizers
 * average about 4 bytes a token on English text, so 3 keeps English-like
 * history well under N tokens. It is not a bound for every text: CJK text
 * (3 UTF-8 bytes a character, often a token or more each) can take a token
 * per 2-3 bytes, and dense code or JSON about 3: for those, state a lower
 * `bytesPerToken` (2 for CJK) or a byte budget measured on your own traffic.
 */
export const BYTES_PER_TOKEN = 3;

/** What else the request carries, subtracted from the budget before the history is laid out. */
export interface RequestReserve {
  /** The system prompt (a string or the client's system blocks): its JSON bytes are reserved. */
  system?: unknown;
  /** The tool definitions, as sent: their JSON bytes are reserved. */
  tools?: unknown;
  /** The new user message (a string or the client's message object): its JSON bytes are reserved. */
  newMessage?: unknown;
  /** Further bytes to reserve (the request's own fields, an answer's room, a margin). */
  bytes?: number;
}

export interface BudgetArgs {
  budgetBytes?: number;
  budgetTokens?: number;
  bytesPerToken?: number;
  reserve?: RequestReserve;
}

export interface ResolvedBudget {
  /** The whole budget, in bytes (budgetBytes, or budgetTokens * bytesPerToken). */
  requestBytes: number;
  /** Bytes the reserve takes (system, tools, new message, bytes). */
  reservedBytes: number;
  /** What the history may take: requestBytes - reservedBytes. */
  historyBytes: number;
}

const count = (n: unknown): n is number => typeof n === 'number' && Number.isSafeInteger(n) && n >= 0;

/** @throws RangeError unless exactly one of budgetBytes and budgetTokens is a non-negative integer, and the reserve fits. */
export function resolveBudget(args: BudgetArgs): ResolvedBudget {
  const { budgetBytes, budgetTokens } = args;
  if ((budgetBytes === undefined) === (budgetTokens === undefined)) {
    throw new RangeError(`give exactly one of budgetBytes and budgetTokens, got ${budgetBytes === undefined ? 'neither' : 'both'}`);
  }
  let requestBytes: number;
  if (budgetBytes !== undefined) {
    if (!count(budgetBytes)) throw new RangeError(`budgetBytes must be a non-negative integer, got ${String(budgetBytes)}`);
    if (args.bytesPerToken !== undefined) throw new RangeError('bytesPerToken applies to budgetTokens only, not to budgetBytes');
    requestBytes = budgetBytes;
  } else {
    if (!count(budgetTokens)) throw new RangeError(`budgetTokens must be a non-negative integer, got ${String(budgetTokens)}`);
    const perToken = args.bytesPerToken ?? BYTES_PER_TOKEN;
    if (!(typeof perToken === 'number' && Number.isFinite(perToken) && perToken > 0)) {
      throw new RangeError(`bytesPerToken must be a positive number, got ${String(perToken)}`);
    }
    requestBytes = Math.floor(budgetTokens * perToken);
    if (!Number.isSafeInteger(requestBytes))
      throw new RangeError(`budgetTokens * bytesPerToken is too large, got ${budgetTokens} * ${perToken}`);
  }
  const reserve = args.reserve ?? {};
  if (reserve.bytes !== undefined && !count(reserve.bytes)) {
    throw new RangeError(`reserve.bytes must be a non-negative integer, got ${String(reserve.bytes)}`);
  }
  const reservedBytes = partBytes(reserve.system) + partBytes(reserve.tools) + partBytes(reserve.newMessage) + (reserve.bytes ?? 0);
  if (reservedBytes > requestBytes) {
    throw new RangeError(
      `the reserve (${reservedBytes} bytes: system, tools, newMessage, bytes) exceeds the budget of ${requestBytes} bytes`,
    );
  }
  return { requestBytes, reservedBytes, historyBytes: requestBytes - reservedBytes };
}

function partBytes(value: unknown): number {
  if (value === undefined) return 0;
  const json = JSON.stringify(value) as string | undefined;
  if (json === undefined) throw new RangeError(`a reserve part must be JSON (a string, an object or an array), got ${typeof value}`);
  return jsonBytes(value);
}
