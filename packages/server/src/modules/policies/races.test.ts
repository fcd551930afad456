import { afterAll, describe, expect, it } from 'vitest';
import { useTestApp } from '../../../test/fixture.js';
import { createTenant, keyHeader, type Tenant, type TestApp } from '../../../test/helpers.js';
import { dropRedisKeys, redisPrefix, TEST_REDIS_URL } from '../../../test/streams.js';
import type { Clock } from '../../lib/clock.js';

// Moved 2 s by every validate, so that no key reaches its per-minute rate limit.
let now = Date.parse('2026-03-01T12:00:10.000Z');
const clock: Clock = { now: () => new Date(now) };

const call = (
  t: TestApp,
  tenant: Tenant,
  method: 'GET' | 'POST' | 'PUT' | 'DELETE',
  url: string,
  payload?: object,
  headers: Record<string, string> = {},
) =>
  t.inject({
    method,
    url,
    headers: { ...keyHeader(tenant.apiKey), ...headers },
    ...(payload ? { payload } : {}),
  });

const limit = (maximum: number) => ({ constraints: [{ argumentName: 'amount', maximum }] });

const validate = async (t: TestApp, tenant: Tenant, tool: string, amount: number) => {
  now += 2000;
  const res = await call(t, tenant, 'POST', '/v1/tools/validate', { tool_name: tool, arguments: { amount } });
  expect(res.statusCode).toBe(200);
  const body = res.json();
  return { decision: body.decision as string, version: body.metadata.policy_version as number | null };
};

/** Two instances on one database and one Redis prefix, as a scaled-out deployment runs. */
describe('policy writes racing across two instances', () => {
  const prefix = redisPrefix();
  afterAll(async () => dropRedisKeys(prefix));
  const config = { redisUrl: TEST_REDIS_URL, redisPrefix: prefix };
  const a = useTestApp(config, { clock });
  const b = useTestApp(config, () => ({ database: a.database, clock }));

  it('concurrent PUTs without If-Match: every one applies, versions strictly increasing, none lost', async () => {
    const tenant = await createTenant(a);
    expect((await call(a, tenant, 'POST', '/v1/policies', { toolName: 'pay', ...limit(0) })).statusCode).toBe(
      201,
    );
    const n = 16;
    const results = await Promise.all(
      Array.from({ length: n }, (_, i) =>
        call(i % 2 ? a : b, tenant, 'PUT', '/v1/policies/pay', limit(i + 1)),
      ),
    );
    expect(results.map((r) => r.statusCode)).toEqual(Array(n).fill(200));
    const versions = results.map((r) => r.json().version as number).sort((x, y) => x - y);
    expect(versions).toEqual(Array.from({ length: n }, (_, i) => i + 2));
    // Each answer's version holds the definition that request wrote.
    for (const [i, r] of results.entries()) {
      const v = await call(a, tenant, 'GET', `/v1/policies/pay/versions/${r.json().version}`);
      expect(v.statusCode).toBe(200);
      expect(v.json().definition.constraints[0].maximum).toBe(i + 1);
    }
    const list = (await call(b, tenant, 'GET', '/v1/policies/pay/versions')).json().data;
    expect(list.map((x: { version: number }) => x.version)).toEqual(
      Array.from({ length: n + 1 }, (_, i) => n + 1 - i),
    );
    // The current policy is the last version, on both instances.
    const last = results.find((r) => r.json().version === n + 1)!.json().constraints[0].maximum as number;
    for (const t of [a, b]) {
      const cur = (await call(t, tenant, 'GET', '/v1/policies/pay')).json();
      expect(cur.version).toBe(n + 1);
      expect(cur.constraints[0].maximum).toBe(last);
      expect(await validate(t, tenant, 'pay', last)).toEqual({ decision: 'allow', version: n + 1 });
      expect(await validate(t, tenant, 'pay', last + 1)).toEqual({ decision: 'deny', version: n + 1 });
    }
  });

  it('concurrent PUTs with one If-Match: exactly one applies, the others answer 409', async () => {
    const tenant = await createTenant(a);
    const created = await call(a, tenant, 'POST', '/v1/policies', { toolName: 'wire', ...limit(0) });
    const etag = created.headers.etag as string;
    const results = await Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        call(i % 2 ? a : b, tenant, 'PUT', '/v1/policies/wire', limit(i + 1), { 'if-match': etag }),
      ),
    );
    const codes = results.map((r) => r.statusCode).sort();
    expect(codes).toEqual([200, ...Array(9).fill(409)]);
    const won = results.find((r) => r.statusCode === 200)!.json();
    expect(won.version).toBe(2);
    const list = (await call(a, tenant, 'GET', '/v1/policies/wire/versions')).json().data;
    expect(list.map((x: { version: number }) => x.version)).toEqual([2, 1]);
    for (const t of [a, b]) {
      expect((await validate(t, tenant, 'wire', won.constraints[0].maximum)).version).toBe(2);
    }
  });

  it('after an update answers on one instance, no later validate on either is decided under the old version', async () => {
    const tenant = await createTenant(a);
    await call(a, tenant, 'POST', '/v1/policies', { toolName: 'move', ...limit(1000) });
    for (let round = 0; round < 6; round++) {
      const writer = round % 2 ? a : b;
      const other = round % 2 ? b : a;
      // Warm both caches with the current version, then race validates against the update.
      const before = (await validate(other, tenant, 'move', 1)).version!;
      await validate(writer, tenant, 'move', 1);
      let answered = false;
      const late: (number | null)[] = [];
      const spin = (async () => {
        for (let i = 0; i < 40; i++) {
          const after = answered;
          const r = await validate(i % 2 ? other : writer, tenant, 'move', 1);
          if (after) late.push(r.version);
        }
      })();
      const put = await call(writer, tenant, 'PUT', '/v1/policies/move', limit(1000 + round));
      answered = true;
      expect(put.statusCode).toBe(200);
      await spin;
      expect(put.json().version).toBe(before + 1);
      for (const v of late) expect(v).toBe(before + 1);
      expect((await validate(other, tenant, 'move', 1)).version).toBe(before + 1);
    }
  });

  it('deactivate, delete and tool delete on one instance reach the next validate on the other', async () => {
    const tenant = await createTenant(a);
    const reg = await call(a, tenant, 'POST', '/v1/tools/register', {
      tools: [{ name: 'refund', parameters: [{ name: 'amount', type: 'number' }] }],
    });
    expect(reg.statusCode).toBe(200);
    expect((await call(a, tenant, 'PUT', '/v1/policies/refund', limit(10))).statusCode).toBe(200);
    expect((await validate(b, tenant, 'refund', 50)).decision).toBe('deny');
    expect((await call(a, tenant, 'POST', '/v1/policies/refund/deactivate')).statusCode).toBe(200);
    expect(await validate(b, tenant, 'refund', 50)).toEqual({ decision: 'allow', version: null });
    expect((await call(b, tenant, 'POST', '/v1/policies/refund/activate')).statusCode).toBe(200);
    expect((await validate(a, tenant, 'refund', 50)).decision).toBe('deny');
    expect((await call(a, tenant, 'DELETE', '/v1/policies/refund')).statusCode).toBe(200);
    expect(await validate(b, tenant, 'refund', 50)).toEqual({ decision: 'allow', version: null });
    // A new policy, then the tool deleted with it: both instances stop applying it at once.
    await call(b, tenant, 'POST', '/v1/policies', { toolName: 'refund', ...limit(10) });
    expect((await validate(a, tenant, 'refund', 50)).decision).toBe('deny');
    expect((await call(b, tenant, 'DELETE', '/v1/tools/refund')).statusCode).toBe(200);
    expect(await validate(a, tenant, 'refund', 50)).toEqual({ decision: 'allow', version: null });
    expect((await call(a, tenant, 'GET', '/v1/policies/refund')).statusCode).toBe(404);
    // Registered again: a new tool, with a starter policy of its own (version 1), seen on both.
    const again = await call(b, tenant, 'POST', '/v1/tools/register', {
      tools: [{ name: 'refund', parameters: [{ name: 'amount', type: 'number', maximum: 5 }] }],
    });
    expect(again.json().message).toContain('generated 1 starter policy');
    for (const t of [a, b])
      expect(await validate(t, tenant, 'refund', 50)).toEqual({ decision: 'deny', version: 1 });
  });

  it('concurrent DELETE and PUT: the PUT either applies before the delete or answers 404, never revives it', async () => {
    const tenant = await createTenant(a);
    for (let round = 0; round < 5; round++) {
      await call(a, tenant, 'POST', '/v1/policies', { toolName: 'gone', ...limit(1) });
      const [put, del] = await Promise.all([
        call(a, tenant, 'PUT', '/v1/policies/gone', limit(2)),
        call(b, tenant, 'DELETE', '/v1/policies/gone'),
      ]);
      expect(del.statusCode).toBe(200);
      expect([200, 404]).toContain(put.statusCode);
      expect((await call(b, tenant, 'GET', '/v1/policies/gone')).statusCode).toBe(404);
      for (const t of [a, b]) expect((await validate(t, tenant, 'gone', 5)).version).toBeNull();
    }
  });
});
