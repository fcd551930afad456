import type { Kysely, Selectable } from 'kysely';
import { notFound } from '../../lib/errors.js';
import type { Db } from '../../storage/db.js';
import type { Database, ProjectsTable } from '../../storage/schema.js';

export type ProjectRow = Selectable<ProjectsTable>;

/**
 * The organization's row lock, held until the transaction ends: a no-op update rather than
 * `SELECT … FOR UPDATE`, which SQLite does not parse (it runs one write transaction at a time anyway);
 * on PostgreSQL it takes a lock that rows referencing the organization do not wait for.
 */
async function lockOrganization(organizationId: string, trx: Db): Promise<boolean> {
  const res = await trx
    .updateTable('organizations')
    .set((eb) => ({ updated_at: eb.ref('updated_at') }))
    .where('id', '=', organizationId)
    .executeTakeFirst();
  return Number(res.numUpdatedRows) > 0;
}

/**
 * Per process, the organizations whose lock a write holds or waits for, each with the end of its
 * queue: the writes of one organization wait here, in memory, and take a pooled connection only
 * when their turn comes. Waiting on the row lock itself would hold a connection each, and a tenant
 * sending many such writes at once could take the whole pool from every other request.
 */
const organizationQueues = new Map<string, Promise<void>>();

/** Runs `work` after every earlier call for the organization has ended, one at a time per process. */
export async function inOrganizationQueue<T>(organizationId: string, work: () => Promise<T>): Promise<T> {
  const before = organizationQueues.get(organizationId) ?? Promise.resolve();
  const run = before.then(work);
  const end = run.then(
    () => {},
    () => {},
  );
  organizationQueues.set(organizationId, end);
  try {
    return await run;
  } finally {
    if (organizationQueues.get(organizationId) === end) organizationQueues.delete(organizationId);
  }
}

export function createProjectRepository(db: Kysely<Database>) {
  return {
    async insert(row: ProjectRow, trx: Db = db): Promise<void> {
      await trx.insertInto('projects').values(row).execute();
    },

    /**
     * Runs `work` in one transaction that holds the organization's row lock until it ends. Every write
     * that decides which project is the default (create, delete), or that adds a key to a project or
     * takes a project's keys away (key creation, regenerate-key, delete), runs under it, one at a time
     * per organization: two concurrent first projects would otherwise both count none and both become
     * the default, and a key created while its project is deleted would escape the list of keys that
     * stop authenticating. Within one process such writes queue in memory first (inOrganizationQueue),
     * so at most one connection per process waits on the row lock. An organization deleted since the
     * caller's access was checked answers 404 (its rows could not be written any more).
     */
    async withOrganizationLocked<T>(organizationId: string, work: (trx: Db) => Promise<T>): Promise<T> {
      return inOrganizationQueue(organizationId, () =>
        db.transaction().execute(async (trx) => {
          if (!(await lockOrganization(organizationId, trx))) throw notFound('Organization');
          return work(trx);
        }),
      );
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
    async exists(organizationId: string, id: string, trx: Db = db): Promise<boolean> {
      const r = await trx
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

    /**
     * Deletes a project (its keys cascade), inside the caller's transaction (withOrganizationLocked). If
     * it was the default, the oldest remaining one becomes default.
     */
    async delete(organizationId: string, id: string, trx: Db): Promise<boolean> {
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
    },
  };
}

export type ProjectRepository = ReturnType<typeof createProjectRepository>;
