import type { Kysely, Selectable, Updateable } from 'kysely';
import type { Database, McpUpstreamsTable } from '../../storage/schema.js';
import { createProjectRepository } from '../projects/repository.js';

export type UpstreamRow = Selectable<McpUpstreamsTable>;
export type UpstreamPatch = Omit<Updateable<McpUpstreamsTable>, 'id' | 'organization_id' | 'created_at'>;

/** MCP upstream configurations; every method is scoped by organization. */
export function createMcpRepository(db: Kysely<Database>) {
  return {
    async list(organizationId: string, projectId?: string): Promise<UpstreamRow[]> {
      let q = db.selectFrom('mcp_upstreams').selectAll().where('organization_id', '=', organizationId);
      if (projectId !== undefined) q = q.where('project_id', '=', projectId);
      return q.orderBy('created_at').orderBy('id').execute();
    },

    async get(organizationId: string, id: string): Promise<UpstreamRow | undefined> {
      return db
        .selectFrom('mcp_upstreams')
        .selectAll()
        .where('organization_id', '=', organizationId)
        .where('id', '=', id)
        .executeTakeFirst();
    },

    async getBySlug(organizationId: string, slug: string): Promise<UpstreamRow | undefined> {
      return db
        .selectFrom('mcp_upstreams')
        .selectAll()
        .where('organization_id', '=', organizationId)
        .where('slug', '=', slug)
        .executeTakeFirst();
    },

    async insert(row: UpstreamRow): Promise<void> {
      await db.insertInto('mcp_upstreams').values(row).execute();
    },

    async update(organizationId: string, id: string, patch: UpstreamPatch): Promise<UpstreamRow | undefined> {
      await db
        .updateTable('mcp_upstreams')
        .set(patch)
        .where('organization_id', '=', organizationId)
        .where('id', '=', id)
        .execute();
      return this.get(organizationId, id);
    },

    async delete(organizationId: string, id: string): Promise<boolean> {
      const res = await db
        .deleteFrom('mcp_upstreams')
        .where('organization_id', '=', organizationId)
        .where('id', '=', id)
        .executeTakeFirst();
      return Number(res.numDeletedRows) > 0;
    },

    projectExists: createProjectRepository(db).exists,

    /** The organization's registered tools, for the charter's svc_list_tools. */
    async listTools(organizationId: string) {
      return db
        .selectFrom('tools')
        .select(['name', 'description', 'arguments', 'created_at', 'updated_at'])
        .where('organization_id', '=', organizationId)
        .orderBy('name')
        .execute();
    },
  };
}

export type McpRepository = ReturnType<typeof createMcpRepository>;
