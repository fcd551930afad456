import { type Migration, type MigrationProvider, Migrator } from 'kysely';
import type { Store } from './db.js';
import * as m0001 from './migrations/0001_tenancy.js';
import * as m0002 from './migrations/0002_enforcement.js';

/**
 * Migrations are listed in code (not read from a folder) so they run the same under tsx, a bundle
 * or tests. Names sort in application order; add new ones at the end.
 */
const MIGRATIONS: Record<string, Migration> = {
  '0001_tenancy': m0001,
  '0002_enforcement': m0002,
};

const provider: MigrationProvider = { getMigrations: async () => MIGRATIONS };

export async function migrateToLatest(store: Store): Promise<string[]> {
  const migrator = new Migrator({ db: store.db, provider });
  const { error, results } = await migrator.migrateToLatest();
  if (error) {
    const failed = results?.find((r) => r.status === 'Error');
    throw new Error(`migration ${failed?.migrationName ?? '(unknown)'} failed: ${String(error)}`);
  }
  return (results ?? []).filter((r) => r.status === 'Success').map((r) => r.migrationName);
}
