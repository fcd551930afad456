import type { Kysely, Selectable } from 'kysely';
import type { Db } from '../../storage/db.js';
import type { ApiKeysTable, Database } from '../../storage/schema.js';

export type ApiKeyRow = Selectable<ApiKeysTable>;

/** API key storage; every method is scoped by organization. */
export function createApiKeyRepository(db: Kysely<Database>) {
  return {
    async insert(row: ApiKeyRow, trx: Db = db): Promise<void> {
      await trx.insertInto('api_keys').values(row).execute();
    },

    async list(organizationId: string): Promise<ApiKeyRow[]> {
      return db
        .selectFrom('api_keys')
        .selectAll()
        .where('organization_id', '=', organizationId)
        .orderBy('created_at')
        .orderBy('id')
        .execute();
    },

    async get(organizationId: string, id: string): Promise<ApiKeyRow | undefined> {
      return db
        .selectFrom('api_keys')
        .selectAll()
        .where('organization_id', '=', organizationId)
        .where('id', '=', id)
        .executeTakeFirst();
    },

    async rename(organizationId: string, id: string, name: string, at: string): Promise<boolean> {
      const res = await db
        .updateTable('api_keys')
        .set({ name, updated_at: at })
        .where('organization_id', '=', organizationId)
        .where('id', '=', id)
        .executeTakeFirst();
      return Number(res.numUpdatedRows) > 0;
    },

    async revoke(organizationId: string, id: string, at: string): Promise<boolean> {
      const res = await db
        .updateTable('api_keys')
        .set({ is_revoked: 1, updated_at: at })
        .where('organization_id', '=', organizationId)
        .where('id', '=', id)
        .executeTakeFirst();
      return Number(res.numUpdatedRows) > 0;
    },

    /** Revokes every active key of a project; returns the revoked ids. */
    async revokeProjectKeys(
      organizationId: string,
      projectId: string,
      at: string,
      trx: Db = db,
    ): Promise<string[]> {
      const rows = await trx
        .updateTable('api_keys')
        .set({ is_revoked: 1, updated_at: at })
        .where('organization_id', '=', organizationId)
        .where('project_id', '=', projectId)
        .where('is_revoked', '=', 0)
        .returning('id')
        .execute();
      return rows.map((r) => r.id);
    },

    async projectKeyIds(organizationId: string, projectId: string, trx: Db = db): Promise<string[]> {
      const rows = await trx
        .selectFrom('api_keys')
        .select('id')
        .where('organization_id', '=', organizationId)
        .where('project_id', '=', projectId)
        .execute();
      return rows.map((r) => r.id);
    },

    /**
     * Holds the key's row lock until the caller's transaction ends, if the key is still active (not
     * revoked, not deleted): a revocation or deletion of it then waits for that transaction, and one
     * already made answers false. A no-op update, as SQLite has no `SELECT … FOR UPDATE`.
     */
    async holdActive(organizationId: string, id: string, trx: Db): Promise<boolean> {
      const res = await trx
        .updateTable('api_keys')
        .set((eb) => ({ updated_at: eb.ref('updated_at') }))
        .where('organization_id', '=', organizationId)
        .where('id', '=', id)
        .where('is_revoked', '=', 0)
        .executeTakeFirst();
      return Number(res.numUpdatedRows) > 0;
    },

    async delete(organizationId: string, id: string): Promise<boolean> {
      const res = await db
        .deleteFrom('api_keys')
        .where('organization_id', '=', organizationId)
        .where('id', '=', id)
        .executeTakeFirst();
      return Number(res.numDeletedRows) > 0;
    },
  };
}

export type ApiKeyRepository = ReturnType<typeof createApiKeyRepository>;
