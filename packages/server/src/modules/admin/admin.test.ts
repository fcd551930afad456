import { describe, expect, it } from 'vitest';
import { useTestApp } from '../../../test/fixture.js';
import { ADMIN_TOKEN, bearer, createTenant, expectError, withTestApp } from '../../../test/helpers.js';
import { createOrganizationRepository } from '../organizations/repository.js';
import { createOrganizationService } from '../organizations/service.js';

const t = useTestApp();

describe('operator admin API', () => {
  it('changes the tier and the custom rate, starting a billing period', async () => {
    const tenant = await createTenant(t);
    const res = await t.inject({
      method: 'PATCH',
      url: `/v1/admin/organizations/${tenant.orgId}`,
      headers: bearer(ADMIN_TOKEN),
      payload: { tier: 'enterprise', rateLimitPerMinute: 5000 },
    });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({ _id: tenant.orgId, tier: 'enterprise', rateLimitPerMinute: 5000 });
    expect(res.json().billingPeriodStart).toEqual(expect.any(String));
  });

  it('refuses without the admin token, with user tokens, and when no token is configured', async () => {
    const tenant = await createTenant(t);
    const url = `/v1/admin/organizations/${tenant.orgId}`;
    expectError(await t.inject({ method: 'PATCH', url, payload: { tier: 'team' } }), 401, 'unauthorized');
    expectError(
      await t.inject({ method: 'PATCH', url, headers: bearer(tenant.token), payload: { tier: 'team' } }),
      401,
      'unauthorized',
    );
    expectError(
      await t.inject({ method: 'PATCH', url, headers: bearer(tenant.apiKey), payload: { tier: 'team' } }),
      401,
      'unauthorized',
    );
    await withTestApp({ adminToken: null }, async (unset) => {
      expectError(
        await unset.inject({ method: 'PATCH', url, headers: bearer(ADMIN_TOKEN), payload: { tier: 'team' } }),
        401,
        'unauthorized',
      );
    });
  });

  it('validates the body and answers 404 for unknown organizations', async () => {
    const tenant = await createTenant(t);
    const url = `/v1/admin/organizations/${tenant.orgId}`;
    expectError(
      await t.inject({ method: 'PATCH', url, headers: bearer(ADMIN_TOKEN), payload: { tier: 'gold' } }),
      400,
      'validation_failed',
    );
    expectError(
      await t.inject({
        method: 'PATCH',
        url,
        headers: bearer(ADMIN_TOKEN),
        payload: { rateLimitPerMinute: 0 },
      }),
      400,
      'validation_failed',
    );
    expectError(
      await t.inject({
        method: 'PATCH',
        url: '/v1/admin/organizations/00000000-0000-7000-8000-000000000000',
        headers: bearer(ADMIN_TOKEN),
        payload: { tier: 'team' },
      }),
      404,
      'not_found',
    );
  });

  it('answers 404, not a crash, when the organization is deleted while its plan changes', async () => {
    const tenant = await createTenant(t);
    const organizations = createOrganizationRepository(t.store.db);
    // The deletion lands between the service's read and its write.
    const service = createOrganizationService({
      organizations: {
        ...organizations,
        update: async (id, patch) => {
          await organizations.delete(id);
          return organizations.update(id, patch);
        },
      },
      keys: t.ctx.keys,
      clock: t.ctx.clock,
    });
    await expect(service.adminUpdate(tenant.orgId, { tier: 'team' })).rejects.toMatchObject({
      code: 'not_found',
    });
  });
});
