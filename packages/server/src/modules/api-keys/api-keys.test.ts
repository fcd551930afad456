import { describe, expect, it } from 'vitest';
import { useTestApp } from '../../../test/fixture.js';
import { asUser, createTenant, expectError, keyHeader } from '../../../test/helpers.js';
import { hashApiKey } from './keys.js';

const t = useTestApp();

describe('API keys', () => {
  it('creates a key shown in full only once, stored only as a hash', async () => {
    const tenant = await createTenant(t);
    const res = await t.inject({
      method: 'POST',
      url: '/v1/api-keys',
      headers: asUser(tenant),
      payload: { name: 'ci', projectId: tenant.projectId },
    });
    expect(res.statusCode).toBe(201);
    const created = res.json();
    expect(created).toMatchObject({ name: 'ci', keyPrefix: `${created.key.slice(0, 12)}...` });
    expect(created.warning).toEqual(expect.any(String));
    expect(created.key).toMatch(/^svc_/);
    // At least 128 bits of randomness: 43 base64url characters = 256 bits.
    expect(created.key.length - 4).toBeGreaterThanOrEqual(22);

    const row = await t.store.db
      .selectFrom('api_keys')
      .selectAll()
      .where('id', '=', created.id)
      .executeTakeFirstOrThrow();
    expect(row.key_hash).toBe(hashApiKey(created.key));
    expect(JSON.stringify(row)).not.toContain(created.key);

    const got = await t.inject({ method: 'GET', url: `/v1/api-keys/${created.id}`, headers: asUser(tenant) });
    expect(got.json()).toEqual({
      id: created.id,
      name: 'ci',
      keyPrefix: created.keyPrefix,
      projectId: tenant.projectId,
      scopes: ['api'],
      isRevoked: false,
      lastUsedAt: null,
      createdAt: created.createdAt,
    });
    const list = await t.inject({ method: 'GET', url: '/v1/api-keys', headers: keyHeader(created.key) });
    expect(list.body).not.toContain(created.key);
    expect(list.json().data).toHaveLength(2);
  });

  it('keeps lastUsedAt without writing on every request', async () => {
    const tenant = await createTenant(t);
    const [key] = (
      await t.inject({ method: 'GET', url: '/v1/api-keys', headers: keyHeader(tenant.apiKey) })
    ).json().data;
    expect(key.lastUsedAt).toEqual(expect.any(String));
    const row = await t.store.db
      .selectFrom('api_keys')
      .select('last_used_at')
      .where('id', '=', key.id)
      .executeTakeFirstOrThrow();
    expect(row.last_used_at).toBeNull();
    await t.ctx.keys.flush();
    const flushed = await t.store.db
      .selectFrom('api_keys')
      .select('last_used_at')
      .where('id', '=', key.id)
      .executeTakeFirstOrThrow();
    expect(flushed.last_used_at).toBe(key.lastUsedAt);
  });

  it('never moves lastUsedAt back when another instance stored a later use', async () => {
    const tenant = await createTenant(t);
    const [key] = (
      await t.inject({ method: 'GET', url: '/v1/api-keys', headers: keyHeader(tenant.apiKey) })
    ).json().data;
    // Another instance flushed a use of the key later than this instance's.
    const later = '2999-01-01T00:00:00.000Z';
    await t.store.db.updateTable('api_keys').set({ last_used_at: later }).where('id', '=', key.id).execute();
    await t.ctx.keys.flush();
    const stored = await t.store.db
      .selectFrom('api_keys')
      .select('last_used_at')
      .where('id', '=', key.id)
      .executeTakeFirstOrThrow();
    expect(stored.last_used_at).toBe(later);
    // Read while a use of this instance is not written yet, the later one is shown.
    await t.inject({ method: 'GET', url: '/v1/api-keys', headers: keyHeader(tenant.apiKey) });
    const listed = (
      await t.inject({ method: 'GET', url: '/v1/api-keys', headers: keyHeader(tenant.apiKey) })
    ).json().data;
    expect(listed.find((k: { id: string }) => k.id === key.id).lastUsedAt).toBe(later);
  });

  it('renames, revokes (immediately effective) and deletes', async () => {
    const tenant = await createTenant(t);
    const created = (
      await t.inject({
        method: 'POST',
        url: '/v1/api-keys',
        headers: keyHeader(tenant.apiKey),
        payload: { name: 'tmp', projectId: tenant.projectId },
      })
    ).json();
    const renamed = await t.inject({
      method: 'PATCH',
      url: `/v1/api-keys/${created.id}`,
      headers: keyHeader(tenant.apiKey),
      payload: { name: 'renamed' },
    });
    expect(renamed.json().name).toBe('renamed');

    expect(
      (await t.inject({ method: 'GET', url: '/v1/api-keys', headers: keyHeader(created.key) })).statusCode,
    ).toBe(200);
    const revoke = await t.inject({
      method: 'POST',
      url: `/v1/api-keys/${created.id}/revoke`,
      headers: keyHeader(tenant.apiKey),
    });
    expect(revoke.json()).toEqual({
      success: true,
      message: expect.any(String),
      id: created.id,
      isRevoked: true,
    });
    expectError(
      await t.inject({ method: 'GET', url: '/v1/api-keys', headers: keyHeader(created.key) }),
      401,
      'invalid_api_key',
    );
    expect(
      (
        await t.inject({
          method: 'GET',
          url: `/v1/api-keys/${created.id}`,
          headers: keyHeader(tenant.apiKey),
        })
      ).json().isRevoked,
    ).toBe(true);

    const del = await t.inject({
      method: 'DELETE',
      url: `/v1/api-keys/${created.id}`,
      headers: keyHeader(tenant.apiKey),
    });
    expect(del.json()).toEqual({ success: true });
    expectError(
      await t.inject({ method: 'GET', url: `/v1/api-keys/${created.id}`, headers: keyHeader(tenant.apiKey) }),
      404,
      'not_found',
    );
  });

  it('validates names and the project', async () => {
    const tenant = await createTenant(t);
    const h = keyHeader(tenant.apiKey);
    for (const payload of [
      { name: '', projectId: tenant.projectId },
      { name: 'x'.repeat(101), projectId: tenant.projectId },
      { name: 'x' },
    ]) {
      expectError(
        await t.inject({ method: 'POST', url: '/v1/api-keys', headers: h, payload }),
        400,
        'validation_failed',
      );
    }
    expectError(
      await t.inject({
        method: 'POST',
        url: '/v1/api-keys',
        headers: h,
        payload: { name: 'x', projectId: '00000000-0000-7000-8000-000000000000' },
      }),
      404,
      'not_found',
    );
    const [key] = (await t.inject({ method: 'GET', url: '/v1/api-keys', headers: h })).json().data;
    expectError(
      await t.inject({ method: 'PATCH', url: `/v1/api-keys/${key.id}`, headers: h, payload: { name: '' } }),
      400,
      'validation_failed',
    );
  });

  it('answers 404 for another organization key id, and changes nothing', async () => {
    const a = await createTenant(t);
    const b = await createTenant(t);
    const [aKey] = (
      await t.inject({ method: 'GET', url: '/v1/api-keys', headers: keyHeader(a.apiKey) })
    ).json().data;
    for (const headers of [keyHeader(b.apiKey), asUser(b)]) {
      expectError(
        await t.inject({ method: 'GET', url: `/v1/api-keys/${aKey.id}`, headers }),
        404,
        'not_found',
      );
      expectError(
        await t.inject({ method: 'PATCH', url: `/v1/api-keys/${aKey.id}`, headers, payload: { name: 'x' } }),
        404,
        'not_found',
      );
      expectError(
        await t.inject({ method: 'POST', url: `/v1/api-keys/${aKey.id}/revoke`, headers }),
        404,
        'not_found',
      );
      expectError(
        await t.inject({ method: 'DELETE', url: `/v1/api-keys/${aKey.id}`, headers }),
        404,
        'not_found',
      );
    }
    // b cannot mint keys for a's project.
    expectError(
      await t.inject({
        method: 'POST',
        url: '/v1/api-keys',
        headers: keyHeader(b.apiKey),
        payload: { name: 'x', projectId: a.projectId },
      }),
      404,
      'not_found',
    );
    // b's user naming a's organization is not a member.
    expectError(
      await t.inject({
        method: 'GET',
        url: '/v1/api-keys',
        headers: { authorization: `Bearer ${b.token}`, 'x-organization-id': a.orgId },
      }),
      403,
      'authorization_error',
    );
    const list = (await t.inject({ method: 'GET', url: '/v1/api-keys', headers: keyHeader(b.apiKey) })).json()
      .data;
    expect(list.map((k: { id: string }) => k.id)).not.toContain(aKey.id);
    expect(
      (
        await t.inject({ method: 'GET', url: `/v1/api-keys/${aKey.id}`, headers: keyHeader(a.apiKey) })
      ).json(),
    ).toMatchObject({
      name: aKey.name,
      isRevoked: false,
    });
  });

  it('accepts the key as Authorization: Bearer', async () => {
    const tenant = await createTenant(t);
    const res = await t.inject({
      method: 'GET',
      url: '/v1/api-keys',
      headers: { authorization: `Bearer ${tenant.apiKey}` },
    });
    expect(res.statusCode).toBe(200);
    expectError(
      await t.inject({ method: 'GET', url: '/v1/api-keys', headers: keyHeader('svc_wrong') }),
      401,
      'invalid_api_key',
    );
  });

  it('creates keys with scopes, shows them, and refuses unknown or empty scope lists', async () => {
    const tenant = await createTenant(t);
    const create = (headers: Record<string, string>, scopes: unknown) =>
      t.inject({
        method: 'POST',
        url: '/v1/api-keys',
        headers,
        payload: { name: 'bot', projectId: tenant.projectId, scopes },
      });
    const res = await create(asUser(tenant), ['approvals:resolve', 'api']);
    expect(res.statusCode).toBe(201);
    expect(res.json().scopes).toEqual(['api', 'approvals:resolve']);
    const got = await t.inject({
      method: 'GET',
      url: `/v1/api-keys/${res.json().id}`,
      headers: asUser(tenant),
    });
    expect(got.json().scopes).toEqual(['api', 'approvals:resolve']);
    const list = await t.inject({ method: 'GET', url: '/v1/api-keys', headers: asUser(tenant) });
    expect(list.json().data.map((k: { scopes: string[] }) => k.scopes)).toEqual([
      ['api'],
      ['api', 'approvals:resolve'],
    ]);
    for (const scopes of [[], ['admin'], ['api', 'api'], 'api']) {
      expectError(await create(asUser(tenant), scopes), 400, 'validation_failed');
    }
    expectError(
      await t.inject({
        method: 'POST',
        url: '/v1/api-keys',
        headers: asUser(tenant),
        payload: { name: 'bot', projectId: tenant.projectId, scope: ['api'] },
      }),
      400,
      'validation_failed',
    );
  });

  it('renames only: other fields in PATCH answer 400 and change nothing', async () => {
    const tenant = await createTenant(t);
    const [key] = (await t.inject({ method: 'GET', url: '/v1/api-keys', headers: asUser(tenant) })).json()
      .data;
    for (const extra of [{ scopes: ['api'] }, { isRevoked: true }, { projectId: tenant.projectId }]) {
      const res = await t.inject({
        method: 'PATCH',
        url: `/v1/api-keys/${key.id}`,
        headers: asUser(tenant),
        payload: { name: 'renamed', ...extra },
      });
      expectError(res, 400, 'validation_failed');
    }
    const after = await t.inject({ method: 'GET', url: `/v1/api-keys/${key.id}`, headers: asUser(tenant) });
    expect(after.json()).toMatchObject({ name: key.name, isRevoked: false });
  });

  it("keeps a project's key to its own project's keys: it mints, sees and manages no other's", async () => {
    const tenant = await createTenant(t);
    const second = await t.inject({
      method: 'POST',
      url: '/v1/projects',
      headers: asUser(tenant),
      payload: { name: 'second', organizationId: tenant.orgId },
    });
    expect(second.statusCode).toBe(201);
    const otherProject = second.json()._id as string;
    const otherKey = second.json().apiKey as string;
    const keysOf = async (headers: Record<string, string>) =>
      (await t.inject({ method: 'GET', url: '/v1/api-keys', headers })).json().data as {
        id: string;
        projectId: string;
      }[];
    const all = await keysOf(asUser(tenant));
    expect(all).toHaveLength(2);
    const foreign = all.find((k) => k.projectId === otherProject)!;
    // A key for the other project would step out of this key's project.
    const pivot = await t.inject({
      method: 'POST',
      url: '/v1/api-keys',
      headers: keyHeader(tenant.apiKey),
      payload: { name: 'pivot', projectId: otherProject },
    });
    expectError(pivot, 404, 'not_found');
    expect((await keysOf(keyHeader(tenant.apiKey))).map((k) => k.projectId)).toEqual([tenant.projectId]);
    for (const req of [
      { method: 'GET' as const, url: `/v1/api-keys/${foreign.id}` },
      { method: 'PATCH' as const, url: `/v1/api-keys/${foreign.id}`, payload: { name: 'mine now' } },
      { method: 'POST' as const, url: `/v1/api-keys/${foreign.id}/revoke` },
      { method: 'DELETE' as const, url: `/v1/api-keys/${foreign.id}` },
    ]) {
      expectError(await t.inject({ ...req, headers: keyHeader(tenant.apiKey) }), 404, 'not_found');
    }
    // Nothing changed: the other project's key still works under its name.
    const names = (keys: object[]) =>
      keys.map((k) => {
        const { id, name, isRevoked } = k as { id: string; name: string; isRevoked: boolean };
        return { id, name, isRevoked };
      });
    expect(names(await keysOf(asUser(tenant)))).toEqual(names(all));
    expect(
      (await t.inject({ method: 'GET', url: '/v1/projects', headers: keyHeader(otherKey) })).statusCode,
    ).toBe(200);
  });

  it('lets a key grant only scopes it has, and an approver-only key manage no keys', async () => {
    const tenant = await createTenant(t);
    const escalate = await t.inject({
      method: 'POST',
      url: '/v1/api-keys',
      headers: keyHeader(tenant.apiKey),
      payload: { name: 'self-approver', projectId: tenant.projectId, scopes: ['approvals:resolve'] },
    });
    expectError(escalate, 403, 'authorization_error');
    expect(escalate.json().error.message).toMatch(/lacks approvals:resolve/);
    const before = (await t.inject({ method: 'GET', url: '/v1/api-keys', headers: asUser(tenant) })).json()
      .data;
    expect(before).toHaveLength(1);
    const sameScopes = await t.inject({
      method: 'POST',
      url: '/v1/api-keys',
      headers: keyHeader(tenant.apiKey),
      payload: { name: 'ci', projectId: tenant.projectId, scopes: ['api'] },
    });
    expect(sameScopes.statusCode).toBe(201);
    const approver = await t.inject({
      method: 'POST',
      url: '/v1/api-keys',
      headers: asUser(tenant),
      payload: { name: 'approver', projectId: tenant.projectId, scopes: ['approvals:resolve'] },
    });
    for (const req of [
      { method: 'GET' as const, url: '/v1/api-keys' },
      {
        method: 'POST' as const,
        url: '/v1/api-keys',
        payload: { name: 'x', projectId: tenant.projectId, scopes: ['approvals:resolve'] },
      },
    ]) {
      expectError(
        await t.inject({ ...req, headers: keyHeader(approver.json().key) }),
        403,
        'authorization_error',
      );
    }
  });
});

describe('API key revocations', () => {
  it('tell watchers of every way a key stops authenticating, and of no tier change', async () => {
    const tenant = await createTenant(t);
    const told: unknown[] = [];
    const unwatch = t.ctx.keys.watchRevocations((r) => told.push(r));
    try {
      const liveKey = async () =>
        (await t.inject({ method: 'GET', url: '/v1/api-keys', headers: asUser(tenant) }))
          .json()
          .data.find((k: { isRevoked: boolean }) => !k.isRevoked).id as string;
      const first = await liveKey();
      const regenerated = await t.inject({
        method: 'POST',
        url: `/v1/projects/${tenant.projectId}/regenerate-key`,
        headers: asUser(tenant),
      });
      expect(regenerated.statusCode).toBe(200);
      expect(told).toEqual([{ keyIds: [first] }]);
      const second = await liveKey();
      await t.inject({ method: 'POST', url: `/v1/api-keys/${second}/revoke`, headers: asUser(tenant) });
      await t.inject({ method: 'DELETE', url: `/v1/api-keys/${second}`, headers: asUser(tenant) });
      expect(told).toEqual([{ keyIds: [first] }, { keyIds: [second] }, { keyIds: [second] }]);
      const tier = await t.inject({
        method: 'PATCH',
        url: `/v1/admin/organizations/${tenant.orgId}`,
        headers: { authorization: `Bearer ${t.config.adminToken}` },
        payload: { tier: 'team' },
      });
      expect(tier.statusCode).toBe(200);
      const deleted = await t.inject({
        method: 'DELETE',
        url: `/v1/organizations/${tenant.orgId}`,
        headers: { authorization: `Bearer ${tenant.token}` },
      });
      expect(deleted.statusCode).toBe(200);
      // The organization is looked up after it is forgotten: a deletion tells, the tier change did not.
      await expect.poll(() => told.length).toBe(4);
      await new Promise((r) => setTimeout(r, 50));
      expect(told).toHaveLength(4);
      expect(told.at(-1)).toEqual({ organizationId: tenant.orgId });
    } finally {
      unwatch();
    }
  });
});
