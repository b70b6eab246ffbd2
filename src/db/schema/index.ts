export * from './conversations.ts';
export * from './runs-history.ts';
export * from './workers.ts';
