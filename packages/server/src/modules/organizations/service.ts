import type { Clock } from '../../lib/clock.js';
import { AppError, notFound } from '../../lib/errors.js';
import { uuidv7 } from '../../lib/ids.js';
import type { Principal } from '../../plugins/auth.js';
import { isUniqueViolation } from '../../storage/errors.js';
import type { ApiKeyAuthenticator } from '../api-keys/authenticator.js';
import {
  type Organization,
  type OrganizationRepository,
  type OrganizationRow,
  toOrganization,
} from './repository.js';

export const TIERS = ['free', 'team', 'business', 'enterprise'] as const;
export type Tier = (typeof TIERS)[number];

export interface OrganizationServiceDeps {
  organizations: OrganizationRepository;
  keys: ApiKeyAuthenticator;
  clock: Clock;
}

const slugTaken = (slug: string) => new AppError('slug_taken', `The slug "${slug}" is already in use`);

export function createOrganizationService({ organizations, keys, clock }: OrganizationServiceDeps) {
  async function load(id: string): Promise<OrganizationRow> {
    const row = await organizations.get(id);
    if (!row) throw notFound('Organization');
    return row;
  }

  async function assertAccess(principal: Principal, row: OrganizationRow): Promise<void> {
    if (principal.kind === 'admin') return;
    const allowed =
      principal.kind === 'apiKey'
        ? principal.organizationId === row.id
        : (await organizations.roleOf(principal.userId, row.id)) !== null;
    if (!allowed) throw new AppError('authorization_error', 'You are not a member of this organization');
  }

  return {
    async list(principal: Principal): Promise<Organization[]> {
      if (principal.kind === 'apiKey') {
        const row = await organizations.get(principal.organizationId);
        return row ? [toOrganization(row)] : [];
      }
      if (principal.kind !== 'user') return [];
      return (await organizations.listForUser(principal.userId)).map(toOrganization);
    },

    async create(userId: string, input: { name: string; slug: string }): Promise<Organization> {
      const row: OrganizationRow = {
        id: uuidv7(),
        name: input.name,
        slug: input.slug,
        owner_id: userId,
        tier: 'free',
        rate_limit_per_minute: null,
        billing_period_start: null,
        created_at: clock.now().toISOString(),
        updated_at: null,
      };
      try {
        await organizations.create(row);
      } catch (err) {
        if (isUniqueViolation(err)) throw slugTaken(input.slug);
        throw err;
      }
      return toOrganization(row);
    },

    async get(principal: Principal, id: string): Promise<Organization> {
      const row = await load(id);
      await assertAccess(principal, row);
      return toOrganization(row);
    },

    async getBySlug(principal: Principal, slug: string): Promise<Organization> {
      const row = await organizations.getBySlug(slug);
      if (!row) throw notFound('Organization');
      await assertAccess(principal, row);
      return toOrganization(row);
    },

    async update(
      principal: Principal,
      id: string,
      patch: { name?: string; slug?: string },
    ): Promise<Organization> {
      const row = await load(id);
      await assertAccess(principal, row);
      try {
        const updated = await organizations.update(id, {
          ...(patch.name !== undefined ? { name: patch.name } : {}),
          ...(patch.slug !== undefined ? { slug: patch.slug } : {}),
          updated_at: clock.now().toISOString(),
        });
        if (!updated) throw notFound('Organization');
        return toOrganization(updated);
      } catch (err) {
        if (isUniqueViolation(err)) throw slugTaken(patch.slug ?? '');
        throw err;
      }
    },

    async delete(principal: Principal, id: string): Promise<void> {
      const row = await load(id);
      await assertAccess(principal, row);
      if (principal.kind === 'user' && row.owner_id !== principal.userId) {
        throw new AppError('authorization_error', 'Only the owner can delete an organization');
      }
      await organizations.delete(id);
      keys.forgetOrganization(id);
    },

    /** Operator change of plan. A tier change starts a new billing period. */
    async adminUpdate(
      id: string,
      patch: { tier?: Tier; rateLimitPerMinute?: number | null },
    ): Promise<Organization> {
      const row = await load(id);
      const now = clock.now().toISOString();
      const tierChanged = patch.tier !== undefined && patch.tier !== row.tier;
      const updated = await organizations.update(id, {
        ...(patch.tier !== undefined ? { tier: patch.tier } : {}),
        ...(tierChanged ? { billing_period_start: now } : {}),
        ...(patch.rateLimitPerMinute !== undefined
          ? { rate_limit_per_minute: patch.rateLimitPerMinute }
          : {}),
        updated_at: now,
      });
      keys.forgetOrganization(id);
      // Deleted between the read and the write.
      if (!updated) throw notFound('Organization');
      return toOrganization(updated);
    },
  };
}

export type OrganizationService = ReturnType<typeof createOrganizationService>;
