import { describe, expect, it } from 'vitest';
import { useTestApp } from '../../test/fixture.js';
import { createTenant, keyHeader } from '../../test/helpers.js';

const t = useTestApp();

/**
 * While the Redis subscriber is away (scale-out), invalidations from other instances can be
 * missed: the caches are paused then (InvalidationBroadcaster), and a paused cache reads the store.
 * Changes below are written to the store directly, as another instance would, with no invalidation.
 */
describe('paused caches', () => {
  it('authenticate every key from the store: a key revoked elsewhere stops working at once', async () => {
    const tenant = await createTenant(t);
    const keys = t.ctx.keys;
    expect(await keys.authenticate(tenant.apiKey)).not.toBeNull();
    await t.store.db
      .updateTable('api_keys')
      .set({ is_revoked: 1 })
      .where('organization_id', '=', tenant.orgId)
      .execute();
    // Cached: the revocation's invalidation never came.
    expect(await keys.authenticate(tenant.apiKey)).not.toBeNull();
    keys.pause();
    expect(await keys.authenticate(tenant.apiKey)).toBeNull();
    keys.resume();
    expect(await keys.authenticate(tenant.apiKey)).toBeNull();
  });

  it('read every policy from the store: a policy changed elsewhere applies at once', async () => {
    const tenant = await createTenant(t);
    const put = await t.inject({
      method: 'POST',
      url: '/v1/policies',
      headers: keyHeader(tenant.apiKey),
      payload: { toolName: 'pay', constraints: [{ argumentName: 'amount', maximum: 100 }] },
    });
    expect(put.statusCode).toBe(201);
    const policies = t.ctx.policies;
    expect((await policies.get(tenant.orgId, 'pay'))?.isActive).toBe(true);
    await t.store.db
      .updateTable('policies')
      .set({ is_active: 0 })
      .where('organization_id', '=', tenant.orgId)
      .execute();
    expect((await policies.get(tenant.orgId, 'pay'))?.isActive).toBe(true);
    policies.pause();
    expect((await policies.get(tenant.orgId, 'pay'))?.isActive).toBe(false);
    // Nothing was kept while paused, and caching resumes from empty.
    policies.resume();
    expect((await policies.get(tenant.orgId, 'pay'))?.isActive).toBe(false);
  });
});
