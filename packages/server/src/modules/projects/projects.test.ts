import { setImmediate as nextLoopTurn } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { useTestApp } from '../../../test/fixture.js';
import { bearer, createTenant, expectError, gate, keyHeader } from '../../../test/helpers.js';
import { createApiKeyRepository } from '../api-keys/repository.js';
import { createApiKeyService } from '../api-keys/service.js';
import { createProjectRepository, inOrganizationQueue } from './repository.js';
import { createProjectService } from './service.js';

const t = useTestApp();

const UNKNOWN = '00000000-0000-7000-8000-000000000000';

describe('projects', () => {
  it('creates the first project as default, with a working API key returned once', async () => {
    const tenant = await createTenant(t);
    const first = await t.inject({
      method: 'GET',
      url: `/v1/projects/${tenant.projectId}`,
      headers: keyHeader(tenant.apiKey),
    });
    expect(first.statusCode).toBe(200);
    expect(first.json()).toMatchObject({
      _id: tenant.projectId,
      organizationId: tenant.orgId,
      name: 'Main',
      isDefault: true,
      updatedAt: null,
    });
    expect(first.json().apiKey).toBeUndefined();
    expect(tenant.apiKey).toMatch(/^svc_[A-Za-z0-9_-]{43}$/);

    const second = await t.inject({
      method: 'POST',
      url: '/v1/projects',
      headers: bearer(tenant.token),
      payload: { organizationId: tenant.orgId, name: 'Second' },
    });
    expect(second.statusCode).toBe(201);
    expect(second.json().isDefault).toBe(false);
    expect(second.json().apiKey).toMatch(/^svc_/);
  });

  it('lists projects: JWT needs organizationId, an API key auto-scopes', async () => {
    const tenant = await createTenant(t);
    expectError(
      await t.inject({ method: 'GET', url: '/v1/projects', headers: bearer(tenant.token) }),
      400,
      'missing_organization',
    );
    const viaQuery = await t.inject({
      method: 'GET',
      url: `/v1/projects?organizationId=${tenant.orgId}`,
      headers: bearer(tenant.token),
    });
    expect(viaQuery.json().data).toHaveLength(1);
    const viaKey = await t.inject({ method: 'GET', url: '/v1/projects', headers: keyHeader(tenant.apiKey) });
    expect(viaKey.json().data.map((p: { _id: string }) => p._id)).toEqual([tenant.projectId]);
  });

  it('renames, with organizationId required', async () => {
    const tenant = await createTenant(t);
    const missing = await t.inject({
      method: 'PUT',
      url: `/v1/projects/${tenant.projectId}`,
      headers: bearer(tenant.token),
      payload: { name: 'X' },
    });
    expectError(missing, 400, 'missing_organization');
    const res = await t.inject({
      method: 'PUT',
      url: `/v1/projects/${tenant.projectId}`,
      headers: bearer(tenant.token),
      payload: { organizationId: tenant.orgId, name: 'Renamed' },
    });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({ name: 'Renamed' });
    expect(res.json().updatedAt).not.toBeNull();
    const unknown = await t.inject({
      method: 'PUT',
      url: `/v1/projects/${UNKNOWN}`,
      headers: bearer(tenant.token),
      payload: { organizationId: tenant.orgId, name: 'X' },
    });
    expectError(unknown, 404, 'not_found');
  });

  it('validates the project name', async () => {
    const tenant = await createTenant(t);
    for (const name of ['', 'x'.repeat(101)]) {
      const res = await t.inject({
        method: 'POST',
        url: '/v1/projects',
        headers: bearer(tenant.token),
        payload: { organizationId: tenant.orgId, name },
      });
      expectError(res, 400, 'validation_failed');
    }
    const noOrg = await t.inject({
      method: 'POST',
      url: '/v1/projects',
      headers: bearer(tenant.token),
      payload: { name: 'x' },
    });
    expectError(noOrg, 400, 'missing_organization');
  });

  it('takes the organization from X-Organization-Id when the body or query names none', async () => {
    const tenant = await createTenant(t);
    const user = bearer(tenant.token);
    const withHeader = { ...user, 'x-organization-id': tenant.orgId };
    // No body at all, with or without a JSON content type: the organization is missing, not the body.
    for (const headers of [user, { ...user, 'content-type': 'application/json' }]) {
      const res = await t.inject({
        method: 'POST',
        url: `/v1/projects/${tenant.projectId}/regenerate-key`,
        headers,
      });
      expectError(res, 400, 'missing_organization');
    }
    const regen = await t.inject({
      method: 'POST',
      url: `/v1/projects/${tenant.projectId}/regenerate-key`,
      headers: withHeader,
    });
    expect(regen.statusCode).toBe(200);
    expect(regen.json().apiKey).toMatch(/^svc_/);
    const created = await t.inject({
      method: 'POST',
      url: '/v1/projects',
      headers: withHeader,
      payload: { name: 'Second' },
    });
    expect(created.statusCode).toBe(201);
    const renamed = await t.inject({
      method: 'PUT',
      url: `/v1/projects/${created.json()._id}`,
      headers: withHeader,
      payload: { name: 'Renamed' },
    });
    expect(renamed.json().name).toBe('Renamed');
    const deleted = await t.inject({
      method: 'DELETE',
      url: `/v1/projects/${created.json()._id}`,
      headers: withHeader,
    });
    expect(deleted.json()).toEqual({ success: true });
    // The body's organization still wins over the header, and must be one of the user's.
    const foreign = await t.inject({
      method: 'POST',
      url: '/v1/projects',
      headers: withHeader,
      payload: { name: 'x', organizationId: (await createTenant(t)).orgId },
    });
    expectError(foreign, 403, 'authorization_error');
    expectError(
      await t.inject({
        method: 'POST',
        url: `/v1/projects/${tenant.projectId}/regenerate-key`,
        headers: withHeader,
        payload: { organizationId: tenant.orgId, extra: 1 },
      }),
      400,
      'validation_failed',
    );
  });

  it('regenerates the key: every old key answers 401 on the very next request', async () => {
    const tenant = await createTenant(t);
    const extra = await t.inject({
      method: 'POST',
      url: '/v1/api-keys',
      headers: keyHeader(tenant.apiKey),
      payload: { name: 'extra', projectId: tenant.projectId },
    });
    const extraKey = extra.json().key as string;
    // Warm the authentication cache with both keys.
    for (const k of [tenant.apiKey, extraKey]) {
      expect((await t.inject({ method: 'GET', url: '/v1/projects', headers: keyHeader(k) })).statusCode).toBe(
        200,
      );
    }
    const regen = await t.inject({
      method: 'POST',
      url: `/v1/projects/${tenant.projectId}/regenerate-key`,
      headers: bearer(tenant.token),
      payload: { organizationId: tenant.orgId },
    });
    expect(regen.statusCode).toBe(200);
    const fresh = regen.json().apiKey as string;
    for (const k of [tenant.apiKey, extraKey]) {
      expectError(
        await t.inject({ method: 'GET', url: '/v1/projects', headers: keyHeader(k) }),
        401,
        'invalid_api_key',
      );
    }
    expect(
      (await t.inject({ method: 'GET', url: '/v1/projects', headers: keyHeader(fresh) })).statusCode,
    ).toBe(200);
    const listed = await t.inject({ method: 'GET', url: '/v1/api-keys', headers: keyHeader(fresh) });
    expect(listed.json().data.filter((k: { isRevoked: boolean }) => !k.isRevoked)).toHaveLength(1);
  });

  it('deletes a project, its keys stop working, and the next project becomes default', async () => {
    const tenant = await createTenant(t);
    const second = await t.inject({
      method: 'POST',
      url: '/v1/projects',
      headers: bearer(tenant.token),
      payload: { organizationId: tenant.orgId, name: 'Second' },
    });
    const noOrg = await t.inject({
      method: 'DELETE',
      url: `/v1/projects/${tenant.projectId}`,
      headers: bearer(tenant.token),
    });
    expectError(noOrg, 400, 'missing_organization');
    const del = await t.inject({
      method: 'DELETE',
      url: `/v1/projects/${tenant.projectId}?organizationId=${tenant.orgId}`,
      headers: bearer(tenant.token),
    });
    expect(del.json()).toEqual({ success: true });
    expectError(
      await t.inject({ method: 'GET', url: '/v1/projects', headers: keyHeader(tenant.apiKey) }),
      401,
      'invalid_api_key',
    );
    const left = await t.inject({
      method: 'GET',
      url: '/v1/projects',
      headers: keyHeader(second.json().apiKey),
    });
    expect(left.json().data).toEqual([expect.objectContaining({ _id: second.json()._id, isDefault: true })]);
    const again = await t.inject({
      method: 'DELETE',
      url: `/v1/projects/${tenant.projectId}?organizationId=${tenant.orgId}`,
      headers: bearer(tenant.token),
    });
    expectError(again, 404, 'not_found');
  });

  it('keeps exactly one default project when projects are created and deleted concurrently', async () => {
    const token = await t.token('concurrent-projects');
    const defaults = async (orgId: string) =>
      (await t.inject({ method: 'GET', url: `/v1/projects?organizationId=${orgId}`, headers: bearer(token) }))
        .json()
        .data.filter((p: { isDefault: boolean }) => p.isDefault).length;
    // Several rounds: on PostgreSQL concurrent transactions overlap, and each round is a fresh chance.
    for (let round = 0; round < 4; round++) {
      const org = await t.inject({
        method: 'POST',
        url: '/v1/organizations',
        headers: bearer(token),
        payload: { name: 'Concurrent', slug: `concurrent-${round}-${Date.now()}` },
      });
      const orgId = org.json()._id as string;
      const created = await Promise.all(
        Array.from({ length: 8 }, (_, i) =>
          t.inject({
            method: 'POST',
            url: '/v1/projects',
            headers: bearer(token),
            payload: { organizationId: orgId, name: `P${i}` },
          }),
        ),
      );
      expect(created.map((r) => r.statusCode)).toEqual(Array(8).fill(201));
      expect(created.filter((r) => r.json().isDefault)).toHaveLength(1);
      expect(await defaults(orgId)).toBe(1);

      // The default and the projects that would succeed it, deleted at once.
      const ids = (
        await t.inject({ method: 'GET', url: `/v1/projects?organizationId=${orgId}`, headers: bearer(token) })
      )
        .json()
        .data.map((p: { _id: string }) => p._id) as string[];
      const deleted = await Promise.all(
        ids.slice(0, 4).map((id) =>
          t.inject({
            method: 'DELETE',
            url: `/v1/projects/${id}?organizationId=${orgId}`,
            headers: bearer(token),
          }),
        ),
      );
      expect(deleted.map((r) => r.statusCode)).toEqual(Array(4).fill(200));
      expect(await defaults(orgId)).toBe(1);
    }
  });

  it('stops every key of a deleted project, also one created and used while the project is deleted', async () => {
    const tenant = await createTenant(t);
    const projects = createProjectRepository(t.store.db);
    const apiKeys = createApiKeyRepository(t.store.db);
    const deps = { authenticator: t.ctx.keys, clock: t.ctx.clock };
    const principal = { kind: 'user' as const, userId: tenant.userId };
    const scope = { organizationId: tenant.orgId, projectId: null, principal };
    // The late key is created as POST /v1/api-keys creates it, through a repository that tells when
    // the creation asks for the organization's lock: from then on it waits for the deletion to end.
    const lockAsked = gate();
    const keyCreation = createApiKeyService({
      ...deps,
      keys: apiKeys,
      projects: {
        exists: projects.exists,
        withOrganizationLocked: (organizationId, work) => {
          const turn = projects.withOrganizationLocked(organizationId, work);
          lockAsked.open();
          return turn;
        },
      },
    });
    let late: Promise<{ key: string } | { refused: unknown }> | undefined;
    const service = createProjectService({
      ...deps,
      projects,
      apiKeyService: createApiKeyService({ ...deps, keys: apiKeys, projects }),
      roleOf: async () => 'owner',
      apiKeys: {
        ...apiKeys,
        // Just after the project's keys are listed, a client creates one more and uses it at once.
        projectKeyIds: async (organizationId, projectId, trx) => {
          const ids = await apiKeys.projectKeyIds(organizationId, projectId, trx);
          // This deletion holds the organization's turn: a turn asked for now (given in memory, without
          // a store round trip, when nothing holds it) has not started by the next turn of the loop.
          let turnGiven = false;
          void inOrganizationQueue(organizationId, async () => {
            turnGiven = true;
          });
          late = (async () => {
            try {
              const created = await keyCreation.create(scope, { name: 'late', projectId });
              await t.inject({ method: 'GET', url: '/v1/projects', headers: keyHeader(created.key) });
              return { key: created.key };
            } catch (refused) {
              return { refused };
            }
          })();
          // The creation finishes (had it not waited for the lock), or waits for this deletion to end.
          // The timer only bounds a failure: a creation held back by something else, which would
          // otherwise wait for this deletion while the deletion waits for it.
          let timer: NodeJS.Timeout | undefined;
          const stuck = new Promise<never>((_, reject) => {
            timer = setTimeout(
              () => reject(new Error('the key creation neither finished nor asked for the lock')),
              5000,
            );
          });
          try {
            await Promise.race([late, lockAsked.opened, stuck]);
          } finally {
            clearTimeout(timer);
          }
          await nextLoopTurn();
          expect(turnGiven, "the project's keys are listed holding the organization's turn").toBe(false);
          return ids;
        },
      },
    });
    await service.delete(scope, tenant.projectId);
    const created = await late!;
    if ('key' in created) {
      expectError(
        await t.inject({ method: 'GET', url: '/v1/projects', headers: keyHeader(created.key) }),
        401,
        'invalid_api_key',
      );
    } else {
      expect(created.refused).toMatchObject({ code: 'not_found', status: 404, message: 'Project not found' });
    }
    expectError(
      await t.inject({ method: 'GET', url: '/v1/projects', headers: keyHeader(tenant.apiKey) }),
      401,
      'invalid_api_key',
    );
  });

  it('refuses API keys on JWT-only project endpoints', async () => {
    const tenant = await createTenant(t);
    const h = keyHeader(tenant.apiKey);
    const body = { organizationId: tenant.orgId, name: 'x' };
    expectError(
      await t.inject({ method: 'POST', url: '/v1/projects', headers: h, payload: body }),
      403,
      'authorization_error',
    );
    expectError(
      await t.inject({ method: 'PUT', url: `/v1/projects/${tenant.projectId}`, headers: h, payload: body }),
      403,
      'authorization_error',
    );
    expectError(
      await t.inject({
        method: 'DELETE',
        url: `/v1/projects/${tenant.projectId}?organizationId=${tenant.orgId}`,
        headers: h,
      }),
      403,
      'authorization_error',
    );
    expectError(
      await t.inject({
        method: 'POST',
        url: `/v1/projects/${tenant.projectId}/regenerate-key`,
        headers: h,
        payload: body,
      }),
      403,
      'authorization_error',
    );
  });

  it('isolates tenants: another organization cannot read or change projects', async () => {
    const a = await createTenant(t);
    const b = await createTenant(t);
    expectError(
      await t.inject({ method: 'GET', url: `/v1/projects/${a.projectId}`, headers: keyHeader(b.apiKey) }),
      403,
      'authorization_error',
    );
    expectError(
      await t.inject({ method: 'GET', url: `/v1/projects/${a.projectId}`, headers: bearer(b.token) }),
      403,
      'authorization_error',
    );
    expectError(
      await t.inject({ method: 'GET', url: `/v1/projects/${UNKNOWN}`, headers: bearer(b.token) }),
      404,
      'not_found',
    );
    expectError(
      await t.inject({
        method: 'GET',
        url: `/v1/projects?organizationId=${a.orgId}`,
        headers: bearer(b.token),
      }),
      403,
      'authorization_error',
    );
    expectError(
      await t.inject({
        method: 'GET',
        url: `/v1/projects?organizationId=${a.orgId}`,
        headers: keyHeader(b.apiKey),
      }),
      403,
      'authorization_error',
    );
    // b names a's organization: not a member.
    const asB = { organizationId: a.orgId, name: 'pwned' };
    expectError(
      await t.inject({ method: 'POST', url: '/v1/projects', headers: bearer(b.token), payload: asB }),
      403,
      'authorization_error',
    );
    expectError(
      await t.inject({
        method: 'PUT',
        url: `/v1/projects/${a.projectId}`,
        headers: bearer(b.token),
        payload: asB,
      }),
      403,
      'authorization_error',
    );
    // b names its own organization but a's project: not found there.
    const own = { organizationId: b.orgId, name: 'pwned' };
    expectError(
      await t.inject({
        method: 'PUT',
        url: `/v1/projects/${a.projectId}`,
        headers: bearer(b.token),
        payload: own,
      }),
      404,
      'not_found',
    );
    expectError(
      await t.inject({
        method: 'POST',
        url: `/v1/projects/${a.projectId}/regenerate-key`,
        headers: bearer(b.token),
        payload: { organizationId: b.orgId },
      }),
      404,
      'not_found',
    );
    expectError(
      await t.inject({
        method: 'DELETE',
        url: `/v1/projects/${a.projectId}?organizationId=${b.orgId}`,
        headers: bearer(b.token),
      }),
      404,
      'not_found',
    );
    const still = await t.inject({ method: 'GET', url: '/v1/projects', headers: keyHeader(a.apiKey) });
    expect(still.json().data[0].name).toBe('Main');
  });
});

describe('writes under an organization lock, queued in the process first', () => {
  it('runs one at a time per organization, other organizations alongside, and goes on after a failure', async () => {
    const events: string[] = [];
    let openFirst = () => {};
    const firstHeld = new Promise<void>((resolve) => {
      openFirst = resolve;
    });
    const first = inOrganizationQueue('org-q', async () => {
      events.push('first start');
      await firstHeld;
      events.push('first end');
      throw new Error('first failed');
    });
    const second = inOrganizationQueue('org-q', async () => {
      events.push('second start');
      return 2;
    });
    const other = inOrganizationQueue('org-other', async () => {
      events.push('other org');
      return 3;
    });
    expect(await other).toBe(3);
    // The second write of org-q has not started: it waits for the first, without a connection.
    expect(events).toEqual(['first start', 'other org']);
    openFirst();
    await expect(first).rejects.toThrow('first failed');
    expect(await second).toBe(2);
    expect(events).toEqual(['first start', 'other org', 'first end', 'second start']);
  });
});

describe('an organization deleted while one of its writes waits', () => {
  it('answers 404 to project creation, key creation and key regeneration, not a crash', async () => {
    const tenants = [await createTenant(t), await createTenant(t), await createTenant(t)];
    const original = t.ctx.scope;
    // The caller's membership is checked, then the organization is deleted before the write runs.
    t.ctx.scope = async (req, explicit) => {
      const scope = await original(req, explicit);
      await t.store.db.deleteFrom('organizations').where('id', '=', scope.organizationId).execute();
      return scope;
    };
    try {
      for (const [i, [url, payload]] of (
        [
          ['/v1/projects', () => ({ name: 'Late' })],
          ['/v1/api-keys', (projectId: string) => ({ name: 'late', projectId })],
          ['/v1/projects/:id/regenerate-key', () => ({})],
        ] as const
      ).entries()) {
        const tenant = tenants[i]!;
        const res = await t.inject({
          method: 'POST',
          url: url.replace(':id', tenant.projectId),
          headers: { ...bearer(tenant.token), 'x-organization-id': tenant.orgId },
          payload: payload(tenant.projectId),
        });
        expectError(res, 404, 'not_found');
        expect(res.json().error.message, url).toBe('Organization not found');
        const left = await t.store.db
          .selectFrom('projects')
          .select('id')
          .where('organization_id', '=', tenant.orgId)
          .execute();
        expect(left, url).toEqual([]);
      }
    } finally {
      t.ctx.scope = original;
    }
  });
});
