import { sql } from 'kysely';
import { afterAll, describe, expect, it } from 'vitest';
import { freshDatabase, type TestDatabase } from '../../test/helpers.js';
import { openStore } from './db.js';
import { migrateToLatest } from './migrate.js';

const databases: TestDatabase[] = [];
afterAll(async () => {
  for (const d of databases) await d.drop();
});

describe('migrateToLatest', () => {
  it('says so when a newer version migrated the store, naming the migration it does not know', async () => {
    const database = await freshDatabase();
    databases.push(database);
    const store = openStore(database.url);
    try {
      expect((await migrateToLatest(store)).length).toBeGreaterThan(0);
      // What a newer version leaves: one more migration in the bookkeeping table.
      await sql`insert into kysely_migration (name, timestamp) values ('0099_future', '2030-01-01T00:00:00.000Z')`.execute(
        store.db,
      );
      await expect(migrateToLatest(store)).rejects.toThrow(
        'the store was migrated by a newer version of svc (its migration 0099_future is unknown to this one)',
      );
    } finally {
      await store.close();
    }
  });
});
