import { beforeAll, describe, expect, it } from 'vitest';
import { setTier } from '../../../test/approvals.js';
import { useTestApp } from '../../../test/fixture.js';
import { asUser, createTenant, expectError, keyHeader, type Tenant } from '../../../test/helpers.js';
import { MAX_JSON_DEPTH, nestedDeeperThan } from '../../lib/json.js';

let tenant: Tenant;
const t = useTestApp();
beforeAll(async () => {
  tenant = await createTenant(t);
  await setTier(t, tenant, 'team');
});

/** An object `levels` deep: {a: {a: ... {}}}, the outer object being level 1. */
function nested(levels: number): Record<string, unknown> {
  let v: Record<string, unknown> = {};
  for (let i = 1; i < levels; i++) v = { a: v };
  return v;
}

describe('nesting depth of arguments and context', () => {
  it('counts levels of objects and arrays', () => {
    expect(nestedDeeperThan({ a: [{}] }, 3)).toBe(false);
    expect(nestedDeeperThan({ a: [{}] }, 2)).toBe(true);
    expect(nestedDeeperThan('x', 0)).toBe(false);
  });

  const deep = nested(MAX_JSON_DEPTH + 1);
  const ok = nested(MAX_JSON_DEPTH);
  const routes: [string, string, (v: Record<string, unknown>, where: 'arguments' | 'context') => object][] = [
    ['/v1/tools/validate', 'validate', (v, where) => ({ tool_name: 'wire', arguments: {}, [where]: v })],
    [
      '/v1/decisions',
      'log',
      (v, where) => ({
        tool_name: 'wire',
        arguments: {},
        [where]: v,
        decision: 'allow',
        mode: 'deterministic',
        latency_ms: 1,
        source: 'client',
      }),
    ],
  ];
  for (const [url, name, body] of routes) {
    for (const where of ['arguments', 'context'] as const) {
      it(`${name}: 400 for ${where} deeper than ${MAX_JSON_DEPTH} levels, accepted at the limit`, async () => {
        const res = await t.inject({
          method: 'POST',
          url,
          headers: keyHeader(tenant.apiKey),
          payload: body(deep, where),
        });
        expectError(res, 400, 'validation_failed');
        expect(res.json().error.message).toMatch(new RegExp(`body/${where}`));
        const fine = await t.inject({
          method: 'POST',
          url,
          headers: keyHeader(tenant.apiKey),
          payload: body(ok, where),
        });
        expect(fine.statusCode).toBeLessThan(300);
      });
    }
  }

  it('approvals: 400 for arguments deeper than the limit', async () => {
    const res = await t.inject({
      method: 'POST',
      url: '/v1/approvals',
      headers: keyHeader(tenant.apiKey),
      payload: { toolName: 'wire', arguments: deep },
    });
    expectError(res, 400, 'validation_failed');
  });
});

describe('control characters in names', () => {
  it.each(['a\u0000b', 'tab\there', 'line\nbreak'])('refuses %j as a tool or policy name', async (bad) => {
    const validate = await t.inject({
      method: 'POST',
      url: '/v1/tools/validate',
      headers: keyHeader(tenant.apiKey),
      payload: { tool_name: bad, arguments: {} },
    });
    expectError(validate, 400, 'validation_failed');
    const policy = await t.inject({
      method: 'POST',
      url: '/v1/policies',
      headers: keyHeader(tenant.apiKey),
      payload: { toolName: bad, constraints: [] },
    });
    expectError(policy, 400, 'validation_failed');
    const tool = await t.inject({
      method: 'POST',
      url: '/v1/tools/register',
      headers: keyHeader(tenant.apiKey),
      payload: { name: bad, parameters: [] },
    });
    expect(tool.statusCode).toBe(400);
    const approval = await t.inject({
      method: 'POST',
      url: '/v1/approvals',
      headers: keyHeader(tenant.apiKey),
      payload: { toolName: bad },
    });
    expectError(approval, 400, 'validation_failed');
  });

  it('refuses them in organization, project and key names', async () => {
    const org = await t.inject({
      method: 'POST',
      url: '/v1/organizations',
      headers: asUser(tenant),
      payload: { name: 'Acme\u0000', slug: 'acme-nul' },
    });
    expectError(org, 400, 'validation_failed');
    const project = await t.inject({
      method: 'POST',
      url: '/v1/projects',
      headers: asUser(tenant),
      payload: { organizationId: tenant.orgId, name: 'P\u001f' },
    });
    expectError(project, 400, 'validation_failed');
    const key = await t.inject({
      method: 'POST',
      url: '/v1/api-keys',
      headers: asUser(tenant),
      payload: { name: 'k\u0000', projectId: tenant.projectId },
    });
    expectError(key, 400, 'validation_failed');
    const fine = await t.inject({
      method: 'POST',
      url: '/v1/api-keys',
      headers: asUser(tenant),
      payload: { name: 'ordinary name — ünïcode', projectId: tenant.projectId },
    });
    expect(fine.statusCode).toBe(201);
  });
});

describe('names a URL path cannot hold', () => {
  it.each(['.', '..'])(
    'refuses %j as the name of a new policy, tool or draft rule, and writes nothing',
    async (bad) => {
      const h = keyHeader(tenant.apiKey);
      const why = 'must not be "." or ".." (a URL path cannot name those)';
      const policy = await t.inject({
        method: 'POST',
        url: '/v1/policies',
        headers: h,
        payload: { toolName: bad, constraints: [] },
      });
      expectError(policy, 400, 'validation_failed');
      expect(policy.json().error.message).toContain(why);
      for (const url of ['/v1/tools/register', '/v1/tools/sync']) {
        const field = url.endsWith('register') ? 'parameters' : 'arguments';
        const tool = await t.inject({
          method: 'POST',
          url,
          headers: h,
          payload: { tools: [{ name: bad, [field]: [] }] },
        });
        expectError(tool, 400, 'validation_failed');
        expect(tool.json().error.message).toContain(why);
      }
      const draft = await t.inject({
        method: 'POST',
        url: '/v1/policy-drafts',
        headers: h,
        payload: {
          name: 'dots',
          projectId: tenant.projectId,
          createdByAgentId: 'agent',
          rules: [{ id: 'r', action: 'block', tools: [bad], conditions: [], severity: 'high' }],
        },
      });
      expectError(draft, 400, 'validation_failed');
      expect(draft.json().error.message).toContain(why);
      const listed = await t.inject({ method: 'GET', url: '/v1/policies', headers: h });
      expect(listed.json().data.map((p: { toolName: string }) => p.toolName)).not.toContain(bad);
    },
  );

  it('still validates calls to such a tool, and takes names that only contain dots', async () => {
    const h = keyHeader(tenant.apiKey);
    const validate = await t.inject({
      method: 'POST',
      url: '/v1/tools/validate',
      headers: h,
      payload: { tool_name: '..', arguments: {} },
    });
    expect(validate.statusCode).toBe(200);
    for (const name of ['...', '.env', '..a']) {
      const created = await t.inject({
        method: 'POST',
        url: '/v1/policies',
        headers: h,
        payload: { toolName: name, constraints: [] },
      });
      expect(created.statusCode).toBe(201);
      const read = await t.inject({
        method: 'GET',
        url: `/v1/policies/${encodeURIComponent(name)}`,
        headers: h,
      });
      expect(read.json().toolName).toBe(name);
    }
  });

  it('says what a control character breaks, not the pattern', async () => {
    const res = await t.inject({
      method: 'POST',
      url: '/v1/tools/validate',
      headers: keyHeader(tenant.apiKey),
      payload: { tool_name: 'a\u0001', arguments: {} },
    });
    expectError(res, 400, 'validation_failed');
    expect(res.json().error.message).toContain('must not contain control characters (U+0000-U+001F)');
  });
});
