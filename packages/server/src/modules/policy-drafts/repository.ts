import type { ExpressionBuilder, Kysely, Selectable, Updateable } from 'kysely';
import type { Db } from '../../storage/db.js';
import type { Database, PolicyDraftsTable } from '../../storage/schema.js';

export type DraftRow = Selectable<PolicyDraftsTable>;
export type DraftPatch = Omit<
  Updateable<PolicyDraftsTable>,
  'id' | 'organization_id' | 'project_id' | 'created_at'
>;

/** What a draft's revision covers that can change (its project never does). */
export type DraftContent = Pick<DraftRow, 'name' | 'description' | 'rules'>;

/** The condition that the draft's content is still `same` (what its revision covers). */
const hasContent = (same: DraftContent) => (eb: ExpressionBuilder<Database, 'policy_drafts'>) =>
  eb.and([
    eb('name', '=', same.name),
    eb('description', '=', same.description),
    eb('rules', '=', same.rules),
  ]);

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
     * never be based on a stale read, and with `same` only while its content is still that (what its
     * revision covers); the updated row, or undefined when nothing matched.
     */
    async updateIf(
      organizationId: string,
      id: string,
      expected: string,
      patch: DraftPatch,
      trx: Db = db,
      same?: DraftContent,
    ): Promise<DraftRow | undefined> {
      let q = trx
        .updateTable('policy_drafts')
        .set(patch)
        .where('organization_id', '=', organizationId)
        .where('id', '=', id)
        .where('status', '=', expected);
      if (same) q = q.where(hasContent(same));
      return q.returningAll().executeTakeFirst();
    },

    /** Deletes the draft (with `same`, only while its content is still that); whether it did. */
    async delete(organizationId: string, id: string, same?: DraftContent): Promise<boolean> {
      let q = db
        .deleteFrom('policy_drafts')
        .where('organization_id', '=', organizationId)
        .where('id', '=', id);
      if (same) q = q.where(hasContent(same));
      const res = await q.executeTakeFirst();
      return Number(res.numDeletedRows) > 0;
    },
  };
}

export type DraftRepository = ReturnType<typeof createDraftRepository>;
