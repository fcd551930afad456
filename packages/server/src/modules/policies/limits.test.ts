import { beforeAll, describe, expect, it } from 'vitest';
import { useTestApp } from '../../../test/fixture.js';
import { createTenant, keyHeader, type Tenant } from '../../../test/helpers.js';

let tenant: Tenant;
const t = useTestApp();
beforeAll(async () => {
  tenant = await createTenant(t);
});

const call = (method: 'GET' | 'POST' | 'PUT', url: string, payload?: unknown) =>
  t.inject({
    method,
    url,
    headers: { ...keyHeader(tenant.apiKey), 'content-type': 'application/json' },
    ...(payload !== undefined
      ? { payload: typeof payload === 'string' ? payload : JSON.stringify(payload) }
      : {}),
  });

let seq = 0;
/** Creates, then replaces, then dry-runs a definition: the three writes must agree and never answer 5xx. */
async function write(definition: unknown): Promise<number[]> {
  const toolName = `lim_${seq++}`;
  const created = await call('POST', '/v1/policies', { toolName, ...(definition as object) });
  await call('POST', '/v1/policies', { toolName });
  const put = await call('PUT', `/v1/policies/${toolName}`, definition);
  const dry = await call('POST', `/v1/policies/${toolName}/validate`, definition);
  const codes = [created.statusCode, put.statusCode, dry.statusCode];
  for (const c of codes) expect(c).toBeLessThan(500);
  if (created.statusCode === 201) {
    const v = await call('POST', '/v1/tools/validate', { tool_name: toolName, arguments: { a: 'x' } });
    expect(v.statusCode).toBe(200);
  }
  return codes;
}

describe('policy definitions at the documented limits and just past them', () => {
  it('a regex of 256 characters is accepted, 257 refused (code points, not UTF-16 units)', async () => {
    expect(await write({ constraints: [{ argumentName: 'a', regex: 'a'.repeat(256) }] })).toEqual([
      201, 200, 200,
    ]);
    expect(await write({ constraints: [{ argumentName: 'a', regex: '\u{1F4B8}'.repeat(256) }] })).toEqual([
      201, 200, 200,
    ]);
    const [c, p] = await write({ constraints: [{ argumentName: 'a', notRegex: 'a'.repeat(257) }] });
    expect([c, p]).toEqual([400, 400]);
  });

  it('patterns that do not compile, or compile to the largest programs, never answer 5xx', async () => {
    for (const regex of [
      '(',
      '\\p{Nope}',
      '(?<n>a)\\k<n>',
      'a{1001}',
      '(?:(?:a{1000}){1000}){1000}',
      '(a*)*$',
      '[\\x{110000}]',
    ]) {
      const [c, p] = await write({ constraints: [{ argumentName: 'a', regex }] });
      expect(c === 201 ? p : 400, regex).toBe(c === 201 ? 200 : p);
    }
    const big = '(?:.*x.*){60}'.repeat(19).slice(0, 256);
    await write({ constraints: [{ argumentName: 'a', regex: big }] });
  });

  it('numbers at and past the edges', async () => {
    expect((await call('POST', '/v1/policies', { toolName: 'num' })).statusCode).toBe(201);
    for (const v of ['1e308', '-1e308', '1e309', '-1e309', '-0', '5e-324', '9007199254740993']) {
      const constraints = `[{"argumentName":"a","maximum":${v}}]`;
      const created = await call(
        'POST',
        '/v1/policies',
        `{"toolName":"num_${seq++}","constraints":${constraints}}`,
      );
      const put = await call('PUT', '/v1/policies/num', `{"constraints":${constraints}}`);
      const limits = `{"sessionConstraints":{"cumulativeLimits":[{"argumentName":"a","maxValue":${v}}]}}`;
      const session = await call('PUT', '/v1/policies/num', limits);
      const finite = !v.endsWith('e309');
      expect([created.statusCode, put.statusCode, session.statusCode], v).toEqual(
        finite ? [201, 200, 200] : [400, 400, 400],
      );
    }
    const [c] = await write({ constraints: [{ argumentName: 'a', minLength: 1.5 }] });
    expect(c).toBe(400);
    const [d] = await write({ sessionConstraints: { maxCalls: -1 } });
    expect(d).toBeLessThan(500);
  });

  it('many constraints, long lists and long strings within the body limit', async () => {
    const many = Array.from({ length: 5000 }, (_, i) => ({ argumentName: `a${i}`, maximum: i }));
    expect((await write({ constraints: many }))[0]).toBe(201);
    const list = Array.from({ length: 20000 }, (_, i) => `v${i}`);
    expect((await write({ constraints: [{ argumentName: 'a', enum: list, notEnum: list }] }))[0]).toBe(201);
    expect((await write({ constraints: [{ argumentName: 'a'.repeat(200) }] }))[0]).toBe(201);
    expect((await write({ constraints: [{ argumentName: 'a'.repeat(201) }] }))[0]).toBe(400);
    expect((await write({ constraints: [{ argumentName: '' }] }))[0]).toBe(400);
    const llm = {
      mode: 'llm',
      llmConfig: { description: 'd'.repeat(500_000), exceptions: ['x'.repeat(100_000)] },
    };
    expect((await write(llm))[0]).toBe(201);
  });

  it('bounds the patterns of one policy: 64 are written, a 65th answers 400 before any is compiled', async () => {
    const patterns = (n: number, pattern: (i: number) => string, field: 'regex' | 'notRegex' = 'regex') =>
      Array.from({ length: n }, (_, i) => ({ argumentName: `a${i}`, [field]: pattern(i) }));
    // Each of these patterns costs about 20 ms of building work when compiled; within the body limit
    // thousands fit, which would hold the event loop for minutes at every write and first validate.
    const heavy = (n: number) => patterns(n, (i) => `a.{20}$|b${i}`);
    // The bound counts patterns, whatever they cost: cheap ones show it without the building work.
    const light = (n: number, field: 'regex' | 'notRegex' = 'regex') => patterns(n, (i) => `^b${i}$`, field);
    expect(await write({ constraints: light(64) })).toEqual([201, 200, 200]);
    const mixed = [
      ...light(40),
      ...light(25, 'notRegex').map((c) => ({ ...c, argumentName: `n${c.argumentName}` })),
    ];
    const started = Date.now();
    const created = await call('POST', '/v1/policies', { toolName: 'too_many', constraints: heavy(3000) });
    const dry = await call('POST', '/v1/policies/too_many/validate', { constraints: heavy(3000) });
    expect(Date.now() - started).toBeLessThan(5000);
    expect(created.statusCode).toBe(400);
    expect(created.json().error.message).toContain('at most 64');
    expect(dry.statusCode).toBe(200);
    expect(dry.json()).toMatchObject({ valid: false });
    expect(dry.json().issues.join(' ')).toContain('at most 64');
    const [c, p, d] = await write({ constraints: mixed });
    expect([c, p, d]).toEqual([400, 400, 200]);
    // A tool registered with more patterns than a policy may hold writes nothing.
    const parameters = Array.from({ length: 65 }, (_, i) => ({
      name: `p${i}`,
      type: 'string',
      pattern: `^x${i}$`,
    }));
    const reg = await call('POST', '/v1/tools/register', { tools: [{ name: 'patterned', parameters }] });
    expect(reg.statusCode).toBe(400);
    expect((await call('GET', '/v1/tools/patterned')).statusCode).toBe(404);
    const ok = await call('POST', '/v1/tools/register', {
      tools: [{ name: 'patterned', parameters: parameters.slice(0, 64) }],
    });
    expect(ok.statusCode).toBe(200);
    expect((await call('GET', '/v1/policies/patterned')).json().constraints).toHaveLength(64);
  });

  it('bodies of the wrong shape answer 400', async () => {
    const bad: unknown[] = [
      '[]',
      'null',
      '"x"',
      '{"constraints":{}}',
      '{"constraints":[null]}',
      '{"constraints":[{"argumentName":"a","enum":[1]}]}',
      '{"constraints":[{"argumentName":"a","regex":{}}]}',
      `{"constraints":[${'['.repeat(5000)}${']'.repeat(5000)}]}`,
      '{"sessionConstraints":{"cumulativeLimits":[{"argumentName":"a"}]}}',
      '{"mode":"llm"}',
      '{"llmConfig":{"description":"d","argumentInstructions":[{}]}}',
      '{"__proto__":{"mode":"llm"}}',
      '{"constructor":{"prototype":{}}}',
    ];
    for (const body of bad) {
      const r = await call('PUT', '/v1/policies/none_such', body);
      expect(r.statusCode, String(body)).toBeLessThan(500);
      const c = await call('POST', '/v1/policies', body);
      expect(c.statusCode, String(body)).toBe(400);
    }
  });
});
