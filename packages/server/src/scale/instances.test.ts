import { afterAll, describe, expect, it } from 'vitest';
import { useTestApp } from '../../test/fixture.js';
import { asUser, createTenant, keyHeader, type Tenant, type TestApp } from '../../test/helpers.js';
import {
  dropRedisKeys,
  redisPrefix,
  SseClient,
  TEST_REDIS_URL,
  WsClient,
  waitFor,
} from '../../test/streams.js';
import type { Clock } from '../lib/clock.js';

// One window for the whole file: the shared rate limit is counted against a clock that does not move.
const clock: Clock = { now: () => new Date('2026-03-01T12:00:10.000Z') };

const validate = (
  t: TestApp,
  tenant: Tenant,
  tool: string,
  args: Record<string, unknown> = {},
  context = {},
) =>
  t.inject({
    method: 'POST',
    url: '/v1/tools/validate',
    headers: keyHeader(tenant.apiKey),
    payload: { tool_name: tool, arguments: args, context },
  });

const createPolicy = (t: TestApp, tenant: Tenant, body: Record<string, unknown>) =>
  t.inject({ method: 'POST', url: '/v1/policies', headers: keyHeader(tenant.apiKey), payload: body });

/**
 * Two application instances in one process, on one database and one Redis prefix: the scale-out
 * contract on both stores (the two-process test in multi-process.test.ts needs PostgreSQL).
 */
describe('two instances sharing Redis', () => {
  const prefix = redisPrefix();
  // Registered before the apps, so it runs after both are closed.
  afterAll(async () => dropRedisKeys(prefix));
  const config = { redisUrl: TEST_REDIS_URL, redisPrefix: prefix };
  const a = useTestApp(config, { clock });
  const b = useTestApp(config, () => ({ database: a.database, clock, listen: true }));

  it('is ready only with Redis answering', async () => {
    expect((await a.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(200);
    expect(a.ctx.redis).not.toBeNull();
  });

  it('delivers an event produced on A to SSE and WebSocket clients on B, once', async () => {
    const tenant = await createTenant(a);
    const sse = await SseClient.open(`${b.url}/v1/events/stream`, keyHeader(tenant.apiKey));
    const ws = await WsClient.open(`${b.url.replace(/^http/, 'ws')}/ws?token=${tenant.token}`);
    await waitFor(() => b.ctx.streams.size === 2, 'both connected');
    expect((await validate(a, tenant, 'from_a')).statusCode).toBe(200);
    await sse.waitForEvent((e) => e.event === 'decision.created', 'SSE event');
    await ws.waitForFrame((f) => f.type === 'decision.created', 'WebSocket frame');
    // A later event from B itself: once it is there, a duplicate of the first would be too.
    expect((await validate(b, tenant, 'from_b')).statusCode).toBe(200);
    await sse.waitForEvent((e) => (e.data as { toolName: string }).toolName === 'from_b', 'second');
    await ws.waitForFrame((f) => f.data.toolName === 'from_b', 'second frame');
    expect(sse.events.map((e) => (e.data as { toolName: string }).toolName)).toEqual(['from_a', 'from_b']);
    expect(ws.frames.map((f) => f.data.toolName)).toEqual(['from_a', 'from_b']);
    sse.close();
    ws.close();
  });

  it('sees a policy change made on A in the very next validate on B', async () => {
    const tenant = await createTenant(a);
    // B caches "no policy" first.
    expect((await validate(b, tenant, 'pay', { amount: 500 })).json().decision).toBe('allow');
    const created = await createPolicy(a, tenant, {
      toolName: 'pay',
      constraints: [{ argumentName: 'amount', maximum: 100 }],
    });
    expect(created.statusCode).toBe(201);
    expect((await validate(b, tenant, 'pay', { amount: 500 })).json().decision).toBe('deny');
    const updated = await a.inject({
      method: 'PUT',
      url: '/v1/policies/pay',
      headers: keyHeader(tenant.apiKey),
      payload: { constraints: [{ argumentName: 'amount', maximum: 1000 }] },
    });
    expect(updated.statusCode).toBe(200);
    expect((await validate(b, tenant, 'pay', { amount: 500 })).json().decision).toBe('allow');
  });

  it('refuses on B a key revoked on A, on the next request', async () => {
    const tenant = await createTenant(a);
    expect((await validate(b, tenant, 'warm')).statusCode).toBe(200); // cached on B
    const keys = await a.inject({ method: 'GET', url: '/v1/api-keys', headers: asUser(tenant) });
    const id = keys.json().data[0].id as string;
    const revoke = await a.inject({
      method: 'POST',
      url: `/v1/api-keys/${id}/revoke`,
      headers: asUser(tenant),
    });
    expect(revoke.statusCode).toBe(200);
    const refused = await validate(b, tenant, 'warm');
    expect(refused.statusCode).toBe(401);
    expect(refused.json().error.code).toBe('invalid_api_key');
  });

  it('shares the rate limit: 30 on A and 30 on B, the 61st is refused on either', async () => {
    const tenant = await createTenant(a);
    for (let i = 0; i < 30; i++) expect((await validate(a, tenant, 'rl')).statusCode).toBe(200);
    let last = await validate(b, tenant, 'rl');
    for (let i = 1; i < 30; i++) last = await validate(b, tenant, 'rl');
    expect(last.statusCode).toBe(200);
    expect(last.headers['x-ratelimit-remaining']).toBe('0');
    const over = await validate(b, tenant, 'rl');
    expect(over.statusCode).toBe(429);
    expect(over.json().error.code).toBe('rate_limit_exceeded');
    expect((await validate(a, tenant, 'rl')).statusCode).toBe(429);
  });

  it('shares session counters: exactly maxCalls of 40 parallel calls across both are allowed', async () => {
    const tenant = await createTenant(a);
    const created = await createPolicy(a, tenant, {
      toolName: 'limited',
      sessionConstraints: { maxCalls: 10 },
    });
    expect(created.statusCode).toBe(201);
    const results = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        validate(i % 2 ? a : b, tenant, 'limited', {}, { session_id: 's1' }),
      ),
    );
    const decisions = results.map((r) => r.json().decision);
    expect(decisions.filter((d) => d === 'allow')).toHaveLength(10);
    expect(decisions.filter((d) => d === 'deny')).toHaveLength(30);
    // The stored counter ends at the true total, whichever instance committed last.
    await a.ctx.writer.drain();
    await b.ctx.writer.drain();
    const row = await a.store.db
      .selectFrom('session_counters')
      .select('calls')
      .where('organization_id', '=', tenant.orgId)
      .executeTakeFirstOrThrow();
    expect(row.calls).toBe(10);
  });
});
