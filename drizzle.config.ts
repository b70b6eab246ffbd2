import { defineConfig } from 'drizzle-kit';

export default defineConfig({
  dialect: 'postgresql',
  schema: ['./src/db/schema/conversations.ts', './src/db/schema/runs-history.ts', './src/db/schema/workers.ts'],
  out: './migrations',
  schemaFilter: ['sourcebound'],
  dbCredentials: { url: process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres' },
});
