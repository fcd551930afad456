import type { Kysely, Selectable } from 'kysely';
import type { Db } from '../../storage/db.js';
import type { Database, ToolsTable } from '../../storage/schema.js';

export type ToolRow = Selectable<ToolsTable>;

/** Registered tool definitions, one per name per organization; every method is scoped by organization. */
export function createToolRepository(db: Kysely<Database>) {
  return {
    async list(organizationId: string): Promise<ToolRow[]> {
      return db
        .selectFrom('tools')
        .selectAll()
        .where('organization_id', '=', organizationId)
        .orderBy('name')
        .execute();
    },

    async get(organizationId: string, name: string, trx: Db = db): Promise<ToolRow | undefined> {
      return trx
        .selectFrom('tools')
        .selectAll()
        .where('organization_id', '=', organizationId)
        .where('name', '=', name)
        .executeTakeFirst();
    },

    /**
     * Inserts the tool, or replaces its description and arguments when the name is taken. Returns
     * whether it was created. Insert-or-nothing first keeps concurrent registrations from failing
     * on the primary key (PostgreSQL would abort the whole transaction).
     */
    async upsert(row: ToolRow, trx: Db = db): Promise<'created' | 'updated'> {
      const inserted = await trx
        .insertInto('tools')
        .values(row)
        .onConflict((oc) => oc.columns(['organization_id', 'name']).doNothing())
        .returning('name')
        .executeTakeFirst();
      if (inserted) return 'created';
      await trx
        .updateTable('tools')
        .set({ description: row.description, arguments: row.arguments, updated_at: row.updated_at })
        .where('organization_id', '=', row.organization_id)
        .where('name', '=', row.name)
        .execute();
      return 'updated';
    },

    async delete(organizationId: string, name: string, trx: Db = db): Promise<boolean> {
      const res = await trx
        .deleteFrom('tools')
        .where('organization_id', '=', organizationId)
        .where('name', '=', name)
        .executeTakeFirst();
      return Number(res.numDeletedRows) > 0;
    },
  };
}

export type ToolRepository = ReturnType<typeof createToolRepository>;
