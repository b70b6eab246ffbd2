export * from './conversations.ts';
