import type { Kysely, Selectable } from 'kysely';
import type { Database, OrganizationsTable } from '../../storage/schema.js';

export type OrganizationRow = Selectable<OrganizationsTable>;

export interface Organization {
  _id: string;
  name: string;
  slug: string;
  ownerId: string;
  tier: string;
  billingPeriodStart: string | null;
  rateLimitPerMinute: number | null;
  createdAt: string;
  updatedAt: string | null;
}

export function toOrganization(row: OrganizationRow): Organization {
  return {
    _id: row.id,
    name: row.name,
    slug: row.slug,
    ownerId: row.owner_id,
    tier: row.tier,
    billingPeriodStart: row.billing_period_start,
    rateLimitPerMinute: row.rate_limit_per_minute,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
  };
}

/** Organizations are themselves the tenant: every method is keyed by the organization id. */
export function createOrganizationRepository(db: Kysely<Database>) {
  return {
    async create(row: OrganizationRow): Promise<void> {
      await db.transaction().execute(async (trx) => {
        await trx.insertInto('organizations').values(row).execute();
        await trx
          .insertInto('memberships')
          .values({
            organization_id: row.id,
            user_id: row.owner_id,
            role: 'owner',
            created_at: row.created_at,
          })
          .execute();
      });
    },

    async get(organizationId: string): Promise<OrganizationRow | undefined> {
      return db.selectFrom('organizations').selectAll().where('id', '=', organizationId).executeTakeFirst();
    },

    async getBySlug(slug: string): Promise<OrganizationRow | undefined> {
      return db.selectFrom('organizations').selectAll().where('slug', '=', slug).executeTakeFirst();
    },

    async listForUser(userId: string): Promise<OrganizationRow[]> {
      return db
        .selectFrom('organizations as o')
        .innerJoin('memberships as m', 'm.organization_id', 'o.id')
        .selectAll('o')
        .where('m.user_id', '=', userId)
        .orderBy('o.created_at')
        .orderBy('o.id')
        .execute();
    },

    async roleOf(userId: string, organizationId: string): Promise<string | null> {
      const row = await db
        .selectFrom('memberships')
        .select('role')
        .where('organization_id', '=', organizationId)
        .where('user_id', '=', userId)
        .executeTakeFirst();
      return row?.role ?? null;
    },

    async update(
      organizationId: string,
      patch: Partial<
        Pick<OrganizationRow, 'name' | 'slug' | 'tier' | 'rate_limit_per_minute' | 'billing_period_start'>
      > & {
        updated_at: string;
      },
    ): Promise<OrganizationRow | undefined> {
      await db.updateTable('organizations').set(patch).where('id', '=', organizationId).execute();
      return this.get(organizationId);
    },

    /** Removes the organization; foreign keys cascade to every row it owns. */
    async delete(organizationId: string): Promise<boolean> {
      const res = await db.deleteFrom('organizations').where('id', '=', organizationId).executeTakeFirst();
      return Number(res.numDeletedRows) > 0;
    },
  };
}

export type OrganizationRepository = ReturnType<typeof createOrganizationRepository>;
