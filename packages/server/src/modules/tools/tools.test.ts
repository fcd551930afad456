import { describe, expect, it } from 'vitest';
import { useTestApp } from '../../../test/fixture.js';
import { asUser, createTenant, expectError, keyHeader, type Tenant } from '../../../test/helpers.js';
import type { ServiceEvent } from '../../events/bus.js';

type HeaderMap = Record<string, string>;

const t = useTestApp();

/** Events of one organization published while `fn` runs. */
async function eventsOf(orgId: string, fn: () => Promise<unknown>): Promise<ServiceEvent[]> {
  const seen: ServiceEvent[] = [];
  const off = t.ctx.events.subscribe((e) => {
    if (e.organizationId === orgId) seen.push(e);
  });
  try {
    await fn();
  } finally {
    off();
  }
  return seen;
}

const transfer = {
  name: 'transfer_funds',
  description: 'Moves money',
  parameters: [
    { name: 'amount', type: 'number', required: true, minimum: 1, maximum: 1000 },
    { name: 'currency', type: 'string', enum: ['USD', 'EUR'] },
    { name: 'iban', type: 'string', pattern: '^[A-Z]{2}[0-9]{2}' },
    { name: 'memo', type: 'string', description: 'free text' },
  ],
};

const register = (tenant: Tenant, tools: unknown[], headers: HeaderMap = keyHeader(tenant.apiKey)) =>
  t.inject({ method: 'POST', url: '/v1/tools/register', headers, payload: { tools } });
const sync = (tenant: Tenant, tools: unknown[], headers: HeaderMap = keyHeader(tenant.apiKey)) =>
  t.inject({ method: 'POST', url: '/v1/tools/sync', headers, payload: { tools } });
const getTool = (name: string, headers: Record<string, string>) =>
  t.inject({ method: 'GET', url: `/v1/tools/${encodeURIComponent(name)}`, headers });
const getPolicy = (name: string, headers: Record<string, string>) =>
  t.inject({ method: 'GET', url: `/v1/policies/${encodeURIComponent(name)}`, headers });

describe('POST /v1/tools/register', () => {
  it('stores the tools with every declared field and generates a starter policy per new tool', async () => {
    const tenant = await createTenant(t);
    const h = keyHeader(tenant.apiKey);
    let res!: Awaited<ReturnType<typeof register>>;
    const events = await eventsOf(tenant.orgId, async () => {
      res = await register(tenant, [transfer, { name: 'ping', parameters: [] }]);
    });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({ success: true, registered_tools: ['transfer_funds', 'ping'] });
    expect(res.json().message).toContain('generated 2 starter policies');
    expect(events).toEqual([
      {
        organizationId: tenant.orgId,
        type: 'policy.created',
        data: { toolName: 'transfer_funds', projectId: tenant.projectId },
      },
      {
        organizationId: tenant.orgId,
        type: 'policy.created',
        data: { toolName: 'ping', projectId: tenant.projectId },
      },
    ]);

    const tool = (await getTool('transfer_funds', h)).json();
    expect(tool).toMatchObject({
      name: 'transfer_funds',
      description: 'Moves money',
      arguments: transfer.parameters,
    });
    expect(tool.createdAt).toBe(tool.updatedAt);
    expect((await getTool('ping', h)).json()).toMatchObject({ description: null, arguments: [] });

    const policy = (await getPolicy('transfer_funds', h)).json();
    expect(policy).toMatchObject({ version: 1, isActive: true, mode: 'deterministic', llmConfig: null });
    expect(policy.constraints).toEqual([
      { argumentName: 'amount', enabled: true, required: true, minimum: 1, maximum: 1000 },
      { argumentName: 'currency', enabled: true, enum: ['USD', 'EUR'] },
      { argumentName: 'iban', enabled: true, regex: '^[A-Z]{2}[0-9]{2}' },
    ]);
    expect((await getPolicy('ping', h)).json().constraints).toEqual([]);
  });

  it('skips unusable declarations, says so in the message, and still registers', async () => {
    const tenant = await createTenant(t);
    const res = await register(tenant, [
      {
        name: 'search',
        parameters: [
          { name: 'q', type: 'string', required: true, pattern: '(unclosed' },
          { name: 'slug', type: 'string', pattern: `^${'a'.repeat(300)}$` },
          { name: 'limit', type: 'string', minimum: 1 },
        ],
      },
    ]);
    expect(res.statusCode).toBe(200);
    const message = res.json().message as string;
    expect(message).toContain('Starter policy for "search":');
    expect(message).toContain('"q": pattern');
    expect(message).toContain('"slug": pattern');
    expect(message).toContain('"limit": minimum');
    const policy = (await getPolicy('search', keyHeader(tenant.apiKey))).json();
    expect(policy.constraints).toEqual([{ argumentName: 'q', enabled: true, required: true }]);
    // The tool keeps what was declared, usable or not.
    expect((await getTool('search', keyHeader(tenant.apiKey))).json().arguments[0].pattern).toBe('(unclosed');
  });

  it('updates an existing tool without touching its policy, and never revives a deleted one', async () => {
    const tenant = await createTenant(t);
    const h = keyHeader(tenant.apiKey);
    await register(tenant, [transfer]);
    const before = (await getTool('transfer_funds', h)).json();
    const events = await eventsOf(tenant.orgId, async () => {
      const res = await register(tenant, [
        { name: 'transfer_funds', parameters: [{ name: 'x', type: 'boolean' }] },
      ]);
      expect(res.json().message).toContain('generated 0 starter policies');
    });
    expect(events).toEqual([]);
    const after = (await getTool('transfer_funds', h)).json();
    expect(after).toMatchObject({ description: null, arguments: [{ name: 'x', type: 'boolean' }] });
    expect(after.createdAt).toBe(before.createdAt);
    expect((await getPolicy('transfer_funds', h)).json().constraints).toHaveLength(3);

    await t.inject({ method: 'DELETE', url: '/v1/policies/transfer_funds', headers: h });
    await register(tenant, [transfer]);
    expectError(await getPolicy('transfer_funds', h), 404, 'not_found');
  });

  it('keeps a policy written before the tool was registered', async () => {
    const tenant = await createTenant(t);
    const h = keyHeader(tenant.apiKey);
    await t.inject({
      method: 'POST',
      url: '/v1/policies',
      headers: h,
      payload: { toolName: 'transfer_funds', constraints: [{ argumentName: 'amount', maximum: 5 }] },
    });
    const res = await register(tenant, [transfer]);
    expect(res.json().message).toContain('(1 new); generated 0 starter policies');
    const policy = (await getPolicy('transfer_funds', h)).json();
    expect(policy.constraints).toEqual([{ argumentName: 'amount', enabled: true, maximum: 5 }]);
  });

  it('reports a null projectId in events when a user registers', async () => {
    const tenant = await createTenant(t);
    const events = await eventsOf(tenant.orgId, () => register(tenant, [transfer], asUser(tenant)));
    expect(events.map((e) => e.data)).toEqual([{ toolName: 'transfer_funds', projectId: null }]);
  });

  it('rejects bad bodies with 400 validation_failed and writes nothing', async () => {
    const tenant = await createTenant(t);
    const h = keyHeader(tenant.apiKey);
    const bad: object[] = [
      {},
      { tools: [] },
      { tools: [{ name: '', parameters: [] }] },
      { tools: [{ name: 'x'.repeat(201), parameters: [] }] },
      { tools: [{ name: 'a' }] },
      { tools: [{ name: 'a', parameters: [{ name: 'p', type: 'date' }] }] },
      { tools: [{ name: 'a', parameters: [{ name: 'p', type: 'number', minimum: '1' }] }] },
      { tools: [{ name: 'a', parameters: [{ name: 'p', type: 'string', format: 'email' }] }] },
      { tools: [{ name: 'a', parameters: [], extra: true }] },
      { tools: [{ name: 'a', parameters: [] }], extra: true },
      // Names may not hold control characters (U+0000-U+001F).
      { tools: [{ name: 'line\nbreak', parameters: [] }] },
      { tools: [{ name: 'a', parameters: [{ name: 'tab\there', type: 'string' }] }] },
    ];
    for (const payload of bad) {
      const res = await t.inject({ method: 'POST', url: '/v1/tools/register', headers: h, payload });
      expectError(res, 400, 'validation_failed');
    }
    expect((await t.inject({ method: 'GET', url: '/v1/tools', headers: h })).json().data).toEqual([]);
  });

  it('rejects duplicate tool or argument names, naming them, and writes nothing', async () => {
    const tenant = await createTenant(t);
    const h = keyHeader(tenant.apiKey);
    const dupTools = await register(tenant, [transfer, { name: 'ok', parameters: [] }, transfer]);
    expectError(dupTools, 400, 'validation_failed');
    expect(dupTools.json().error.message).toContain('duplicate tool names: "transfer_funds"');
    const dupArgs = await register(tenant, [
      { name: 'ok', parameters: [] },
      {
        name: 'twice',
        parameters: [
          { name: 'a', type: 'string' },
          { name: 'a', type: 'number' },
        ],
      },
    ]);
    expectError(dupArgs, 400, 'validation_failed');
    expect(dupArgs.json().error.message).toContain('tool "twice" has duplicate argument names: "a"');
    expect((await t.inject({ method: 'GET', url: '/v1/tools', headers: h })).json().data).toEqual([]);
    expect((await t.inject({ method: 'GET', url: '/v1/policies', headers: h })).json().data).toEqual([]);
  });

  it('needs authentication', async () => {
    const res = await t.inject({ method: 'POST', url: '/v1/tools/register', payload: { tools: [transfer] } });
    expectError(res, 401, 'unauthorized');
  });
});

describe('POST /v1/tools/sync', () => {
  it('reports created and updated tools and the starter policies generated', async () => {
    const tenant = await createTenant(t);
    const h = keyHeader(tenant.apiKey);
    await sync(tenant, [{ name: 'read_file', arguments: [{ name: 'path', type: 'string' }] }]);
    const res = await sync(tenant, [
      {
        name: 'read_file',
        description: 'Reads',
        arguments: [{ name: 'path', type: 'string', required: true }],
      },
      {
        name: 'write_file',
        arguments: [{ name: 'path', type: 'string', required: true, description: 'where' }],
      },
    ]);
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({
      synced: 2,
      tools: [
        { name: 'read_file', status: 'updated' },
        { name: 'write_file', status: 'created' },
      ],
      policiesGenerated: 1,
    });
    expect((await getTool('read_file', h)).json()).toMatchObject({
      description: 'Reads',
      arguments: [{ name: 'path', type: 'string', required: true }],
    });
    expect((await getPolicy('write_file', h)).json().constraints).toEqual([
      { argumentName: 'path', enabled: true, required: true },
    ]);
    // Created on the first sync, when `path` was optional: nothing to enforce.
    expect((await getPolicy('read_file', h)).json().constraints).toEqual([]);
  });

  it('rejects register-only fields, duplicates and empty lists with 400', async () => {
    const tenant = await createTenant(t);
    expectError(
      await sync(tenant, [{ name: 'a', arguments: [{ name: 'p', type: 'string', enum: ['x'] }] }]),
      400,
      'validation_failed',
    );
    expectError(await sync(tenant, [{ name: 'a', parameters: [] }]), 400, 'validation_failed');
    expectError(await sync(tenant, []), 400, 'validation_failed');
    const dup = await sync(tenant, [
      { name: 'a', arguments: [] },
      { name: 'a', arguments: [] },
    ]);
    expectError(dup, 400, 'validation_failed');
    expect(dup.json().error.message).toContain('"a"');
    const list = await t.inject({ method: 'GET', url: '/v1/tools', headers: keyHeader(tenant.apiKey) });
    expect(list.json().data).toEqual([]);
  });
});

describe('GET /v1/tools and /v1/tools/:name', () => {
  it('lists the tools by name and reads one; an unknown name is 404 naming it', async () => {
    const tenant = await createTenant(t);
    await sync(tenant, [
      { name: 'zeta', arguments: [] },
      { name: 'alpha', arguments: [{ name: 'n', type: 'number', description: null, required: null }] },
    ]);
    const list = await t.inject({ method: 'GET', url: '/v1/tools', headers: asUser(tenant) });
    expect(list.statusCode).toBe(200);
    expect(list.json().data.map((x: { name: string }) => x.name)).toEqual(['alpha', 'zeta']);
    // null means "not set": it is not stored.
    expect(list.json().data[0].arguments).toEqual([{ name: 'n', type: 'number' }]);
    const one = await getTool('alpha', asUser(tenant));
    expect(Object.keys(one.json()).sort()).toEqual([
      'arguments',
      'createdAt',
      'description',
      'name',
      'updatedAt',
    ]);
    const missing = await getTool('nope', keyHeader(tenant.apiKey));
    expectError(missing, 404, 'not_found');
    expect(missing.json().error.message).toContain('"nope"');
  });

  it('needs X-Organization-Id for users', async () => {
    const tenant = await createTenant(t);
    const res = await t.inject({
      method: 'GET',
      url: '/v1/tools',
      headers: { authorization: `Bearer ${tenant.token}` },
    });
    expectError(res, 400, 'missing_organization');
  });
});

describe('DELETE /v1/tools/:name', () => {
  it('deletes the tool and its policy together, announces it and drops the cached policy', async () => {
    const tenant = await createTenant(t);
    const h = keyHeader(tenant.apiKey);
    await register(tenant, [transfer, { name: 'bare', parameters: [] }]);
    expect((await t.ctx.policies.get(tenant.orgId, 'transfer_funds'))?.version).toBe(1);
    const events = await eventsOf(tenant.orgId, async () => {
      const res = await t.inject({ method: 'DELETE', url: '/v1/tools/transfer_funds', headers: h });
      expect(res.statusCode).toBe(200);
      expect(res.json()).toEqual({ success: true });
    });
    expect(events).toEqual([
      {
        organizationId: tenant.orgId,
        type: 'policy.deleted',
        data: { toolName: 'transfer_funds', projectId: tenant.projectId },
      },
    ]);
    expect(await t.ctx.policies.get(tenant.orgId, 'transfer_funds')).toBeNull();
    expectError(await getTool('transfer_funds', h), 404, 'not_found');
    expectError(await getPolicy('transfer_funds', h), 404, 'not_found');
    expect((await getTool('bare', h)).statusCode).toBe(200);

    const again = await t.inject({ method: 'DELETE', url: '/v1/tools/transfer_funds', headers: h });
    expectError(again, 404, 'not_found');
    expect(again.json().error.message).toContain('"transfer_funds"');
  });

  it('publishes nothing when the tool had no policy', async () => {
    const tenant = await createTenant(t);
    const h = keyHeader(tenant.apiKey);
    await register(tenant, [transfer]);
    await t.inject({ method: 'DELETE', url: '/v1/policies/transfer_funds', headers: h });
    const events = await eventsOf(tenant.orgId, async () => {
      const res = await t.inject({
        method: 'DELETE',
        url: '/v1/tools/transfer_funds',
        headers: asUser(tenant),
      });
      expect(res.statusCode).toBe(200);
    });
    expect(events).toEqual([]);
  });
});

describe('tenant isolation', () => {
  it("another organization's key and user can neither read nor change the tools", async () => {
    const a = await createTenant(t);
    const b = await createTenant(t);
    await register(a, [transfer]);
    const aTool = (await getTool('transfer_funds', keyHeader(a.apiKey))).json();

    for (const h of [keyHeader(b.apiKey), asUser(b)]) {
      expect((await t.inject({ method: 'GET', url: '/v1/tools', headers: h })).json().data).toEqual([]);
      expectError(await getTool('transfer_funds', h), 404, 'not_found');
      expectError(
        await t.inject({ method: 'DELETE', url: '/v1/tools/transfer_funds', headers: h }),
        404,
        'not_found',
      );
    }
    // b's user naming a's organization is not a member there.
    const intrude = { authorization: `Bearer ${b.token}`, 'x-organization-id': a.orgId };
    expectError(await getTool('transfer_funds', intrude), 403, 'authorization_error');
    expectError(
      await t.inject({ method: 'DELETE', url: '/v1/tools/transfer_funds', headers: intrude }),
      403,
      'authorization_error',
    );
    expectError(await register(a, [{ name: 'x', parameters: [] }], intrude), 403, 'authorization_error');

    // The same name in b is b's own tool with its own starter policy.
    const own = await sync(b, [{ name: 'transfer_funds', arguments: [] }]);
    expect(own.json()).toMatchObject({
      tools: [{ name: 'transfer_funds', status: 'created' }],
      policiesGenerated: 1,
    });
    await t.inject({ method: 'DELETE', url: '/v1/tools/transfer_funds', headers: keyHeader(b.apiKey) });

    expect((await getTool('transfer_funds', keyHeader(a.apiKey))).json()).toEqual(aTool);
    expect((await getPolicy('transfer_funds', keyHeader(a.apiKey))).json().constraints).toHaveLength(3);
    const aList = await t.inject({ method: 'GET', url: '/v1/tools', headers: keyHeader(a.apiKey) });
    expect(aList.json().data.map((x: { name: string }) => x.name)).toEqual(['transfer_funds']);
  });
});
