import type { AddressInfo } from 'node:net';
import { createServer } from 'node:net';
import { generateKeyPair, SignJWT } from 'jose';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { useTestApp } from '../../test/fixture.js';
import { bearer, createTenant, keyHeader, type Tenant, withTestApp } from '../../test/helpers.js';
import { validateTool, WsClient, waitFor } from '../../test/streams.js';

const toolOf = (f: { data: Record<string, unknown> }) => f.data.toolName;

describe('GET /ws (WebSocket)', () => {
  let wsUrl: string;
  let a: Tenant;
  let b: Tenant;
  const open: WsClient[] = [];
  const connect = async (token: string, options = {}) => {
    const c = await WsClient.open(`${wsUrl}/ws?token=${encodeURIComponent(token)}`, options);
    open.push(c);
    return c;
  };

  // Short enough for quick tests, long enough that a loaded machine still answers pings in time.
  const t = useTestApp({}, { streams: { wsHeartbeatMs: 250 }, listen: true });
  beforeAll(async () => {
    wsUrl = t.url.replace(/^http/, 'ws');
    a = await createTenant(t);
    b = await createTenant(t);
  });
  afterEach(() => {
    for (const c of open.splice(0)) c.close();
  });

  it('delivers {type, data} JSON text frames of the user organization', async () => {
    const c = await connect(a.token);
    await waitFor(() => t.ctx.streams.size > 0, 'registered');
    expect((await validateTool(t, a, 'ws_tool')).statusCode).toBe(200);
    const f = await c.waitForFrame((x) => toolOf(x) === 'ws_tool', 'frame');
    expect(f.type).toBe('decision.created');
    expect(f.data).toMatchObject({ toolName: 'ws_tool', decision: 'allow', mode: 'deterministic' });
  });

  it('delivers the events of every organization the user belongs to, and of no other', async () => {
    const second = await createTenant(t, a.userId);
    const c = await connect(a.token);
    await waitFor(() => t.ctx.streams.size > 0, 'registered');
    await validateTool(t, b, 'not_mine');
    await validateTool(t, a, 'first_org');
    await validateTool(t, second, 'second_org');
    await c.waitForFrame((x) => toolOf(x) === 'second_org', 'second org frame');
    // In publication order: the other organization's event would have come first.
    expect(c.frames.map(toolOf)).toEqual(['first_org', 'second_org']);
  });

  it('picks up an organization the user joins after connecting, at a later heartbeat', async () => {
    const user = `late-${Date.now()}`;
    const first = await createTenant(t, user);
    const c = await connect(first.token);
    await waitFor(() => t.ctx.streams.size > 0, 'registered');
    const later = await createTenant(t, user);
    await waitFor(async () => {
      t.ctx.events.publish({ organizationId: later.orgId, type: 'probe', data: {} });
      return c.frames.some((f) => f.type === 'probe');
    }, 'event of the new organization');
  });

  it('refuses a missing or bad token with HTTP 401 before the upgrade', async () => {
    for (const url of [`${wsUrl}/ws`, `${wsUrl}/ws?token=nope`, `${wsUrl}/ws?token=${a.apiKey}`]) {
      const err = (await WsClient.open(url).then(
        () => {
          throw new Error('upgrade should have been refused');
        },
        (e) => e,
      )) as { res?: { statusCode: number }; body?: string };
      expect(err.res?.statusCode).toBe(401);
      expect(JSON.parse(err.body!)).toMatchObject({ error: { code: 'unauthorized' } });
    }
  });

  it('answers a plain HTTP GET with 401 without a token and 400 without an upgrade', async () => {
    expect((await t.inject({ method: 'GET', url: '/ws' })).statusCode).toBe(401);
    const plain = await t.inject({ method: 'GET', url: `/ws?token=${a.token}` });
    expect(plain.statusCode).toBe(400);
    expect(plain.json().error.code).toBe('validation_failed');
  });

  it('pings every heartbeat and keeps a client that answers', async () => {
    const c = await connect(a.token);
    let pings = 0;
    c.ws.on('ping', () => pings++);
    await waitFor(() => pings >= 3, 'three pings');
    expect(c.closed).toBe(false);
  });

  it('terminates a client that does not answer a ping by the next heartbeat', async () => {
    const c = await connect(a.token, { autoPong: false });
    await waitFor(() => c.closed, 'termination');
    // Terminated, not closed: no close frame, so the client sees an abnormal closure.
    expect(c.closeCode).toBe(1006);
  });

  it('removes the subscription when the client goes away', async () => {
    const before = t.ctx.streams.size;
    const c = await connect(a.token);
    await waitFor(() => t.ctx.streams.size === before + 1, 'registered');
    c.close();
    await waitFor(() => t.ctx.streams.size === before, 'removed');
  });
});

describe('WebSocket and a deleted organization', () => {
  it("stops delivering the organization's events at once (not at the next heartbeat), and stays open", async () => {
    // A WebSocket authenticates with a bearer token, which nothing revokes; it follows all of its
    // user's organizations, so a deleted one is dropped from it while the others go on.
    await withTestApp({}, { streams: { wsHeartbeatMs: 60_000 }, listen: true }, async (t) => {
      const user = `ws-del-${Date.now()}`;
      const first = await createTenant(t, user);
      const second = await createTenant(t, user);
      const c = await WsClient.open(`${t.url.replace(/^http/, 'ws')}/ws?token=${first.token}`);
      await waitFor(() => t.ctx.streams.size === 1, 'registered');
      const deleted = await t.inject({
        method: 'DELETE',
        url: `/v1/organizations/${first.orgId}`,
        headers: bearer(first.token),
      });
      expect(deleted.statusCode).toBe(200);
      let round = 0;
      await waitFor(
        async () => {
          round++;
          t.ctx.events.publish({ organizationId: first.orgId, type: 'deleted.org', data: { round } });
          t.ctx.events.publish({ organizationId: second.orgId, type: 'kept.org', data: { round } });
          await c.waitForFrame((f) => f.type === 'kept.org' && f.data.round === round, 'kept');
          return !c.frames.some((f) => f.type === 'deleted.org' && f.data.round === round);
        },
        'the deleted organization to be dropped',
        2000,
      );
      expect(c.closed).toBe(false);
      c.close();
    });
  });
});

describe('WebSocket slow consumers and shutdown', () => {
  it('drops a client that stops reading, without affecting the others', async () => {
    const streams = { maxBufferedBytes: 64 * 1024, wsHeartbeatMs: 60_000 };
    await withTestApp({}, { streams, listen: true }, async (t) => {
      const wsUrl = t.url.replace(/^http/, 'ws');
      const a = await createTenant(t);
      const slow = await WsClient.open(`${wsUrl}/ws?token=${a.token}`);
      slow.ws.pause();
      const good = await WsClient.open(`${wsUrl}/ws?token=${a.token}`);
      await waitFor(() => t.ctx.streams.size === 2, 'two connections');
      const blob = 'x'.repeat(16 * 1024);
      let sent = 0;
      while (t.ctx.streams.size === 2 && sent < 4000) {
        t.ctx.events.publish({ organizationId: a.orgId, type: 'bulk', data: { n: sent, blob } });
        sent++;
        await waitFor(() => good.frames.length === sent, `frame ${sent}`, 10_000, 1);
      }
      expect(t.ctx.streams.size).toBe(1);
      t.ctx.events.publish({ organizationId: a.orgId, type: 'after', data: {} });
      await good.waitForFrame((f) => f.type === 'after', 'frame after the drop');
      slow.close();
      good.close();
    });
  });

  it('closes connections with 1001 when the server shuts down', async () => {
    await withTestApp({}, { listen: true }, async (t) => {
      const a = await createTenant(t);
      const c = await WsClient.open(`${t.url.replace(/^http/, 'ws')}/ws?token=${a.token}`);
      await waitFor(() => t.ctx.streams.size === 1, 'registered');
      await t.close();
      await waitFor(() => c.closed, 'close');
      expect(c.closeCode).toBe(1001);
    });
  });

  it('does not disturb the rest of the API (auth and error envelope)', async () => {
    await withTestApp({}, async (t) => {
      const a = await createTenant(t);
      const res = await t.inject({ method: 'GET', url: '/v1/organizations', headers: bearer('bad') });
      expect(res.statusCode).toBe(401);
      expect(res.json().error.code).toBe('unauthorized');
      const ok = await t.inject({ method: 'GET', url: '/v1/tools', headers: keyHeader(a.apiKey) });
      expect(ok.statusCode).toBe(200);
    });
  });
});

describe('GET /ws while the identity provider cannot be reached', () => {
  it('answers 503 service_unavailable with Retry-After, as every route does, not 401', async () => {
    // A port nothing listens on: the provider's key set cannot be fetched.
    const port = await new Promise<number>((resolve) => {
      const s = createServer();
      s.listen(0, '127.0.0.1', () => {
        const p = (s.address() as AddressInfo).port;
        s.close(() => resolve(p));
      });
    });
    const jwksUrl = `http://127.0.0.1:${port}/keys.json`;
    await withTestApp({ jwtJwksUrl: jwksUrl }, async (t) => {
      const { privateKey } = await generateKeyPair('ES256');
      const token = await new SignJWT({})
        .setProtectedHeader({ alg: 'ES256', kid: 'provider-key' })
        .setSubject('alice')
        .setExpirationTime('5m')
        .sign(privateKey);
      // The rest of the API says "retry": the token was not found wrong, it could not be checked.
      const api = await t.inject({ method: 'GET', url: '/v1/organizations', headers: bearer(token) });
      expect(api.statusCode).toBe(503);
      for (const res of [
        await t.inject({ method: 'GET', url: `/ws?token=${token}` }),
        await t.inject({ method: 'GET', url: '/ws', headers: bearer(token) }),
      ]) {
        expect(res.statusCode).toBe(503);
        expect(res.json().error.code).toBe('service_unavailable');
        expect(res.headers['retry-after']).toBe('5');
      }
    });
  });
});
