import { SourceboundError } from '../support/errors.ts';

/**
 * No conversation with this id in this scope. The same error whether the id
 * does not exist or belongs to another scope, so a caller learns nothing about
 * other scopes.
 */
export class ConversationNotFoundError extends SourceboundError {
  override name = 'ConversationNotFoundError';
  readonly conversationId: string;
  readonly scope: string;

  constructor(conversationId: string, scope: string) {
    super(`conversation ${conversationId} not found in scope ${JSON.stringify(scope)}`);
    this.conversationId = conversationId;
    this.scope = scope;
  }
}
