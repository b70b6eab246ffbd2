import { databaseCondition } from '../db/database-errors.ts';
import { SourceboundError } from '../support/errors.ts';
import { MESSAGE_ROLES, MESSAGE_STATUSES, RUN_STATUSES, type MessageRole, type RunStatus } from './types.ts';

/**
 * Errors of the turn helpers, and the one function that maps a PostgreSQL
 * error raised while writing a turn to them.
 */

/**
 * A value the helper cannot take. `field` names the option, `allowed` lists
 * the values it takes (when it is one of a list), and the message says both
 * and what was given: `completeTurn: status must be one of completed,
 * partial, clarify_pending; got 'done'`.
 */
export class TurnInputError extends SourceboundError {
  override name = 'TurnInputError';
  readonly field: string;
  readonly allowed: readonly string[] | undefined;

  constructor(operation: string, field: string, expected: string | readonly string[], got: unknown, options?: { cause?: unknown }) {
    const rule = typeof expected === 'string' ? expected : `one of ${expected.join(', ')}`;
    super(`${operation}: ${field} must be ${rule}; got ${shown(got)}`, options);
    this.field = field;
    this.allowed = typeof expected === 'string' ? undefined : expected;
  }
}

/**
 * No conversation or run with this id in this scope. The same error whether
 * the id does not exist or belongs to another scope, so a caller learns
 * nothing about other scopes.
 */
export class TurnNotFoundError extends SourceboundError {
  override name = 'TurnNotFoundError';
  readonly field: 'conversationId' | 'runId';
  readonly id: string;
  readonly scope: string;

  constructor(operation: string, field: 'conversationId' | 'runId', id: string, scope: string, options?: { cause?: unknown }) {
    super(`${operation}: ${field === 'runId' ? 'run' : 'conversation'} ${id} not found in scope ${shown(scope)}`, options);
    this.field = field;
    this.id = id;
    this.scope = scope;
  }
}

/**
 * The run is not in a state this call can move it from (completing a failed
 * run, a second reply, finishing a reply that holds no text). `status` is the
 * run's status when the call was refused.
 */
export class TurnStateError extends SourceboundError {
  override name = 'TurnStateError';
  readonly runId: string;
  readonly status: RunStatus | undefined;

  constructor(message: string, runId: string, status: RunStatus | undefined, options?: { cause?: unknown }) {
    super(message, options);
    this.runId = runId;
    this.status = status;
  }
}

/** What was being written when the database refused: enough to name the error without reading its text. */
export interface TurnWrite {
  operation: string;
  scope: string;
  conversationId?: string;
  runId?: string;
  /** The role of the message being inserted, if any. */
  role?: MessageRole;
  /** The option that carried the message's text, and the text, if one is being written. */
  text?: { field: string; value: string };
  /** The status being written to the run, if any. */
  runStatus?: string;
  /** The status being written to the message, if any. */
  messageStatus?: string;
}

/**
 * The error to throw for a database error raised while writing a turn, read
 * by SQLSTATE and constraint name only; anything else is returned unchanged.
 * The helpers check their input first, so these are the cases a concurrent
 * writer (or a changed schema) can still bring about.
 */
export function turnErrorFrom(error: unknown, write: TurnWrite): unknown {
  const condition = databaseCondition(error);
  if (!condition || !('constraint' in condition)) return error;
  const { operation } = write;
  const cause = { cause: error };
  switch (`${condition.kind}:${condition.constraint ?? ''}`) {
    case 'check_violation:runs_status_known':
      return new TurnInputError(operation, 'status', RUN_STATUSES, write.runStatus, cause);
    case 'check_violation:messages_status_known':
      return new TurnInputError(operation, 'message status', MESSAGE_STATUSES, write.messageStatus, cause);
    case 'check_violation:messages_role_known':
      return new TurnInputError(operation, 'role', MESSAGE_ROLES, write.role, cause);
    case 'check_violation:conversations_scope_not_empty':
      return new TurnInputError(operation, 'scope', 'a non-empty string', write.scope, cause);
    case 'unique_violation:messages_run_role_key':
      return new TurnStateError(
        `${operation}: run ${write.runId} already has ${write.role === 'user' ? 'a user message' : 'an assistant reply'} (another writer added it meanwhile)`,
        write.runId ?? '',
        undefined,
        cause,
      );
    // The conversation (or run) was deleted between the check and the insert.
    case 'foreign_key_violation:runs_conversation_id_conversations_id_fk':
    case 'foreign_key_violation:messages_conversation_id_conversations_id_fk':
      return new TurnNotFoundError(operation, 'conversationId', write.conversationId ?? '', write.scope, cause);
    case 'foreign_key_violation:messages_run_same_conversation_fk':
      return new TurnNotFoundError(operation, 'runId', write.runId ?? '', write.scope, cause);
    case 'limit_exceeded:message_size_limit':
      return new TurnInputError(
        operation,
        write.text?.field ?? 'text',
        'at most sourcebound.max_message_bytes bytes of UTF-8, a limit the database sets (docs/trust-boundaries.md#limits)',
        write.text === undefined ? undefined : `a text of ${Buffer.byteLength(write.text.value, 'utf8')} bytes`,
        cause,
      );
    default:
      return error;
  }
}

/** A given value as the message shows it: strings quoted (and cut at 80 characters), the rest as JSON or its type. */
export function shown(value: unknown): string {
  if (typeof value === 'string') {
    const cut = value.length > 80 ? `${value.slice(0, 80)}...` : value;
    return `'${JSON.stringify(cut).slice(1, -1).replace(/'/g, "\\'")}'`;
  }
  if (value === undefined) return 'undefined';
  if (typeof value === 'bigint' || typeof value === 'symbol' || typeof value === 'function') return `a ${typeof value}`;
  // An instance (a Date, a pg Client) by its class: its JSON says little and may be circular.
  const prototype = typeof value === 'object' && value !== null ? Object.getPrototypeOf(value) : null;
  if (prototype !== null && prototype !== Object.prototype && prototype !== Array.prototype) {
    return `a ${(value as object).constructor?.name || 'object'}`;
  }
  try {
    const json = JSON.stringify(value);
    return json.length > 80 ? `${json.slice(0, 80)}...` : json;
  } catch {
    return `a ${typeof value}`;
  }
}
