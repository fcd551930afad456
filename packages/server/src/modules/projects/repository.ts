import type { Kysely, Selectable } from 'kysely';
import type { Db } from '../../storage/db.js';
import type { Database, ProjectsTable } from '../../storage/schema.js';

export type ProjectRow = Selectable<ProjectsTable>;

export function createProjectRepository(db: Kysely<Database>) {
  return {
    async insert(row: ProjectRow, trx: Db = db): Promise<void> {
      await trx.insertInto('projects').values(row).execute();
    },

    async count(organizationId: string, trx: Db = db): Promise<number> {
      const r = await trx
        .selectFrom('projects')
        .select((eb) => eb.fn.countAll<number>().as('n'))
        .where('organization_id', '=', organizationId)
        .executeTakeFirstOrThrow();
      return Number(r.n);
    },

    async list(organizationId: string): Promise<ProjectRow[]> {
      return db
        .selectFrom('projects')
        .selectAll()
        .where('organization_id', '=', organizationId)
        .orderBy('created_at')
        .orderBy('id')
        .execute();
    },

    /** Whether the organization has this project; needs no `this`, so it can be passed around. */
    async exists(organizationId: string, id: string): Promise<boolean> {
      const r = await db
        .selectFrom('projects')
        .select('id')
        .where('organization_id', '=', organizationId)
        .where('id', '=', id)
        .executeTakeFirst();
      return r !== undefined;
    },

    async get(organizationId: string, id: string): Promise<ProjectRow | undefined> {
      return db
        .selectFrom('projects')
        .selectAll()
        .where('organization_id', '=', organizationId)
        .where('id', '=', id)
        .executeTakeFirst();
    },

    /**
     * The owning organization of a project id, for access checks only (to tell "not yours" from
     * "missing"): it returns no project data.
     */
    async ownerOf(id: string): Promise<string | null> {
      const r = await db
        .selectFrom('projects')
        .select('organization_id')
        .where('id', '=', id)
        .executeTakeFirst();
      return r?.organization_id ?? null;
    },

    async rename(
      organizationId: string,
      id: string,
      name: string,
      at: string,
    ): Promise<ProjectRow | undefined> {
      await db
        .updateTable('projects')
        .set({ name, updated_at: at })
        .where('organization_id', '=', organizationId)
        .where('id', '=', id)
        .execute();
      return this.get(organizationId, id);
    },

    /** Deletes a project (its keys cascade). If it was the default, the oldest remaining one becomes default. */
    async delete(organizationId: string, id: string): Promise<boolean> {
      return db.transaction().execute(async (trx) => {
        const res = await trx
          .deleteFrom('projects')
          .where('organization_id', '=', organizationId)
          .where('id', '=', id)
          .executeTakeFirst();
        if (Number(res.numDeletedRows) === 0) return false;
        const hasDefault = await trx
          .selectFrom('projects')
          .select('id')
          .where('organization_id', '=', organizationId)
          .where('is_default', '=', 1)
          .executeTakeFirst();
        if (!hasDefault) {
          const oldest = await trx
            .selectFrom('projects')
            .select('id')
            .where('organization_id', '=', organizationId)
            .orderBy('created_at')
            .orderBy('id')
            .executeTakeFirst();
          if (oldest) {
            await trx
              .updateTable('projects')
              .set({ is_default: 1 })
              .where('organization_id', '=', organizationId)
              .where('id', '=', oldest.id)
              .execute();
          }
        }
        return true;
      });
    },
  };
}

export type ProjectRepository = ReturnType<typeof createProjectRepository>;
