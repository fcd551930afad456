import { CONSTRAINT_FIELDS } from '@svc/policy-engine';
import { describe, expect, it } from 'vitest';
import { useTestApp } from '../../../test/fixture.js';
import { asUser, createTenant, expectError, keyHeader, type Tenant } from '../../../test/helpers.js';
import type { ServiceEvent } from '../../events/bus.js';
import { ConstraintSchema } from './schemas.js';

type HeaderMap = Record<string, string>;

const t = useTestApp();

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

const amountCap = { argumentName: 'amount', minimum: 1, maximum: 100 };
const h = (tenant: Tenant) => keyHeader(tenant.apiKey);
const create = (tenant: Tenant, payload: object, headers: HeaderMap = h(tenant)) =>
  t.inject({ method: 'POST', url: '/v1/policies', headers, payload });
const update = (tenant: Tenant, name: string, payload: object, headers: HeaderMap = h(tenant)) =>
  t.inject({ method: 'PUT', url: `/v1/policies/${name}`, headers, payload });
const get = (tenant: Tenant, name: string, headers: HeaderMap = h(tenant)) =>
  t.inject({ method: 'GET', url: `/v1/policies/${name}`, headers });
const post = (tenant: Tenant, url: string, headers: HeaderMap = h(tenant), payload?: object) =>
  t.inject({ method: 'POST', url, headers, ...(payload ? { payload } : {}) });
const registerTool = (tenant: Tenant, name: string, parameters: object[]) =>
  t.inject({
    method: 'POST',
    url: '/v1/tools/sync',
    headers: h(tenant),
    payload: { tools: [{ name, arguments: parameters }] },
  });

describe('POST /v1/policies', () => {
  it('accepts exactly the constraint fields the engine understands', () => {
    expect(Object.keys(ConstraintSchema.properties).sort()).toEqual([...CONSTRAINT_FIELDS].sort());
  });

  it('creates version 1, active, deterministic by default, with quality, and announces it', async () => {
    const tenant = await createTenant(t);
    let res!: Awaited<ReturnType<typeof create>>;
    const events = await eventsOf(tenant.orgId, async () => {
      res = await create(tenant, { toolName: 'pay', constraints: [amountCap] });
    });
    expect(res.statusCode).toBe(201);
    const body = res.json();
    expect(body).toMatchObject({
      toolName: 'pay',
      version: 1,
      isActive: true,
      mode: 'deterministic',
      constraints: [{ ...amountCap, enabled: true }],
      sessionConstraints: null,
      llmConfig: null,
      quality: { valid: true, score: 100, issues: [] },
    });
    expect(body.createdAt).toBe(body.updatedAt);
    expect(body.tool).toBeUndefined();
    expect(events).toEqual([
      {
        organizationId: tenant.orgId,
        type: 'policy.created',
        data: { toolName: 'pay', projectId: tenant.projectId },
      },
    ]);
  });

  it('accepts every constraint field, aliases, session constraints and llm config, and keeps them', async () => {
    const tenant = await createTenant(t);
    const constraints = [
      { argumentName: 'n', enabled: false, greaterThan: 0, lessThan: 10, action: 'require_approval' },
      { argumentName: 'm', greaterThanOrEqual: 1, lessThanOrEqual: 5, required: true, notNull: true },
      {
        argumentName: 's',
        minLength: 1,
        maxLength: 9,
        notEnum: ['root'],
        notRegex: '\\.\\.',
        regex: '^[a-z]',
      },
      { argumentName: 'e', enum: ['a', 'b'] },
      { argumentName: 'list', minItems: 1, maxItems: 3 },
    ];
    const sessionConstraints = { maxCalls: 3, cumulativeLimits: [{ argumentName: 'm', maxValue: 10 }] };
    const llmConfig = {
      description: 'Only small refunds',
      exceptions: ['internal tests'],
      argumentInstructions: [{ argumentName: 'm', instruction: 'under 5' }],
      preferredModel: 'anthropic',
    };
    const res = await create(tenant, { toolName: 'all', constraints, sessionConstraints, llmConfig });
    expect(res.statusCode).toBe(201);
    const got = (await get(tenant, 'all')).json();
    expect(got.constraints).toEqual(constraints.map((c) => ({ enabled: true, ...c })));
    expect(got.sessionConstraints).toEqual(sessionConstraints);
    expect(got.llmConfig).toEqual(llmConfig);
    // llmConfig in deterministic mode is worth a notice, not an error.
    expect(res.json().quality.valid).toBe(true);
    expect(res.json().quality.issues.join(' ')).toContain('llmConfig');
  });

  it('always answers llmConfig.exceptions: [] when none were given, or stored', async () => {
    const tenant = await createTenant(t);
    const res = await create(tenant, { toolName: 'x', mode: 'llm', llmConfig: { description: 'x' } });
    expect(res.statusCode).toBe(201);
    expect(res.json().llmConfig).toEqual({ description: 'x', exceptions: [] });
    expect((await get(tenant, 'x')).json().llmConfig).toEqual({ description: 'x', exceptions: [] });
    const put = await update(tenant, 'x', {
      mode: 'llm',
      llmConfig: { description: 'y', exceptions: null, preferredModel: 'openai' },
    });
    expect(put.json().llmConfig).toEqual({ description: 'y', exceptions: [], preferredModel: 'openai' });
    // Written with it: the version's definition (what policy_hash covers) carries it too.
    const versions = (await get(tenant, 'x/versions')).json().data;
    expect(versions.map((v: { definition: { llmConfig: unknown } }) => v.definition.llmConfig)).toEqual([
      { description: 'y', exceptions: [], preferredModel: 'openai' },
      { description: 'x', exceptions: [] },
    ]);

    // A policy stored without it (before it was always written) is answered with it; what is
    // stored, and so its policy_hash, stays as it was.
    const stored = JSON.stringify({ description: 'old' });
    await t.store.db
      .updateTable('policies')
      .set({ llm_config: stored })
      .where('organization_id', '=', tenant.orgId)
      .where('tool_name', '=', 'x')
      .execute();
    t.ctx.policies.invalidate(tenant.orgId, 'x');
    expect((await get(tenant, 'x')).json().llmConfig).toEqual({ description: 'old', exceptions: [] });
    const list = (await t.inject({ method: 'GET', url: '/v1/policies', headers: h(tenant) })).json().data;
    expect(list[0].llmConfig).toEqual({ description: 'old', exceptions: [] });
    const loaded = await t.ctx.policies.get(tenant.orgId, 'x');
    expect(loaded?.definition.llmConfig).toEqual({ description: 'old' });
  });

  it('treats null as "not set" for optional fields', async () => {
    const tenant = await createTenant(t);
    const res = await create(tenant, {
      toolName: 'nulls',
      constraints: [{ argumentName: 'a', minimum: null, maximum: 3, regex: null }],
      sessionConstraints: null,
      llmConfig: null,
    });
    expect(res.statusCode).toBe(201);
    expect(res.json().constraints).toEqual([{ argumentName: 'a', enabled: true, maximum: 3 }]);
  });

  it('scores against the registered tool', async () => {
    const tenant = await createTenant(t);
    await registerTool(tenant, 'typed', [{ name: 'amount', type: 'string' }]);
    await t.inject({ method: 'DELETE', url: '/v1/policies/typed', headers: h(tenant) });
    const res = await create(tenant, {
      toolName: 'typed',
      constraints: [amountCap, { argumentName: 'ghost', required: true }],
    });
    const issues = res.json().quality.issues.join(' ');
    expect(issues).toContain('"ghost"');
    expect(issues).toContain('declares it as string');
    expect(res.json().quality.score).toBeLessThan(100);
  });

  it('answers 409 policy_exists when the tool has a policy', async () => {
    const tenant = await createTenant(t);
    await create(tenant, { toolName: 'pay' });
    const res = await create(tenant, { toolName: 'pay', constraints: [amountCap] });
    expectError(res, 409, 'policy_exists');
    expect(res.json().error.message).toContain('"pay"');
    expect((await get(tenant, 'pay')).json().constraints).toEqual([]);
  });

  it('refuses hard problems with 400 listing each one, and saves nothing', async () => {
    const tenant = await createTenant(t);
    const res = await create(tenant, {
      toolName: 'bad',
      constraints: [
        { argumentName: 'a', regex: 'x'.repeat(257) },
        { argumentName: 'b', notRegex: '(open' },
        { argumentName: 'c', minLength: -1 },
        { argumentName: '', required: true },
      ],
      sessionConstraints: { maxCalls: 1.5 },
    });
    expectError(res, 400, 'validation_failed');
    const message = res.json().error.message as string;
    expect(message).toContain('"bad"');
    expect(message).toContain('Constraint 1 on "a": regex');
    expect(message).toContain('257');
    expect(message).toContain('Constraint 2 on "b": notRegex');
    expect(message).toContain('Constraint 3 on "c": minLength');
    expect(message).toContain('Constraint 4 needs an argumentName');
    expect(message).toContain('maxCalls');
    expectError(await get(tenant, 'bad'), 404, 'not_found');
  });

  it('rejects malformed bodies and unknown fields with 400 validation_failed', async () => {
    const tenant = await createTenant(t);
    const bad: object[] = [
      {},
      { toolName: '' },
      { toolName: 'x'.repeat(201) },
      { toolName: 'a', mode: 'magic' },
      { toolName: 'a', extra: 1 },
      { toolName: 'a', constraints: [{ argumentName: 'x', between: [1, 2] }] },
      { toolName: 'a', constraints: [{ argumentName: 'x', minimum: '1' }] },
      { toolName: 'a', constraints: [{ argumentName: 'x', action: 'allow' }] },
      { toolName: 'a', sessionConstraints: { maxCalls: 1, perDay: 2 } },
      { toolName: 'a', llmConfig: { description: 'x', preferredModel: 'other' } },
      { toolName: 'a', llmConfig: { exceptions: [] } },
    ];
    for (const payload of bad) expectError(await create(tenant, payload), 400, 'validation_failed');
    expect((await t.inject({ method: 'GET', url: '/v1/policies', headers: h(tenant) })).json().data).toEqual(
      [],
    );
  });
});

describe('GET /v1/policies and /v1/policies/:toolName', () => {
  it('lists without tool or quality; reads one with its tool, or tool null when unregistered', async () => {
    const tenant = await createTenant(t);
    await registerTool(tenant, 'b_tool', [{ name: 'amount', type: 'number', required: true }]);
    await create(tenant, { toolName: 'a_loose', sessionConstraints: { maxCalls: 2 } });
    const list = await t.inject({ method: 'GET', url: '/v1/policies', headers: asUser(tenant) });
    expect(list.statusCode).toBe(200);
    const data = list.json().data;
    expect(data.map((p: { toolName: string }) => p.toolName)).toEqual(['a_loose', 'b_tool']);
    for (const p of data) {
      expect(p.quality).toBeUndefined();
      expect(p.tool).toBeUndefined();
    }

    const withTool = (await get(tenant, 'b_tool')).json();
    expect(withTool.tool).toMatchObject({ name: 'b_tool', arguments: [{ name: 'amount', type: 'number' }] });
    expect(withTool.quality).toBeUndefined();
    const loose = (await get(tenant, 'a_loose', asUser(tenant))).json();
    expect(loose).toMatchObject({ tool: null, sessionConstraints: { maxCalls: 2 } });
  });

  it('answers 404 naming the tool', async () => {
    const tenant = await createTenant(t);
    const res = await get(tenant, 'missing_tool');
    expectError(res, 404, 'not_found');
    expect(res.json().error.message).toContain('"missing_tool"');
  });

  it('marks the 404 of a tool without a policy (x-policy: none), which no other 404 carries', async () => {
    const tenant = await createTenant(t);
    await create(tenant, { toolName: 'pay', constraints: [amountCap] });
    const missing = await get(tenant, 'missing_tool');
    expectError(missing, 404, 'not_found');
    expect(missing.headers['x-policy']).toBe('none');
    expect((await get(tenant, 'missing_tool', asUser(tenant))).headers['x-policy']).toBe('none');
    expect((await get(tenant, 'pay')).headers['x-policy']).toBeUndefined();
    // Unknown routes (a base URL with an extra /v1) answer not_found too, but never with the marker.
    for (const url of ['/v1/v1/policies/pay', '/v1/v1/policies/missing_tool', '/api/v1/policies/pay']) {
      const res = await t.inject({ method: 'GET', url, headers: h(tenant) });
      expectError(res, 404, 'not_found');
      expect(res.headers['x-policy'], url).toBeUndefined();
    }
    // Nor do the policy's other 404s (its versions, a write to a missing policy).
    const version = await t.inject({ method: 'GET', url: '/v1/policies/pay/versions/9', headers: h(tenant) });
    expectError(version, 404, 'not_found');
    expect(version.headers['x-policy']).toBeUndefined();
    const put = await update(tenant, 'missing_tool', { constraints: [] });
    expectError(put, 404, 'not_found');
    expect(put.headers['x-policy']).toBeUndefined();
  });
});

describe('PUT /v1/policies/:toolName', () => {
  it('replaces the definition, bumps the version, keeps activity, and announces the version', async () => {
    const tenant = await createTenant(t);
    await create(tenant, { toolName: 'pay', constraints: [amountCap], sessionConstraints: { maxCalls: 1 } });
    await post(tenant, '/v1/policies/pay/deactivate');
    let res!: Awaited<ReturnType<typeof update>>;
    const events = await eventsOf(tenant.orgId, async () => {
      res = await update(tenant, 'pay', { mode: 'llm', llmConfig: { description: '' } });
    });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({
      toolName: 'pay',
      version: 2,
      isActive: false,
      mode: 'llm',
      constraints: [],
      sessionConstraints: null,
      llmConfig: { description: '' },
    });
    expect(res.json().quality.issues.join(' ')).toContain('empty description');
    expect(events).toEqual([
      {
        organizationId: tenant.orgId,
        type: 'policy.updated',
        data: { toolName: 'pay', projectId: tenant.projectId, version: 2 },
      },
    ]);
    const third = await update(tenant, 'pay', { constraints: [amountCap] }, asUser(tenant));
    expect(third.json()).toMatchObject({ version: 3, mode: 'deterministic', isActive: false });
    expect(third.json().updatedAt >= third.json().createdAt).toBe(true);
  });

  it('answers 404 for an unknown policy and 400 for hard problems, changing nothing', async () => {
    const tenant = await createTenant(t);
    expectError(await update(tenant, 'ghost', { constraints: [] }), 404, 'not_found');
    await create(tenant, { toolName: 'pay', constraints: [amountCap] });
    const res = await update(tenant, 'pay', { constraints: [{ argumentName: 'a', maxItems: -2 }] });
    expectError(res, 400, 'validation_failed');
    expect(res.json().error.message).toContain('maxItems');
    expectError(await update(tenant, 'pay', { toolName: 'pay' }), 400, 'validation_failed');
    expect((await get(tenant, 'pay')).json()).toMatchObject({
      version: 1,
      constraints: [{ argumentName: 'amount' }],
    });
  });

  it('invalidates the cached policy', async () => {
    const tenant = await createTenant(t);
    expect(await t.ctx.policies.get(tenant.orgId, 'pay')).toBeNull();
    await create(tenant, { toolName: 'pay', constraints: [amountCap] });
    const first = await t.ctx.policies.get(tenant.orgId, 'pay');
    expect(first?.version).toBe(1);
    await update(tenant, 'pay', { constraints: [{ argumentName: 'amount', maximum: 5 }] });
    const second = await t.ctx.policies.get(tenant.orgId, 'pay');
    expect(second?.version).toBe(2);
    expect(second?.definition.constraints).toEqual([{ argumentName: 'amount', maximum: 5, enabled: true }]);
    await post(tenant, '/v1/policies/pay/deactivate');
    expect((await t.ctx.policies.get(tenant.orgId, 'pay'))?.isActive).toBe(false);
    await t.inject({ method: 'DELETE', url: '/v1/policies/pay', headers: h(tenant) });
    expect(await t.ctx.policies.get(tenant.orgId, 'pay')).toBeNull();
  });
});

describe('DELETE, activate and deactivate', () => {
  it('deletes with an event, then answers 404', async () => {
    const tenant = await createTenant(t);
    await create(tenant, { toolName: 'pay' });
    const events = await eventsOf(tenant.orgId, async () => {
      const res = await t.inject({ method: 'DELETE', url: '/v1/policies/pay', headers: asUser(tenant) });
      expect(res.json()).toEqual({ success: true });
    });
    expect(events).toEqual([
      { organizationId: tenant.orgId, type: 'policy.deleted', data: { toolName: 'pay', projectId: null } },
    ]);
    expectError(await get(tenant, 'pay'), 404, 'not_found');
    expectError(
      await t.inject({ method: 'DELETE', url: '/v1/policies/pay', headers: h(tenant) }),
      404,
      'not_found',
    );
  });

  it('deactivates and activates with a message and events; unknown policies are 404', async () => {
    const tenant = await createTenant(t);
    await create(tenant, { toolName: 'pay' });
    const events = await eventsOf(tenant.orgId, async () => {
      const off = await post(tenant, '/v1/policies/pay/deactivate');
      expect(off.statusCode).toBe(200);
      expect(off.json()).toEqual({ success: true, message: expect.stringContaining('deactivated') });
      expect((await get(tenant, 'pay')).json()).toMatchObject({ isActive: false, version: 1 });
      const on = await t.inject({
        method: 'POST',
        url: '/v1/policies/pay/activate',
        headers: { ...h(tenant), 'content-type': 'application/json' },
        payload: '',
      });
      expect(on.json()).toEqual({ success: true, message: expect.stringContaining('activated') });
      expect((await get(tenant, 'pay')).json()).toMatchObject({ isActive: true, version: 1 });
    });
    expect(events.map((e) => [e.type, e.data])).toEqual([
      ['policy.deactivated', { toolName: 'pay', projectId: tenant.projectId }],
      ['policy.activated', { toolName: 'pay', projectId: tenant.projectId }],
    ]);
    for (const action of ['activate', 'deactivate']) {
      const res = await post(tenant, `/v1/policies/ghost/${action}`);
      expectError(res, 404, 'not_found');
      expect(res.json().error.message).toContain('"ghost"');
    }
  });
});

describe('POST /v1/policies/:toolName/validate', () => {
  it('scores a definition without saving it', async () => {
    const tenant = await createTenant(t);
    const ok = await post(tenant, '/v1/policies/pay/validate', h(tenant), { constraints: [amountCap] });
    expect(ok.statusCode).toBe(200);
    expect(ok.json()).toEqual({ valid: true, score: 100, issues: [] });
    const contradiction = await post(tenant, '/v1/policies/pay/validate', h(tenant), {
      toolName: 'pay',
      constraints: [{ argumentName: 'amount', minimum: 10, maximum: 1 }],
    });
    expect(contradiction.json().valid).toBe(false);
    expect(contradiction.json().issues.join(' ')).toContain('minimum 10');
    const llm = await post(tenant, '/v1/policies/pay/validate', h(tenant), {
      mode: 'llm',
      llmConfig: { description: ' ' },
    });
    expect(llm.json().issues.join(' ')).toContain('empty description');
    expectError(await get(tenant, 'pay'), 404, 'not_found');
  });

  it('reports hard problems as issues rather than a 400, and leaves an existing policy alone', async () => {
    const tenant = await createTenant(t);
    await create(tenant, { toolName: 'pay', constraints: [amountCap] });
    const res = await post(tenant, '/v1/policies/pay/validate', asUser(tenant), {
      constraints: [{ argumentName: 'amount', regex: 'y'.repeat(300) }],
    });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({ valid: false, score: 0 });
    expect(res.json().issues.join(' ')).toContain('regex');
    expect((await get(tenant, 'pay')).json()).toMatchObject({ version: 1, constraints: [{ minimum: 1 }] });
  });

  it('rejects a mismatched toolName and malformed bodies with 400', async () => {
    const tenant = await createTenant(t);
    const res = await post(tenant, '/v1/policies/pay/validate', h(tenant), { toolName: 'other' });
    expectError(res, 400, 'validation_failed');
    expect(res.json().error.message).toContain('"other"');
    expectError(
      await post(tenant, '/v1/policies/pay/validate', h(tenant), {
        constraints: [{ argumentName: 'a', x: 1 }],
      }),
      400,
      'validation_failed',
    );
  });
});

describe('tenant isolation', () => {
  it("another organization's key and user can neither read nor change the policies", async () => {
    const a = await createTenant(t);
    const b = await createTenant(t);
    await registerTool(a, 'pay', [{ name: 'amount', type: 'number' }]);
    await update(a, 'pay', { constraints: [amountCap] });
    const before = (await get(a, 'pay')).json();

    for (const headers of [h(b), asUser(b)]) {
      expect((await t.inject({ method: 'GET', url: '/v1/policies', headers })).json().data).toEqual([]);
      expectError(await get(b, 'pay', headers), 404, 'not_found');
      expectError(await update(b, 'pay', { constraints: [] }, headers), 404, 'not_found');
      expectError(await t.inject({ method: 'DELETE', url: '/v1/policies/pay', headers }), 404, 'not_found');
      expectError(await post(b, '/v1/policies/pay/deactivate', headers), 404, 'not_found');
      expectError(await post(b, '/v1/policies/pay/activate', headers), 404, 'not_found');
      // b's dry run does not see a's tool: "amount" is undeclared only when a tool is registered.
      const dry = await post(b, '/v1/policies/pay/validate', headers, {
        constraints: [{ argumentName: 'zzz', required: true }],
      });
      expect(dry.json().issues).toEqual([]);
    }
    const intrude = { authorization: `Bearer ${b.token}`, 'x-organization-id': a.orgId };
    expectError(await get(b, 'pay', intrude), 403, 'authorization_error');
    expectError(await update(b, 'pay', { constraints: [] }, intrude), 403, 'authorization_error');
    expectError(await create(b, { toolName: 'other' }, intrude), 403, 'authorization_error');

    // The same tool name in b is b's own policy.
    expect((await create(b, { toolName: 'pay' })).statusCode).toBe(201);
    await t.inject({ method: 'DELETE', url: '/v1/policies/pay', headers: h(b) });

    expect((await get(a, 'pay')).json()).toEqual(before);
    expect(before).toMatchObject({ version: 2, isActive: true, tool: { name: 'pay' } });
  });
});
