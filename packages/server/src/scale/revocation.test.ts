import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useTestApp } from '../../test/fixture.js';
import { bearer, createTenant, keyHeader, type TestApp } from '../../test/helpers.js';
import { createUpstream, rawRpc, rawSession, readEvents } from '../../test/mcp-helpers.js';
import { type McpUpstream, startMcpUpstream } from '../../test/mcp-upstream.js';
import { mintKey, revoke, signIn, signOut } from '../../test/revocations.js';
import {
  dropRedisKeys,
  redisPrefix,
  SseClient,
  TEST_REDIS_URL,
  WsClient,
  waitFor,
} from '../../test/streams.js';

/** Within this, what a credential held on the other instance counts as ended at once. */
const AT_ONCE_MS = 3000;

/**
 * Two instances on one database and one Redis prefix: a key revoked, an organization deleted or a
 * session signed out on A ends what it holds open on B (event streams, gateway sessions), with no
 * heartbeat involved (they are a minute apart here; the gateway's pings 15 s).
 */
describe('revocations reach every instance', () => {
  const prefix = redisPrefix();
  afterAll(async () => dropRedisKeys(prefix));
  const config = { redisUrl: TEST_REDIS_URL, redisPrefix: prefix };
  const streams = { sseHeartbeatMs: 60_000, wsHeartbeatMs: 60_000 };
  const a = useTestApp(config, { streams });
  const b = useTestApp(config, () => ({ database: a.database, streams, listen: true }));
  let upstream: McpUpstream;
  beforeAll(async () => {
    upstream = await startMcpUpstream({ transport: 'streamable' });
  });
  afterAll(async () => upstream.close());

  const sse = async (query: string, headers: Record<string, string>) => {
    const c = await SseClient.open(`${b.url}/v1/events/stream${query}`, headers);
    expect(c.status).toBe(200);
    await waitFor(() => c.comments.includes('ok'), ':ok');
    return c;
  };

  it("a key revoked on A ends its event streams on B before A's answer leaves", async () => {
    const tenant = await createTenant(a);
    const minted = await mintKey(a, tenant);
    const revoked = await sse('', keyHeader(minted.key));
    const kept = await sse('', keyHeader(tenant.apiKey));
    await waitFor(() => b.ctx.streams.size >= 2, 'registered on B');
    const before = b.ctx.streams.size;
    await revoke(a, 'revoking the key', tenant, minted.id);
    // A's answer waited for B's acknowledgement (at most 2 s), which came after B ended the stream.
    await waitFor(() => b.ctx.streams.size === before - 1, 'B to drop the stream', AT_ONCE_MS);
    await waitFor(() => revoked.ended, 'the stream on B to end', AT_ONCE_MS);
    expect(kept.ended).toBe(false);
    kept.close();
  });

  it('a session signed out on A ends its streams on B', async () => {
    const tenant = await createTenant(a);
    const session = await signIn(a, tenant.userId);
    const other = await signIn(a, tenant.userId);
    const query = `?organizationId=${tenant.orgId}`;
    const ended = await sse(query, { cookie: session.cookie });
    const kept = await sse(query, { cookie: other.cookie });
    await signOut(a, session);
    await waitFor(() => ended.ended, 'the stream on B to end', AT_ONCE_MS);
    expect(kept.ended).toBe(false);
    kept.close();
  });

  it('a key revoked on A ends its gateway sessions on B, closing their upstream sessions', async () => {
    const tenant = await createTenant(a);
    await createUpstream(a, tenant, { name: 'shared', slug: 'shared', url: upstream.url });
    const minted = await mintKey(a, tenant);
    const url = `${b.url}/v1/mcp/shared`;
    const seen = () => new Set(upstream.headers.map((h) => h['mcp-session-id']));
    const before = seen();
    const session = await rawSession(url, keyHeader(minted.key));
    const upstreamId = await waitFor(
      () => [...seen()].find((id) => typeof id === 'string' && !before.has(id)) as string | undefined,
      'the upstream session',
    );
    const stream = await fetch(url, { headers: session });
    expect(stream.status).toBe(200);
    await revoke(a, 'revoking the key', tenant, minted.id);
    await waitFor(() => upstream.deleted.includes(upstreamId), 'the upstream session to end', AT_ONCE_MS);
    await readEvents(stream, () => false, AT_ONCE_MS);
    const refused = await rawRpc(url, { jsonrpc: '2.0', id: 1, method: 'tools/list' }, session);
    expect(refused.status).toBe(401);
  });

  it("an organization deleted on A ends its streams on B and leaves the people's WebSockets open", async () => {
    const user = `scale-del-${Date.now()}`;
    const tenant = await createTenant(a, user);
    const second = await createTenant(a, user);
    const byKey = await sse('', keyHeader(tenant.apiKey));
    const ws = await WsClient.open(`${b.url.replace(/^http/, 'ws')}/ws?token=${tenant.token}`);
    await revoke(a, 'deleting the organization', tenant, '');
    await waitFor(() => byKey.ended, 'the stream on B to end', AT_ONCE_MS);
    let round = 0;
    await waitFor(
      async () => {
        round++;
        b.ctx.events.publish({ organizationId: tenant.orgId, type: 'deleted.org', data: { round } });
        b.ctx.events.publish({ organizationId: second.orgId, type: 'kept.org', data: { round } });
        await ws.waitForFrame((f) => f.type === 'kept.org' && f.data.round === round, 'kept');
        return !ws.frames.some((f) => f.type === 'deleted.org' && f.data.round === round);
      },
      'the deleted organization to be dropped on B',
      AT_ONCE_MS,
    );
    expect(ws.closed).toBe(false);
    ws.close();
    // The person's token still opens streams of the organization that is left.
    const left = await sse(`?organizationId=${second.orgId}`, bearer(second.token));
    left.close();
  });

  /** Cuts the instance's Redis subscriber connection; it connects and subscribes again by itself. */
  const cutSubscriber = async (t: TestApp) => {
    const admin = new Redis(TEST_REDIS_URL);
    try {
      const list = (await admin.client('LIST')) as string;
      const name = `name=svc-sub-${t.ctx.redis!.instanceId}`;
      const line = list.split('\n').find((l) => l.includes(name))!;
      await admin.client('KILL', 'ID', /id=(\d+)/.exec(line)![1]!);
    } finally {
      await admin.quit();
    }
  };

  it('what was revoked while B could not hear it ends on B once B is subscribed again', async () => {
    const user = `scale-gap-${Date.now()}`;
    const tenant = await createTenant(a, user);
    const left = await createTenant(a, user);
    const minted = await mintKey(a, tenant);
    const revoked = await sse('', keyHeader(minted.key));
    const kept = await sse('', keyHeader(tenant.apiKey));
    const ws = await WsClient.open(`${b.url.replace(/^http/, 'ws')}/ws?token=${tenant.token}`);
    // Changed in the store only, as when the messages were published while B's subscriber was away:
    // the key is revoked and the person has left an organization.
    await a.store.db.updateTable('api_keys').set({ is_revoked: 1 }).where('id', '=', minted.id).execute();
    await a.store.db
      .deleteFrom('memberships')
      .where('user_id', '=', user)
      .where('organization_id', '=', left.orgId)
      .execute();
    await cutSubscriber(b);
    await waitFor(() => revoked.ended, 'the stream of the revoked key to end', AT_ONCE_MS);
    let round = 0;
    await waitFor(
      async () => {
        round++;
        b.ctx.events.publish({ organizationId: left.orgId, type: 'left.org', data: { round } });
        b.ctx.events.publish({ organizationId: tenant.orgId, type: 'kept.org', data: { round } });
        await ws.waitForFrame((f) => f.type === 'kept.org' && f.data.round === round, 'kept');
        return !ws.frames.some((f) => f.type === 'left.org' && f.data.round === round);
      },
      'the organization left to be dropped on B',
      AT_ONCE_MS,
    );
    expect(kept.ended).toBe(false);
    expect(ws.closed).toBe(false);
    kept.close();
    ws.close();
  });

  it('a gateway stream of a key revoked while B could not hear it ends once B is subscribed again', async () => {
    const tenant = await createTenant(a);
    await createUpstream(a, tenant, { name: 'gap', slug: 'gap', url: upstream.url });
    const minted = await mintKey(a, tenant);
    // A key-wide decision feed on B (no session): it re-checks its key only every 15 s by itself.
    const stream = await fetch(`${b.url}/v1/mcp/gap`, {
      headers: { ...keyHeader(minted.key), accept: 'text/event-stream' },
    });
    expect(stream.status).toBe(200);
    await a.store.db.updateTable('api_keys').set({ is_revoked: 1 }).where('id', '=', minted.id).execute();
    await cutSubscriber(b);
    // Resolves once the stream has ended; throws if it is still open after AT_ONCE_MS.
    await readEvents(stream, () => false, AT_ONCE_MS);
  });
});
