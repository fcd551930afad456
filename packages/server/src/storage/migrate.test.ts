import { sql } from 'kysely';
import { afterAll, describe, expect, it } from 'vitest';
import { freshDatabase, type TestDatabase } from '../../test/helpers.js';
import { openStore } from './db.js';
import { migrateToLatest, migrationState } from './migrate.js';

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

  it('leaves nothing of migrations that failed partway, so the next run applies them whole', async () => {
    const database = await freshDatabase();
    databases.push(database);
    const store = openStore(database.url);
    try {
      // 0002 creates "tools", then "policies": the second statement fails, after the first ran.
      await sql`create table policies (x integer)`.execute(store.db);
      await expect(migrateToLatest(store)).rejects.toThrow(/migration 0002_enforcement failed/);
      expect((await migrationState(store)).applied).toEqual([]);
      await sql`drop table policies`.execute(store.db);
      const applied = await migrateToLatest(store);
      expect(applied[0]).toBe('0001_tenancy');
      expect((await migrationState(store)).pending).toEqual([]);
    } finally {
      await store.close();
    }
  });
});
