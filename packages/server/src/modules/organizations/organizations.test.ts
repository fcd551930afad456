import { describe, expect, it } from 'vitest';
import { useTestApp } from '../../../test/fixture.js';
import { asUser, bearer, createTenant, expectError, keyHeader } from '../../../test/helpers.js';

const t = useTestApp();

describe('organizations', () => {
  it('creates an organization owned by the caller, on the free tier', async () => {
    const token = await t.token('alice');
    const res = await t.inject({
      method: 'POST',
      url: '/v1/organizations',
      headers: bearer(token),
      payload: { name: 'Acme', slug: 'acme-1' },
    });
    expect(res.statusCode).toBe(201);
    const org = res.json();
    expect(org).toMatchObject({
      name: 'Acme',
      slug: 'acme-1',
      ownerId: 'alice',
      tier: 'free',
      billingPeriodStart: null,
      updatedAt: null,
    });
    expect(org._id).toMatch(/^[0-9a-f-]{36}$/);
    expect(Date.parse(org.createdAt)).not.toBeNaN();

    const list = await t.inject({ method: 'GET', url: '/v1/organizations', headers: bearer(token) });
    expect(list.json().data.map((o: { _id: string }) => o._id)).toContain(org._id);
    const bySlug = await t.inject({
      method: 'GET',
      url: '/v1/organizations/slug/acme-1',
      headers: bearer(token),
    });
    expect(bySlug.json()._id).toBe(org._id);
  });

  it('rejects a taken slug with 409 slug_taken, on create and on update', async () => {
    const token = await t.token('bob');
    const a = await t.inject({
      method: 'POST',
      url: '/v1/organizations',
      headers: bearer(token),
      payload: { name: 'A', slug: 'taken' },
    });
    expect(a.statusCode).toBe(201);
    const dup = await t.inject({
      method: 'POST',
      url: '/v1/organizations',
      headers: bearer(token),
      payload: { name: 'B', slug: 'taken' },
    });
    expectError(dup, 409, 'slug_taken');
    const b = await t.inject({
      method: 'POST',
      url: '/v1/organizations',
      headers: bearer(token),
      payload: { name: 'B', slug: 'other' },
    });
    const upd = await t.inject({
      method: 'PUT',
      url: `/v1/organizations/${b.json()._id}`,
      headers: bearer(token),
      payload: { slug: 'taken' },
    });
    expectError(upd, 409, 'slug_taken');
  });

  it.each([
    [{ name: 'x', slug: 'Upper' }, 'slug'],
    [{ name: 'x', slug: 'under_score' }, 'slug'],
    [{ name: 'x', slug: '' }, 'slug'],
    [{ name: 'x', slug: 'a'.repeat(101) }, 'slug'],
    [{ name: '', slug: 'ok' }, 'name'],
    [{ name: 'n'.repeat(101), slug: 'ok' }, 'name'],
    [{ slug: 'ok' }, 'name'],
  ])('validates %j with 400 naming the field', async (payload, field) => {
    const res = await t.inject({
      method: 'POST',
      url: '/v1/organizations',
      headers: bearer(await t.token('v')),
      payload,
    });
    expectError(res, 400, 'validation_failed');
    expect(res.json().error.message).toContain(field);
  });

  it('accepts names and slugs of exactly 100 characters', async () => {
    const res = await t.inject({
      method: 'POST',
      url: '/v1/organizations',
      headers: bearer(await t.token('edge')),
      payload: { name: 'n'.repeat(100), slug: 's'.repeat(100) },
    });
    expect(res.statusCode).toBe(201);
  });

  it('refuses API keys on JWT-only endpoints with 403 authorization_error', async () => {
    const tenant = await createTenant(t);
    const create = await t.inject({
      method: 'POST',
      url: '/v1/organizations',
      headers: keyHeader(tenant.apiKey),
      payload: { name: 'x', slug: 'via-key' },
    });
    expectError(create, 403, 'authorization_error');
    const upd = await t.inject({
      method: 'PUT',
      url: `/v1/organizations/${tenant.orgId}`,
      headers: keyHeader(tenant.apiKey),
      payload: { name: 'y' },
    });
    expectError(upd, 403, 'authorization_error');
    const del = await t.inject({
      method: 'DELETE',
      url: `/v1/organizations/${tenant.orgId}`,
      headers: keyHeader(tenant.apiKey),
    });
    expectError(del, 403, 'authorization_error');
  });

  it('lists only its own organization for an API key', async () => {
    const tenant = await createTenant(t);
    await createTenant(t);
    const res = await t.inject({
      method: 'GET',
      url: '/v1/organizations',
      headers: keyHeader(tenant.apiKey),
    });
    expect(res.json().data.map((o: { _id: string }) => o._id)).toEqual([tenant.orgId]);
  });

  it('updates partially and sets updatedAt', async () => {
    const tenant = await createTenant(t);
    const res = await t.inject({
      method: 'PUT',
      url: `/v1/organizations/${tenant.orgId}`,
      headers: bearer(tenant.token),
      payload: { name: 'Renamed' },
    });
    expect(res.statusCode).toBe(200);
    expect(res.json().name).toBe('Renamed');
    expect(res.json().updatedAt).not.toBeNull();
  });

  it('answers 404 for a missing organization and 403 for one the caller is not a member of', async () => {
    const a = await createTenant(t);
    const b = await createTenant(t);
    const missing = await t.inject({
      method: 'GET',
      url: '/v1/organizations/00000000-0000-7000-8000-000000000000',
      headers: bearer(a.token),
    });
    expectError(missing, 404, 'not_found');
    for (const headers of [bearer(b.token), keyHeader(b.apiKey)]) {
      expectError(
        await t.inject({ method: 'GET', url: `/v1/organizations/${a.orgId}`, headers }),
        403,
        'authorization_error',
      );
    }
    const slug = (
      await t.inject({ method: 'GET', url: `/v1/organizations/${a.orgId}`, headers: bearer(a.token) })
    ).json().slug;
    expectError(
      await t.inject({ method: 'GET', url: `/v1/organizations/slug/${slug}`, headers: bearer(b.token) }),
      403,
      'authorization_error',
    );
    expectError(
      await t.inject({
        method: 'PUT',
        url: `/v1/organizations/${a.orgId}`,
        headers: bearer(b.token),
        payload: { name: 'hijack' },
      }),
      403,
      'authorization_error',
    );
    expectError(
      await t.inject({ method: 'DELETE', url: `/v1/organizations/${a.orgId}`, headers: bearer(b.token) }),
      403,
      'authorization_error',
    );
    const still = await t.inject({
      method: 'GET',
      url: `/v1/organizations/${a.orgId}`,
      headers: bearer(a.token),
    });
    expect(still.json().name).not.toBe('hijack');
  });

  it('deletes an organization with all its data; its keys stop working at once', async () => {
    const tenant = await createTenant(t);
    const before = await t.inject({ method: 'GET', url: '/v1/projects', headers: keyHeader(tenant.apiKey) });
    expect(before.statusCode).toBe(200);
    const del = await t.inject({
      method: 'DELETE',
      url: `/v1/organizations/${tenant.orgId}`,
      headers: bearer(tenant.token),
    });
    expect(del.statusCode).toBe(200);
    expect(del.json()).toEqual({ success: true });
    expectError(
      await t.inject({ method: 'GET', url: '/v1/projects', headers: keyHeader(tenant.apiKey) }),
      401,
      'invalid_api_key',
    );
    expectError(
      await t.inject({
        method: 'GET',
        url: `/v1/organizations/${tenant.orgId}`,
        headers: bearer(tenant.token),
      }),
      404,
      'not_found',
    );
    const leftovers = await t.store.db
      .selectFrom('projects')
      .select('id')
      .where('organization_id', '=', tenant.orgId)
      .execute();
    expect(leftovers).toEqual([]);
    const keys = await t.store.db
      .selectFrom('api_keys')
      .select('id')
      .where('organization_id', '=', tenant.orgId)
      .execute();
    expect(keys).toEqual([]);
  });

  it('lets a user belong to several organizations', async () => {
    const token = await t.token('multi');
    for (const slug of ['multi-a', 'multi-b']) {
      await t.inject({
        method: 'POST',
        url: '/v1/organizations',
        headers: bearer(token),
        payload: { name: slug, slug },
      });
    }
    const list = await t.inject({ method: 'GET', url: '/v1/organizations', headers: bearer(token) });
    expect(list.json().data.map((o: { slug: string }) => o.slug)).toEqual(['multi-a', 'multi-b']);
  });

  it('uses X-Organization-Id for JWT callers on organization-scoped endpoints', async () => {
    const tenant = await createTenant(t);
    const ok = await t.inject({ method: 'GET', url: '/v1/api-keys', headers: asUser(tenant) });
    expect(ok.statusCode).toBe(200);
    expectError(
      await t.inject({ method: 'GET', url: '/v1/api-keys', headers: bearer(tenant.token) }),
      400,
      'missing_organization',
    );
  });
});
