import { afterAll, describe, expect, it } from 'vitest';
import { useTestApp } from '../../../test/fixture.js';
import {
  ADMIN_TOKEN,
  asUser,
  bearer,
  createTenant,
  expectError,
  keyHeader,
  type Tenant,
  type TestApp,
} from '../../../test/helpers.js';
import { signIn } from '../../../test/revocations.js';
import { dropRedisKeys, redisPrefix, TEST_REDIS_URL } from '../../../test/streams.js';
import type { Clock } from '../../lib/clock.js';

// A fixed clock keeps every rate-limit window from rolling over in the middle of a test.
const clock: Clock = { now: () => new Date('2026-11-21T12:00:10.000Z') };

const VALIDATE = { tool_name: 'read', arguments: { path: '/x' } };
const LOGGED = {
  tool_name: 'read',
  arguments: {},
  decision: 'allow',
  mode: 'deterministic',
  latency_ms: 1,
  source: 'client',
};

const validate = (t: TestApp, key: string) =>
  t.inject({ method: 'POST', url: '/v1/tools/validate', headers: keyHeader(key), payload: VALIDATE });
const logDecision = (t: TestApp, key: string) =>
  t.inject({ method: 'POST', url: '/v1/decisions', headers: keyHeader(key), payload: LOGGED });

async function newProject(t: TestApp, tenant: Tenant, name: string): Promise<{ id: string; key: string }> {
  const res = await t.inject({
    method: 'POST',
    url: '/v1/projects',
    headers: asUser(tenant),
    payload: { organizationId: tenant.orgId, name },
  });
  if (res.statusCode !== 201) throw new Error(`project create failed: ${res.body}`);
  return { id: res.json()._id, key: res.json().apiKey };
}

async function scopedKey(t: TestApp, tenant: Tenant, scopes: string[]): Promise<string> {
  const res = await t.inject({
    method: 'POST',
    url: '/v1/api-keys',
    headers: asUser(tenant),
    payload: { name: scopes.join('+'), projectId: tenant.projectId, scopes },
  });
  if (res.statusCode !== 201) throw new Error(`key create failed: ${res.body}`);
  return res.json().key;
}

describe('project and key lifecycle', () => {
  const t = useTestApp({}, { clock });

  it('a deleted project takes its keys and upstreams with it; a project of the same name starts empty', async () => {
    const tenant = await createTenant(t);
    const doomed = await newProject(t, tenant, 'Doomed');
    expect((await validate(t, doomed.key)).statusCode).toBe(200);
    const upstream = await t.inject({
      method: 'POST',
      url: '/v1/mcp/upstreams',
      headers: keyHeader(doomed.key),
      payload: { name: 'files', slug: 'files', url: 'http://127.0.0.1:9/mcp', projectId: doomed.id },
    });
    expect(upstream.statusCode).toBe(201);

    const del = await t.inject({
      method: 'DELETE',
      url: `/v1/projects/${doomed.id}`,
      headers: asUser(tenant),
    });
    expect(del.statusCode).toBe(200);

    expectError(await validate(t, doomed.key), 401, 'invalid_api_key');
    expectError(await logDecision(t, doomed.key), 401, 'invalid_api_key');
    expectError(
      await t.inject({
        method: 'POST',
        url: '/v1/mcp/files',
        headers: { ...keyHeader(doomed.key), accept: 'application/json, text/event-stream' },
        payload: { jsonrpc: '2.0', id: 1, method: 'ping' },
      }),
      401,
      'invalid_api_key',
    );

    const again = await newProject(t, tenant, 'Doomed');
    expect(again.id).not.toBe(doomed.id);
    const list = await t.inject({ method: 'GET', url: '/v1/mcp/upstreams', headers: keyHeader(again.key) });
    expect(list.statusCode).toBe(200);
    expect(JSON.stringify(list.json())).not.toContain(upstream.json().id);
    const keys = await t.inject({ method: 'GET', url: '/v1/api-keys', headers: keyHeader(again.key) });
    expect(keys.json().data).toHaveLength(1);
    // The other project's key is untouched.
    expect((await validate(t, tenant.apiKey)).statusCode).toBe(200);
  });

  it('a regenerated key stops at once, even cached, and its replacement works', async () => {
    const tenant = await createTenant(t);
    expect((await validate(t, tenant.apiKey)).statusCode).toBe(200);
    const res = await t.inject({
      method: 'POST',
      url: `/v1/projects/${tenant.projectId}/regenerate-key`,
      headers: asUser(tenant),
    });
    expect(res.statusCode).toBe(200);
    expectError(await validate(t, tenant.apiKey), 401, 'invalid_api_key');
    expectError(await logDecision(t, tenant.apiKey), 401, 'invalid_api_key');
    expect((await validate(t, res.json().apiKey)).statusCode).toBe(200);
  });

  it('the owner cannot be locked out by deleting the last project; the organization stays theirs', async () => {
    const tenant = await createTenant(t);
    const del = await t.inject({
      method: 'DELETE',
      url: `/v1/projects/${tenant.projectId}`,
      headers: asUser(tenant),
    });
    expect(del.statusCode).toBe(200);
    const list = await t.inject({
      method: 'GET',
      url: `/v1/projects?organizationId=${tenant.orgId}`,
      headers: bearer(tenant.token),
    });
    expect(list.json().data).toEqual([]);
    const created = await newProject(t, tenant, 'Fresh');
    const got = await t.inject({ method: 'GET', url: `/v1/projects/${created.id}`, headers: asUser(tenant) });
    expect(got.json().isDefault).toBe(true);
  });

  it('a member removed while signed in is refused at once, reads and writes alike', async () => {
    const tenant = await createTenant(t);
    const session = await signIn(t, tenant.userId);
    const headers = {
      cookie: session.cookie,
      'x-csrf-token': session.csrf,
      'x-organization-id': tenant.orgId,
    };
    const write = () =>
      t.inject({ method: 'POST', url: '/v1/projects', headers, payload: { name: 'While member' } });
    expect((await write()).statusCode).toBe(201);
    await t.store.db
      .deleteFrom('memberships')
      .where('organization_id', '=', tenant.orgId)
      .where('user_id', '=', tenant.userId)
      .execute();
    expectError(await write(), 403, 'authorization_error');
    expectError(await t.inject({ method: 'GET', url: '/v1/api-keys', headers }), 403, 'authorization_error');
    expectError(
      await t.inject({
        method: 'PUT',
        url: `/v1/organizations/${tenant.orgId}`,
        headers,
        payload: { name: 'x' },
      }),
      403,
      'authorization_error',
    );
    expectError(
      await t.inject({ method: 'DELETE', url: `/v1/organizations/${tenant.orgId}`, headers }),
      403,
      'authorization_error',
    );
  });

  it('keys with only approver or reviewer scopes change nothing outside what they name', async () => {
    const tenant = await createTenant(t);
    const other = await createTenant(t);
    const doc = (await t.inject({ method: 'GET', url: '/openapi.json' })).json() as {
      paths: Record<string, Record<string, unknown>>;
    };
    const id = '00000000-0000-7000-8000-000000000000';
    for (const scopes of [['approvals:resolve'], ['policy-drafts:approve']]) {
      const key = await scopedKey(t, tenant, scopes);
      for (const [path, ops] of Object.entries(doc.paths)) {
        for (const method of Object.keys(ops)) {
          if (!['post', 'put', 'patch', 'delete'].includes(method)) continue;
          const url = path.replace(/\{[^}]+\}/g, id);
          const res = await t.inject({
            method: method.toUpperCase() as 'POST',
            url,
            headers: { ...keyHeader(key), 'content-type': 'application/json' },
            payload: JSON.stringify({ organizationId: other.orgId, projectId: other.projectId }),
          });
          expect(res.statusCode, `${method} ${path} ${res.body}`).toBeLessThan(500);
          expect(res.statusCode, `${method} ${path} ${res.body}`).toBeGreaterThanOrEqual(400);
        }
      }
    }
    // Nothing of either tenant changed: their keys still work, no project or key was added.
    expect((await validate(t, tenant.apiKey)).statusCode).toBe(200);
    expect((await validate(t, other.apiKey)).statusCode).toBe(200);
    const keys = await t.inject({ method: 'GET', url: '/v1/api-keys', headers: asUser(tenant) });
    expect(keys.json().data).toHaveLength(3);
  });
});

describe('plans and organizations across two instances', () => {
  const prefix = redisPrefix();
  afterAll(async () => dropRedisKeys(prefix));
  const config = { redisUrl: TEST_REDIS_URL, redisPrefix: prefix };
  const a = useTestApp(config, { clock });
  const b = useTestApp(config, () => ({ database: a.database, clock }));

  const setTier = async (orgId: string, tier: string) => {
    const res = await a.inject({
      method: 'PATCH',
      url: `/v1/admin/organizations/${orgId}`,
      headers: bearer(ADMIN_TOKEN),
      payload: { tier },
    });
    expect(res.statusCode).toBe(200);
  };

  it('a tier changed on A sets the validation limit on B at once (free, team, free)', async () => {
    const tenant = await createTenant(a);
    const first = await validate(b, tenant.apiKey);
    expect(first.headers['x-ratelimit-limit']).toBe('60');
    await setTier(tenant.orgId, 'team');
    const team = await validate(b, tenant.apiKey);
    expect(team.headers['x-ratelimit-limit']).toBe('600');
    // One window shared by both instances.
    expect(team.headers['x-ratelimit-remaining']).toBe('598');
    await setTier(tenant.orgId, 'free');
    const free = await validate(a, tenant.apiKey);
    expect(free.headers['x-ratelimit-limit']).toBe('60');
    expect(free.headers['x-ratelimit-remaining']).toBe('57');
  });

  it('an organization deleted on A refuses its keys on B at once, and its ids answer 404', async () => {
    const tenant = await createTenant(a);
    expect((await validate(b, tenant.apiKey)).statusCode).toBe(200);
    const del = await a.inject({
      method: 'DELETE',
      url: `/v1/organizations/${tenant.orgId}`,
      headers: bearer(tenant.token),
    });
    expect(del.statusCode).toBe(200);
    expectError(await validate(b, tenant.apiKey), 401, 'invalid_api_key');
    expectError(await logDecision(b, tenant.apiKey), 401, 'invalid_api_key');
    expectError(
      await b.inject({
        method: 'POST',
        url: '/v1/projects',
        headers: bearer(tenant.token),
        payload: { organizationId: tenant.orgId, name: 'Late' },
      }),
      403,
      'authorization_error',
    );
    expectError(
      await b.inject({
        method: 'GET',
        url: `/v1/organizations/${tenant.orgId}`,
        headers: bearer(tenant.token),
      }),
      404,
      'not_found',
    );
  });
});

async function setTier(t: TestApp, orgId: string, tier: string): Promise<void> {
  const res = await t.inject({
    method: 'PATCH',
    url: `/v1/admin/organizations/${orgId}`,
    headers: bearer(ADMIN_TOKEN),
    payload: { tier },
  });
  expect(res.statusCode).toBe(200);
}

describe('requests in flight while their project or organization goes', () => {
  const t = useTestApp({}, { clock });

  /**
   * Sends requests that pass authentication and then wait until `meanwhile` has run: the
   * credential was valid when the request arrived, and is gone (or its tenant is) when it acts.
   */
  async function inFlight(
    sends: (() => Promise<{ statusCode: number; body: string }>)[],
    meanwhile: () => Promise<void>,
  ) {
    const keys = t.ctx.keys;
    const original = keys.authenticate.bind(keys);
    let release!: () => void;
    const released = new Promise<void>((r) => {
      release = r;
    });
    let arrived = 0;
    keys.authenticate = async (key: string) => {
      const p = await original(key);
      arrived++;
      await released;
      return p;
    };
    try {
      const pending = sends.map((s) => s());
      while (arrived < sends.length) await new Promise((r) => setTimeout(r, 5));
      keys.authenticate = original;
      await meanwhile();
      release();
      return await Promise.all(pending);
    } finally {
      keys.authenticate = original;
      release();
    }
  }

  let slugs = 0;
  const probes = (key: string, projectId: string) => [
    () => validate(t, key),
    () => logDecision(t, key),
    () =>
      t.inject({
        method: 'POST',
        url: '/v1/policy-drafts',
        headers: keyHeader(key),
        payload: { name: 'D', projectId, createdByAgentId: 'a', rules: [] },
      }),
    () =>
      t.inject({
        method: 'POST',
        url: '/v1/mcp/upstreams',
        headers: keyHeader(key),
        payload: { name: 'u', slug: `u${++slugs}`, url: 'http://127.0.0.1:9/mcp', projectId },
      }),
    () =>
      t.inject({
        method: 'POST',
        url: '/v1/api-keys',
        headers: keyHeader(key),
        payload: { name: 'late', projectId },
      }),
    () =>
      t.inject({
        method: 'POST',
        url: '/v1/policies',
        headers: keyHeader(key),
        payload: { toolName: 'late', mode: 'deterministic', constraints: [] },
      }),
    () =>
      t.inject({
        method: 'POST',
        url: '/v1/approvals',
        headers: keyHeader(key),
        payload: { toolName: 'late', arguments: {} },
      }),
    () =>
      t.inject({
        method: 'POST',
        url: '/v1/mcp/upstreams',
        headers: keyHeader(key),
        payload: { name: 'o', slug: `o${++slugs}`, url: 'http://127.0.0.1:9/mcp' },
      }),
  ];

  it('a project deleted meanwhile: no 500, nothing left behind for the project', async () => {
    const tenant = await createTenant(t);
    await setTier(t, tenant.orgId, 'team');
    const doomed = await newProject(t, tenant, 'Doomed');
    const answers = await inFlight(probes(doomed.key, doomed.id), async () => {
      const del = await t.inject({
        method: 'DELETE',
        url: `/v1/projects/${doomed.id}`,
        headers: asUser(tenant),
      });
      expect(del.statusCode).toBe(200);
    });
    for (const a of answers) expect(a.statusCode, a.body).toBeLessThan(500);
    const keys = await t.store.db
      .selectFrom('api_keys')
      .select('id')
      .where('project_id', '=', doomed.id)
      .execute();
    expect(keys).toEqual([]);
  });

  const mint =
    (key: string, projectId: string, scopes = ['api']) =>
    () =>
      t.inject({
        method: 'POST',
        url: '/v1/api-keys',
        headers: keyHeader(key),
        payload: { name: 'heir', projectId, scopes },
      });

  const activeKeys = async (projectId: string) =>
    (
      await t.store.db
        .selectFrom('api_keys')
        .select('name')
        .where('project_id', '=', projectId)
        .where('is_revoked', '=', 0)
        .execute()
    ).map((r) => r.name);

  it('a key regenerated away meanwhile mints no key that outlives it', async () => {
    const tenant = await createTenant(t);
    let fresh = '';
    const [answer] = await inFlight([mint(tenant.apiKey, tenant.projectId)], async () => {
      const res = await t.inject({
        method: 'POST',
        url: `/v1/projects/${tenant.projectId}/regenerate-key`,
        headers: asUser(tenant),
      });
      expect(res.statusCode).toBe(200);
      fresh = res.json().apiKey;
    });
    expectError(answer as never, 401, 'invalid_api_key');
    expect(await activeKeys(tenant.projectId)).toEqual(['Project key']);
    expect((await validate(t, fresh)).statusCode).toBe(200);
  });

  it('a key revoked or deleted meanwhile mints no key that outlives it', async () => {
    for (const how of ['revoke', 'delete'] as const) {
      const tenant = await createTenant(t);
      const doomed = await scopedKey(t, tenant, ['api', 'approvals:resolve']);
      const doomedId = (await t.inject({ method: 'GET', url: '/v1/api-keys', headers: asUser(tenant) }))
        .json()
        .data.find((k: { name: string }) => k.name === 'api+approvals:resolve').id;
      const [answer] = await inFlight(
        [mint(doomed, tenant.projectId, ['api', 'approvals:resolve'])],
        async () => {
          const res = await t.inject({
            method: how === 'revoke' ? 'POST' : 'DELETE',
            url: how === 'revoke' ? `/v1/api-keys/${doomedId}/revoke` : `/v1/api-keys/${doomedId}`,
            headers: asUser(tenant),
          });
          expect(res.statusCode).toBe(200);
        },
      );
      expectError(answer as never, 401, 'invalid_api_key');
      expect(await activeKeys(tenant.projectId)).toEqual(['Project key']);
    }
  });

  it('an organization deleted meanwhile: its project and key writes answer 404', async () => {
    const tenant = await createTenant(t);
    await setTier(t, tenant.orgId, 'team');
    // Every write but validate and the decision log, which answer 503 (a decision that could not be
    // recorded): the organization-wide ones too (a policy, an approval, an upstream).
    const answers = await inFlight(probes(tenant.apiKey, tenant.projectId).slice(2), async () => {
      const del = await t.inject({
        method: 'DELETE',
        url: `/v1/organizations/${tenant.orgId}`,
        headers: bearer(tenant.token),
      });
      expect(del.statusCode).toBe(200);
    });
    expect(answers.map((a) => a.statusCode)).toEqual([404, 404, 404, 404, 404, 404]);
  });
});

describe('user requests whose access was checked before their organization went', () => {
  const t = useTestApp({}, { clock });

  it('answer 404, never 500', async () => {
    const tenant = await createTenant(t);
    const second = await newProject(t, tenant, 'Second');
    const keyId = (await t.inject({ method: 'GET', url: '/v1/api-keys', headers: asUser(tenant) })).json()
      .data[0].id;
    const ctx = t.ctx;
    const original = ctx.scope;
    let release!: () => void;
    const released = new Promise<void>((r) => {
      release = r;
    });
    let arrived = 0;
    ctx.scope = async (req, explicit) => {
      const s = await original(req, explicit);
      arrived++;
      await released;
      return s;
    };
    const h = asUser(tenant);
    const sends = [
      t.inject({ method: 'POST', url: '/v1/projects', headers: h, payload: { name: 'Late' } }),
      t.inject({ method: 'PUT', url: `/v1/projects/${second.id}`, headers: h, payload: { name: 'Renamed' } }),
      t.inject({ method: 'DELETE', url: `/v1/projects/${second.id}`, headers: h }),
      t.inject({ method: 'POST', url: `/v1/projects/${tenant.projectId}/regenerate-key`, headers: h }),
      t.inject({
        method: 'POST',
        url: '/v1/api-keys',
        headers: h,
        payload: { name: 'late', projectId: tenant.projectId },
      }),
      t.inject({ method: 'PATCH', url: `/v1/api-keys/${keyId}`, headers: h, payload: { name: 'renamed' } }),
      t.inject({ method: 'POST', url: `/v1/api-keys/${keyId}/revoke`, headers: h }),
      t.inject({ method: 'DELETE', url: `/v1/api-keys/${keyId}`, headers: h }),
      t.inject({ method: 'GET', url: '/v1/api-keys', headers: h }),
      t.inject({ method: 'GET', url: '/v1/projects', headers: h }),
    ];
    try {
      while (arrived < sends.length) await new Promise((r) => setTimeout(r, 5));
      ctx.scope = original;
      const del = await t.inject({
        method: 'DELETE',
        url: `/v1/organizations/${tenant.orgId}`,
        headers: bearer(tenant.token),
      });
      expect(del.statusCode).toBe(200);
    } finally {
      ctx.scope = original;
      release();
    }
    const answers = await Promise.all(sends);
    for (const a of answers) expect(a.statusCode, a.body).toBeLessThan(500);
  });
});
