import { Migrator, sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freshDatabase, type TestDatabase } from '../../../test/helpers.js';
import { systemClock } from '../../lib/clock.js';
import { ApiKeyAuthenticator } from '../../modules/api-keys/authenticator.js';
import { hashApiKey } from '../../modules/api-keys/keys.js';
import { openStore, type Store } from '../db.js';
import { migrateToLatest } from '../migrate.js';
import * as m0001 from './0001_tenancy.js';
import * as m0002 from './0002_enforcement.js';
import * as m0003 from './0003_approvals_drafts.js';
import * as m0004 from './0004_mcp_upstreams.js';
import * as m0005 from './0005_approval_requester.js';

let database: TestDatabase;
let store: Store;
beforeAll(async () => {
  database = await freshDatabase();
  store = openStore(database.url);
});
afterAll(async () => {
  await store.close();
  await database.drop();
});

describe('migration 0006 (key scopes)', () => {
  it('keeps keys made before it working as they did: the general API and resolving approvals', async () => {
    const schema =
      store.dialect === 'postgres'
        ? (await sql<{ s: string }>`select current_schema() as s`.execute(store.db)).rows[0]?.s
        : undefined;
    const before = new Migrator({
      db: store.db,
      provider: {
        getMigrations: async () => ({
          '0001_tenancy': m0001,
          '0002_enforcement': m0002,
          '0003_approvals_drafts': m0003,
          '0004_mcp_upstreams': m0004,
          '0005_approval_requester': m0005,
        }),
      },
      ...(schema ? { migrationTableSchema: schema } : {}),
    });
    expect((await before.migrateToLatest()).error).toBeUndefined();
    const at = new Date().toISOString();
    await sql`insert into organizations (id, name, slug, owner_id, tier, created_at)
      values ('o1', 'Old', 'old', 'u1', 'team', ${at})`.execute(store.db);
    await sql`insert into api_keys (id, organization_id, project_id, name, key_hash, key_prefix, is_revoked, created_at)
      values ('k1', 'o1', null, 'old key', ${hashApiKey('svc_old')}, 'svc_old...', 0, ${at})`.execute(
      store.db,
    );

    expect(await migrateToLatest(store)).toContain('0006_key_scopes');
    const keys = new ApiKeyAuthenticator(store, systemClock);
    try {
      const principal = await keys.authenticate('svc_old');
      expect(principal?.scopes).toEqual(['api', 'approvals:resolve']);
      // Who minted it was not recorded: it is a lineage of its own (0028_key_lineage).
      expect(principal?.lineageId).toBe('k1');
    } finally {
      await keys.close();
    }
  });
});
