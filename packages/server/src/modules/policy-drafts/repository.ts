import type { Kysely, Selectable, Updateable } from 'kysely';
import type { Db } from '../../storage/db.js';
import type { Database, PolicyDraftsTable } from '../../storage/schema.js';

export type DraftRow = Selectable<PolicyDraftsTable>;
export type DraftPatch = Omit<
  Updateable<PolicyDraftsTable>,
  'id' | 'organization_id' | 'project_id' | 'created_at'
>;

/** Policy draft storage; every method is scoped by organization. */
export function createDraftRepository(db: Kysely<Database>) {
  return {
    async insert(row: DraftRow): Promise<void> {
      await db.insertInto('policy_drafts').values(row).execute();
    },

    async list(organizationId: string, filter: { projectId?: string; status?: string }): Promise<DraftRow[]> {
      let q = db.selectFrom('policy_drafts').selectAll().where('organization_id', '=', organizationId);
      if (filter.projectId !== undefined) q = q.where('project_id', '=', filter.projectId);
      if (filter.status !== undefined) q = q.where('status', '=', filter.status);
      return q.orderBy('created_at').orderBy('id').execute();
    },

    async get(organizationId: string, id: string, trx: Db = db): Promise<DraftRow | undefined> {
      return trx
        .selectFrom('policy_drafts')
        .selectAll()
        .where('organization_id', '=', organizationId)
        .where('id', '=', id)
        .executeTakeFirst();
    },

    /**
     * Applies the patch only while the draft is still in `expected` status, so a status move can
     * never be based on a stale read; the updated row, or undefined when nothing matched.
     */
    async updateIf(
      organizationId: string,
      id: string,
      expected: string,
      patch: DraftPatch,
      trx: Db = db,
    ): Promise<DraftRow | undefined> {
      return trx
        .updateTable('policy_drafts')
        .set(patch)
        .where('organization_id', '=', organizationId)
        .where('id', '=', id)
        .where('status', '=', expected)
        .returningAll()
        .executeTakeFirst();
    },

    async delete(organizationId: string, id: string): Promise<boolean> {
      const res = await db
        .deleteFrom('policy_drafts')
        .where('organization_id', '=', organizationId)
        .where('id', '=', id)
        .executeTakeFirst();
      return Number(res.numDeletedRows) > 0;
    },
  };
}

export type DraftRepository = ReturnType<typeof createDraftRepository>;
