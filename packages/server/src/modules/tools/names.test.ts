import { beforeAll, describe, expect, it } from 'vitest';
import { useTestApp } from '../../../test/fixture.js';
import { createTenant, keyHeader, type Tenant } from '../../../test/helpers.js';

let tenant: Tenant;
const t = useTestApp();
beforeAll(async () => {
  tenant = await createTenant(t);
});

const call = (method: 'GET' | 'POST' | 'PUT' | 'DELETE', url: string, payload?: object) =>
  t.inject({ method, url, headers: keyHeader(tenant.apiKey), ...(payload ? { payload } : {}) });

const limit = (maximum: number) => ({ constraints: [{ argumentName: 'amount', maximum }] });

const validate = async (tool: string, amount: number) => {
  const res = await call('POST', '/v1/tools/validate', { tool_name: tool, arguments: { amount } });
  expect(res.statusCode).toBe(200);
  return { decision: res.json().decision as string, version: res.json().metadata.policy_version };
};

/** Every route that names a tool in its path, for one (encoded) path segment. */
async function everyRoute(segment: string, name: string): Promise<void> {
  const p = `/v1/policies/${segment}`;
  const got = await call('GET', p);
  expect(got.statusCode, `GET ${p}`).toBe(200);
  expect(got.json().toolName).toBe(name);
  expect(got.json().tool?.name).toBe(name);
  const put = await call('PUT', p, limit(20));
  expect(put.statusCode, `PUT ${p}`).toBe(200);
  expect(put.json().toolName).toBe(name);
  expect((await call('GET', `${p}/versions`)).json().data[0].toolName).toBe(name);
  expect((await call('GET', `${p}/versions/${put.json().version}`)).json().toolName).toBe(name);
  expect((await call('POST', `${p}/validate`, { toolName: name, ...limit(1) })).statusCode).toBe(200);
  expect((await call('POST', `${p}/deactivate`)).statusCode).toBe(200);
  expect(await validate(name, 50)).toEqual({ decision: 'allow', version: null });
  expect((await call('POST', `${p}/activate`)).statusCode).toBe(200);
  expect(await validate(name, 50)).toEqual({ decision: 'deny', version: put.json().version });
  expect((await call('DELETE', p)).statusCode, `DELETE ${p}`).toBe(200);
  expect(await validate(name, 50)).toEqual({ decision: 'allow', version: null });
  const tool = `/v1/tools/${segment}`;
  expect((await call('GET', tool)).json().name).toBe(name);
  expect((await call('DELETE', tool)).statusCode, `DELETE ${tool}`).toBe(200);
  expect((await call('GET', tool)).statusCode).toBe(404);
}

describe('tool names at the edges, through every route that takes one in its path', () => {
  const names = [
    'a'.repeat(200),
    '\u{1F4B8}'.repeat(200),
    'caf\u00e9',
    'cafe\u0301',
    '.a',
    '..a',
    'a.',
    '...',
    '%2e',
    '%2e%2e',
    'a/b',
    '../pay',
    'a?b#c',
    ' spaced name ',
    'a\\b',
  ];

  it.each(names)('%s', async (name) => {
    const reg = await call('POST', '/v1/tools/register', {
      tools: [{ name, parameters: [{ name: 'amount', type: 'number' }] }],
    });
    expect(reg.statusCode).toBe(200);
    expect((await call('PUT', `/v1/policies/${encodeURIComponent(name)}`, limit(10))).statusCode).toBe(200);
    await everyRoute(encodeURIComponent(name), name);
  });

  it('keeps NFC and NFD forms apart (no normalization)', async () => {
    await call('POST', '/v1/policies', { toolName: 'r\u00e9sum\u00e9', ...limit(10) });
    expect(await validate('r\u00e9sum\u00e9', 50)).toMatchObject({ decision: 'deny' });
    expect(await validate('re\u0301sume\u0301', 50)).toEqual({ decision: 'allow', version: null });
  });

  it('refuses names past the limits and path-unusable names with 400', async () => {
    for (const name of ['a'.repeat(201), '\u{1F4B8}'.repeat(201), '.', '..', '', 'a\u0000b', 'a\nb']) {
      const created = await call('POST', '/v1/policies', { toolName: name, ...limit(1) });
      expect(created.statusCode, JSON.stringify(name)).toBe(400);
      const reg = await call('POST', '/v1/tools/register', { tools: [{ name, parameters: [] }] });
      expect(reg.statusCode, JSON.stringify(name)).toBe(400);
    }
    for (const segment of [encodeURIComponent('a'.repeat(201)), '%00', 'a%0Ab', '%ZZ', '%C3']) {
      for (const [method, url] of [
        ['GET', `/v1/policies/${segment}`],
        ['PUT', `/v1/policies/${segment}`],
        ['DELETE', `/v1/policies/${segment}`],
        ['GET', `/v1/policies/${segment}/versions`],
        ['POST', `/v1/policies/${segment}/activate`],
        ['GET', `/v1/tools/${segment}`],
        ['DELETE', `/v1/tools/${segment}`],
      ] as const) {
        const res = await call(method, url, method === 'PUT' ? limit(1) : undefined);
        expect(res.statusCode, `${method} ${url}`).toBeLessThan(500);
        expect(res.statusCode, `${method} ${url}`).not.toBe(200);
      }
    }
  });

  it('refuses a lone surrogate in a name with 400, in a body and in a path', async () => {
    expect((await call('POST', '/v1/policies', { toolName: '\ud800', ...limit(1) })).statusCode).toBe(400);
    const v = await call('POST', '/v1/tools/validate', { tool_name: '\udfff', arguments: {} });
    expect(v.statusCode).toBe(400);
    expect((await call('GET', '/v1/policies/%ED%A0%80')).statusCode).toBe(400);
    expect((await call('DELETE', '/v1/tools/%ED%A0%80')).statusCode).toBe(400);
  });
});
