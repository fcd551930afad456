import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { useTestApp } from '../../test/fixture.js';
import {
  asUser,
  bearer,
  createTenant,
  expectError,
  keyHeader,
  type Tenant,
  type TestApp,
  withTestApp,
} from '../../test/helpers.js';
import { mintKey, REVOCATIONS, type Revocation, revoke, signIn, signOut } from '../../test/revocations.js';
import { SseClient, waitFor } from '../../test/streams.js';

const validate = (t: TestApp, tenant: Tenant, tool = 'send_email') =>
  t.inject({
    method: 'POST',
    url: '/v1/tools/validate',
    headers: keyHeader(tenant.apiKey),
    payload: { tool_name: tool, arguments: { to: 'a@example.com' } },
  });

describe('GET /v1/events/stream (SSE)', () => {
  let a: Tenant;
  let b: Tenant;
  const open: SseClient[] = [];
  const connect = async (query = '', headers: Record<string, string> = {}) => {
    const c = await SseClient.open(`${t.url}/v1/events/stream${query}`, headers);
    open.push(c);
    return c;
  };

  const t = useTestApp({}, { streams: { sseHeartbeatMs: 50 }, listen: true });
  beforeAll(async () => {
    a = await createTenant(t);
    b = await createTenant(t);
  });
  afterEach(() => {
    for (const c of open.splice(0)) c.close();
  });

  it('sends :ok, then each event as event/data, with the streaming headers', async () => {
    const c = await connect('', keyHeader(a.apiKey));
    expect(c.status).toBe(200);
    expect(c.headers['content-type']).toMatch(/^text\/event-stream/);
    expect(c.headers['cache-control']).toBe('no-cache');
    expect(c.headers['x-accel-buffering']).toBe('no');
    await waitFor(() => c.comments[0] === 'ok', ':ok');
    expect(c.body.startsWith(':ok\n\n')).toBe(true);

    expect((await validate(t, a)).statusCode).toBe(200);
    const e = await c.waitForEvent((x) => x.event === 'decision.created', 'decision.created');
    expect(e.data).toMatchObject({ toolName: 'send_email', decision: 'allow', mode: 'deterministic' });
    expect(typeof (e.data as { latencyMs: unknown }).latencyMs).toBe('number');
  });

  it('accepts the key in the apiKey query parameter', async () => {
    const c = await connect(`?apiKey=${encodeURIComponent(a.apiKey)}`);
    expect(c.status).toBe(200);
    await waitFor(() => c.comments.includes('ok'), ':ok');
    await validate(t, a, 'query_tool');
    await c.waitForEvent((x) => (x.data as { toolName: string }).toolName === 'query_tool', 'event');
  });

  it('accepts a user JWT with the organization in X-Organization-Id or the organizationId query', async () => {
    const byHeader = await connect('', asUser(a));
    const byQuery = await connect(`?organizationId=${a.orgId}`, bearer(a.token));
    expect([byHeader.status, byQuery.status]).toEqual([200, 200]);
    await validate(t, a, 'jwt_tool');
    for (const c of [byHeader, byQuery]) {
      await c.waitForEvent((x) => (x.data as { toolName: string }).toolName === 'jwt_tool', 'event');
    }
  });

  it('filters by the types query parameter', async () => {
    const c = await connect('?types=policy.created,%20draft.approved', keyHeader(a.apiKey));
    await waitFor(() => c.comments.includes('ok'), ':ok');
    await validate(t, a, 'filtered');
    const created = await t.inject({
      method: 'POST',
      url: '/v1/policies',
      headers: keyHeader(a.apiKey),
      payload: { toolName: 'filtered', constraints: [] },
    });
    expect(created.statusCode).toBe(201);
    await c.waitForEvent((x) => x.event === 'policy.created', 'policy.created');
    // Events are delivered in order: had the decision passed the filter, it would be here by now.
    expect(c.events.map((x) => x.event)).toEqual(['policy.created']);
  });

  it("never delivers another organization's events", async () => {
    const c = await connect('', keyHeader(a.apiKey));
    await waitFor(() => c.comments.includes('ok'), ':ok');
    await validate(t, b, 'b_tool');
    await validate(t, a, 'a_tool');
    await c.waitForEvent((x) => (x.data as { toolName: string }).toolName === 'a_tool', 'own event');
    expect(c.events.map((x) => (x.data as { toolName: string }).toolName)).toEqual(['a_tool']);
  });

  it('sends :ping comments at the heartbeat interval', async () => {
    const c = await connect('', keyHeader(a.apiKey));
    await waitFor(() => c.comments.filter((x) => x === 'ping').length >= 2, 'two pings');
  });

  it('answers 401 unauthorized for every authentication failure', async () => {
    const other = await createTenant(t);
    const cases = [
      {},
      keyHeader('svc_not-a-real-key'),
      bearer('not.a.jwt'),
      // A user who is not a member of the organization named.
      { ...bearer(other.token), 'x-organization-id': a.orgId },
    ];
    for (const headers of cases) {
      const res = await t.inject({ method: 'GET', url: '/v1/events/stream', headers });
      expectError(res, 401, 'unauthorized');
    }
    const q = await t.inject({ method: 'GET', url: '/v1/events/stream?apiKey=svc_nope' });
    expectError(q, 401, 'unauthorized');
    // An API key may not name another organization either.
    const cross = await t.inject({
      method: 'GET',
      url: `/v1/events/stream?organizationId=${b.orgId}`,
      headers: keyHeader(a.apiKey),
    });
    expectError(cross, 401, 'unauthorized');
  });

  it('answers 400 missing_organization to a user who names no organization', async () => {
    const res = await t.inject({ method: 'GET', url: '/v1/events/stream', headers: bearer(a.token) });
    expectError(res, 400, 'missing_organization');
  });

  it('refuses a revoked key and ends its open stream at the next heartbeat', async () => {
    const tenant = await createTenant(t);
    const c = await connect('', keyHeader(tenant.apiKey));
    await waitFor(() => c.comments.includes('ok'), ':ok');
    const keys = await t.inject({ method: 'GET', url: '/v1/api-keys', headers: asUser(tenant) });
    const keyId = keys.json().data[0].id as string;
    const revoked = await t.inject({
      method: 'POST',
      url: `/v1/api-keys/${keyId}/revoke`,
      headers: asUser(tenant),
    });
    expect(revoked.statusCode).toBe(200);
    await waitFor(() => c.ended, 'stream end');
    const again = await t.inject({
      method: 'GET',
      url: '/v1/events/stream',
      headers: keyHeader(tenant.apiKey),
    });
    expectError(again, 401, 'unauthorized');
  });

  it('removes the subscription when the client disconnects', async () => {
    const before = t.ctx.streams.size;
    const c = await connect('', keyHeader(a.apiKey));
    await waitFor(() => t.ctx.streams.size === before + 1, 'registered');
    c.close();
    await waitFor(() => t.ctx.streams.size === before, 'removed');
  });
});

describe('SSE streams end as soon as their credential does (not at the next heartbeat)', () => {
  // A heartbeat (and its re-check) a minute away: whatever ends a stream here, it is not the heartbeat.
  const t = useTestApp({}, { streams: { sseHeartbeatMs: 60_000 }, listen: true });
  const open: SseClient[] = [];
  afterEach(() => {
    for (const c of open.splice(0)) c.close();
  });
  const connect = async (query: string, headers: Record<string, string>) => {
    const c = await SseClient.open(`${t.url}/v1/events/stream${query}`, headers);
    open.push(c);
    expect(c.status).toBe(200);
    await waitFor(() => c.comments.includes('ok'), ':ok');
    return c;
  };
  /** Within this, a stream counts as ended at once. */
  const AT_ONCE_MS = 2000;

  it.each(Object.keys(REVOCATIONS) as Revocation[])("%s ends the key's streams at once", async (how) => {
    const tenant = await createTenant(t);
    const other = await createTenant(t);
    const minted = await mintKey(t, tenant);
    const byHeader = await connect('', keyHeader(minted.key));
    const byQuery = await connect(`?apiKey=${encodeURIComponent(minted.key)}`, {});
    const otherOrg = await connect('', keyHeader(other.apiKey));
    const person = await connect('', { ...bearer(other.token), 'x-organization-id': other.orgId });
    await revoke(t, how, tenant, minted.id);
    await waitFor(() => byHeader.ended && byQuery.ended, 'the streams to end', AT_ONCE_MS);
    // Nothing else ended: another organization's key stream and a person's stream go on.
    await validate(t, other, 'still_here');
    for (const c of [otherOrg, person])
      await c.waitForEvent((e) => (e.data as { toolName: string }).toolName === 'still_here', 'event');
    expect(otherOrg.ended || person.ended).toBe(false);
  });

  it('ends a stream whose key is revoked while the stream is being opened', async () => {
    const tenant = await createTenant(t);
    const minted = await mintKey(t, tenant);
    // The key is revoked after it was checked for this stream, before the stream is registered.
    const scope = t.ctx.scope;
    t.ctx.scope = async (...args) => {
      // Only the request of this key (another stream's re-check may resolve a scope meanwhile).
      if (args[0].headers['x-service-api-key'] !== minted.key) return scope(...args);
      t.ctx.scope = scope;
      const checked = await scope(...args);
      await revoke(t, 'revoking the key', tenant, minted.id);
      return checked;
    };
    try {
      const c = await SseClient.open(`${t.url}/v1/events/stream`, keyHeader(minted.key));
      open.push(c);
      await waitFor(() => c.ended, 'the stream to end', AT_ONCE_MS);
    } finally {
      t.ctx.scope = scope;
    }
  });

  it('ends a stream whose session is signed out while the stream is being opened', async () => {
    const tenant = await createTenant(t);
    const session = await signIn(t, tenant.userId);
    const scope = t.ctx.scope;
    t.ctx.scope = async (...args) => {
      if (args[0].headers.cookie !== session.cookie) return scope(...args);
      t.ctx.scope = scope;
      const checked = await scope(...args);
      await signOut(t, session);
      return checked;
    };
    try {
      const c = await SseClient.open(`${t.url}/v1/events/stream?organizationId=${tenant.orgId}`, {
        cookie: session.cookie,
      });
      open.push(c);
      await waitFor(() => c.ended, 'the stream to end', AT_ONCE_MS);
    } finally {
      t.ctx.scope = scope;
    }
  });

  it("keeps the key's streams open when its organization only changes tier", async () => {
    const tenant = await createTenant(t);
    const c = await connect('', keyHeader(tenant.apiKey));
    const res = await t.inject({
      method: 'PATCH',
      url: `/v1/admin/organizations/${tenant.orgId}`,
      headers: { authorization: `Bearer ${t.config.adminToken}` },
      payload: { tier: 'team' },
    });
    expect(res.statusCode).toBe(200);
    // The organization is looked up once after the change: give that time, then check.
    await new Promise((r) => setTimeout(r, 200));
    await validate(t, tenant, 'after_tier');
    await c.waitForEvent((e) => (e.data as { toolName: string }).toolName === 'after_tier', 'event');
    expect(c.ended).toBe(false);
  });

  it("signing out ends that session's streams at once, not the same person's other sessions or tokens", async () => {
    const tenant = await createTenant(t);
    const session = await signIn(t, tenant.userId);
    const second = await signIn(t, tenant.userId);
    const query = `?organizationId=${tenant.orgId}`;
    const signedOut = [
      await connect(query, { cookie: session.cookie }),
      await connect(query, { cookie: session.cookie }),
    ];
    const stays = [
      await connect(query, { cookie: second.cookie }),
      await connect(query, bearer(tenant.token)),
      await connect('', keyHeader(tenant.apiKey)),
    ];
    let told = '';
    const unwatch = t.ctx.sessions.watchEnds((key) => {
      told = key;
    });
    await signOut(t, session);
    unwatch();
    // Watchers are told the session's stored name, never its cookie value.
    expect(told).toMatch(/^[0-9a-f]{64}$/);
    expect(session.cookie).not.toContain(told);
    await waitFor(() => signedOut.every((c) => c.ended), 'the streams to end', AT_ONCE_MS);
    await validate(t, tenant, 'after_sign_out');
    for (const c of stays)
      await c.waitForEvent((e) => (e.data as { toolName: string }).toolName === 'after_sign_out', 'event');
    expect(stays.some((c) => c.ended)).toBe(false);
    // Reconnecting with the ended session is refused.
    const again = await t.inject({
      method: 'GET',
      url: `/v1/events/stream${query}`,
      headers: { cookie: session.cookie },
    });
    expectError(again, 401, 'unauthorized');
  });

  it("deleting an organization ends its people's streams too", async () => {
    const tenant = await createTenant(t);
    const session = await signIn(t, tenant.userId);
    const byCookie = await connect(`?organizationId=${tenant.orgId}`, { cookie: session.cookie });
    const byToken = await connect(`?organizationId=${tenant.orgId}`, bearer(tenant.token));
    await revoke(t, 'deleting the organization', tenant, '');
    await waitFor(() => byCookie.ended && byToken.ended, 'the streams to end', AT_ONCE_MS);
  });
});

describe('SSE slow consumers and shutdown', () => {
  it('drops a client that stops reading, without affecting the others', async () => {
    const streams = { maxBufferedBytes: 64 * 1024, sseHeartbeatMs: 60_000 };
    await withTestApp({}, { streams, listen: true }, async (t) => {
      const a = await createTenant(t);
      const slow = await SseClient.open(`${t.url}/v1/events/stream`, keyHeader(a.apiKey));
      slow.res!.pause();
      const good = await SseClient.open(`${t.url}/v1/events/stream`, keyHeader(a.apiKey));
      await waitFor(() => t.ctx.streams.size === 2, 'two streams');
      const blob = 'x'.repeat(16 * 1024);
      // Paced by the good client: it keeps up, the slow one's buffer (kernel, then ours) fills.
      let sent = 0;
      while (t.ctx.streams.size === 2 && sent < 4000) {
        t.ctx.events.publish({ organizationId: a.orgId, type: 'bulk', data: { n: sent, blob } });
        sent++;
        await waitFor(() => good.events.length === sent, `event ${sent}`, 10_000, 1);
      }
      expect(t.ctx.streams.size).toBe(1);
      // The good client is still served.
      t.ctx.events.publish({ organizationId: a.orgId, type: 'after', data: {} });
      await good.waitForEvent((e) => e.event === 'after', 'event after the drop');
      slow.close();
      good.close();
    });
  });

  it('ends open streams when the server closes', async () => {
    await withTestApp({}, { listen: true }, async (t) => {
      const a = await createTenant(t);
      const c = await SseClient.open(`${t.url}/v1/events/stream`, keyHeader(a.apiKey));
      await waitFor(() => c.comments.includes('ok'), ':ok');
      await t.close();
      await waitFor(() => c.ended, 'stream end');
    });
  });

  it('ends a stream that finishes opening after the shutdown began', async () => {
    await withTestApp({}, { listen: true }, async (t) => {
      const a = await createTenant(t);
      // What the shutdown does first; a stream whose credentials were being checked registers after.
      t.ctx.streams.close();
      const c = await SseClient.open(`${t.url}/v1/events/stream`, keyHeader(a.apiKey));
      try {
        await waitFor(() => c.ended, 'stream end');
        expect(t.ctx.streams.size).toBe(0);
      } finally {
        c.close();
      }
    });
  });
});
