export * from './conversations.ts';
export * from './runs-history.ts';
