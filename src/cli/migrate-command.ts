import { migrateDatabase } from '../db/migrate.ts';
import { parseCommandArgs, withSession, type Command } from './common.ts';

export const migrateCommand: Command = {
  name: 'migrate',
  summary: "create or update the database schema (graphile-worker's, then sourcebound's)",
  usage: 'usage: sourcebound migrate\n\nApplies pending migrations; safe to run from several processes at once.',
  async run(argv) {
    parseCommandArgs(argv, {});
    await withSession(async ({ database, logger }) => migrateDatabase(database.directConnectionString, logger), { poolSize: 2 });
  },
};
