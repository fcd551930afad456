import type { Kysely, Selectable } from 'kysely';
import type { Db } from '../../storage/db.js';
import type { Database, PoliciesTable } from '../../storage/schema.js';

export type PolicyRow = Selectable<PoliciesTable>;

/** Policy storage: one policy per tool per organization; every method is scoped by organization. */
export function createPolicyRepository(db: Kysely<Database>) {
  return {
    async get(organizationId: string, toolName: string, trx: Db = db): Promise<PolicyRow | undefined> {
      return trx
        .selectFrom('policies')
        .selectAll()
        .where('organization_id', '=', organizationId)
        .where('tool_name', '=', toolName)
        .executeTakeFirst();
    },

    async list(organizationId: string): Promise<PolicyRow[]> {
      return db
        .selectFrom('policies')
        .selectAll()
        .where('organization_id', '=', organizationId)
        .orderBy('tool_name')
        .execute();
    },

    /** Inserts; throws a unique violation when the tool already has a policy. */
    async insert(row: PolicyRow, trx: Db = db): Promise<void> {
      await trx.insertInto('policies').values(row).execute();
    },

    /** Inserts unless the tool already has a policy; returns whether it inserted (race-safe on both stores). */
    async insertIfAbsent(row: PolicyRow, trx: Db = db): Promise<boolean> {
      const inserted = await trx
        .insertInto('policies')
        .values(row)
        .onConflict((oc) => oc.columns(['organization_id', 'tool_name']).doNothing())
        .returning('tool_name')
        .executeTakeFirst();
      return inserted !== undefined;
    },

    /** Replaces the definition (and optionally activity) and bumps the version atomically; returns the new row. */
    async replace(
      organizationId: string,
      toolName: string,
      patch: Pick<
        PolicyRow,
        'mode' | 'constraints' | 'session_constraints' | 'llm_config' | 'project_id' | 'updated_at'
      > &
        Partial<Pick<PolicyRow, 'is_active'>>,
      trx: Db = db,
      /** Replace only if the stored version is still this one (a read-modify-write must not lose an update). */
      expectedVersion?: number,
    ): Promise<PolicyRow | undefined> {
      let q = trx
        .updateTable('policies')
        .set((eb) => ({ ...patch, version: eb('version', '+', 1) }))
        .where('organization_id', '=', organizationId)
        .where('tool_name', '=', toolName);
      if (expectedVersion !== undefined) q = q.where('version', '=', expectedVersion);
      const res = await q.executeTakeFirst();
      if (Number(res.numUpdatedRows) === 0) return undefined;
      return this.get(organizationId, toolName, trx);
    },

    async setActive(
      organizationId: string,
      toolName: string,
      active: boolean,
      at: string,
      projectId: string | null,
    ): Promise<boolean> {
      const res = await db
        .updateTable('policies')
        .set({ is_active: active ? 1 : 0, updated_at: at, project_id: projectId })
        .where('organization_id', '=', organizationId)
        .where('tool_name', '=', toolName)
        .executeTakeFirst();
      return Number(res.numUpdatedRows) > 0;
    },

    async delete(organizationId: string, toolName: string, trx: Db = db): Promise<boolean> {
      const res = await trx
        .deleteFrom('policies')
        .where('organization_id', '=', organizationId)
        .where('tool_name', '=', toolName)
        .executeTakeFirst();
      return Number(res.numDeletedRows) > 0;
    },
  };
}

export type PolicyRepository = ReturnType<typeof createPolicyRepository>;
