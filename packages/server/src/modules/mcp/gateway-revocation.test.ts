import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { useTestApp } from '../../../test/fixture.js';
import { createTenant, expectError, keyHeader } from '../../../test/helpers.js';
import { startHostileUpstream } from '../../../test/hostile-upstream.js';
import { createUpstream, rawRpc, rawSession, readEvents } from '../../../test/mcp-helpers.js';
import { type McpUpstream, startMcpUpstream } from '../../../test/mcp-upstream.js';
import { mintKey, REVOCATIONS, type Revocation, revoke } from '../../../test/revocations.js';
import { waitFor } from '../../../test/streams.js';
import { StoreUnavailableError } from '../../storage/db.js';
import { type GatewaySession, McpSessions } from './sessions.js';

let upstream: McpUpstream;

const t = useTestApp({}, { listen: true });
beforeAll(async () => {
  upstream = await startMcpUpstream({ transport: 'streamable' });
});
afterAll(async () => {
  await upstream.close();
});

/** Within this, what the key held counts as ended at once (pings, and their re-check, are 15 s apart). */
const AT_ONCE_MS = 3000;

const call = (id: number, name: string, args: Record<string, unknown>) => ({
  jsonrpc: '2.0',
  id,
  method: 'tools/call',
  params: { name, arguments: args },
});

/** An MCP initialize request from a client of that name. */
const initialize = (clientName: string) => ({
  jsonrpc: '2.0',
  id: 0,
  method: 'initialize',
  params: {
    protocolVersion: '2025-06-18',
    capabilities: {},
    clientInfo: { name: clientName, version: '1' },
  },
});

const upstreamSessions = () =>
  new Set(upstream.headers.map((h) => h['mcp-session-id']).filter((id) => typeof id === 'string'));

/** A gateway session opened with bare requests, and the id of the upstream's own session behind it. */
async function openSession(url: string, headers: Record<string, string>) {
  const before = upstreamSessions();
  const session = await rawSession(url, headers);
  const upstreamId = await waitFor(
    () => [...upstreamSessions()].find((id) => !before.has(id)),
    'the upstream session to be used',
  );
  return { session, upstreamId };
}

/** The decisions recorded in the tenant's organization. */
const recorded = (tenant: Awaited<ReturnType<typeof createTenant>>) =>
  t.store.db
    .selectFrom('decisions')
    .select(['tool_name', 'decision', 'reason'])
    .where('organization_id', '=', tenant.orgId)
    .execute();

let n = 0;
async function setup() {
  const tenant = await createTenant(t);
  const slug = `rev-${++n}`;
  await createUpstream(t, tenant, { name: slug, slug, url: upstream.url, timeoutMs: 60_000 });
  return { tenant, url: `${t.url}/v1/mcp/${slug}` };
}

describe.each(Object.keys(REVOCATIONS) as Revocation[])('MCP gateway: %s', (how) => {
  it('ends the key’s sessions at once: upstream session closed, calls in flight failed, streams ended', async () => {
    const { tenant, url } = await setup();
    const minted = await mintKey(t, tenant);
    const { session, upstreamId: upstreamSession } = await openSession(url, keyHeader(minted.key));
    // Someone else's session on the same upstream server, which must go on.
    const bystander = await setup();
    const { session: kept, upstreamId: keptUpstream } = await openSession(
      bystander.url,
      keyHeader(bystander.tenant.apiKey),
    );

    const stream = await fetch(url, { headers: session });
    const feed = await fetch(url, { headers: keyHeader(minted.key) });
    expect([stream.status, feed.status]).toEqual([200, 200]);
    const before = upstream.calls.slow ?? 0;
    const inFlight = rawRpc(url, call(7, 'slow', { ms: 30_000 }), session);
    await waitFor(() => (upstream.calls.slow ?? 0) > before, 'the call to reach the upstream');

    await revoke(t, how, tenant, minted.id);
    const answer = await inFlight;
    expect(answer.json().error.code).toBe(-32603);
    // Both streams end (readEvents returns at the end of a stream, and throws past its deadline).
    const seen = await readEvents(stream, () => false, AT_ONCE_MS);
    expect(JSON.parse(seen[0]!.data).params.sessionId).toBe(session['mcp-session-id']);
    await readEvents(feed, () => false, AT_ONCE_MS);
    await waitFor(
      () => upstream.deleted.includes(upstreamSession),
      'the upstream session to end',
      AT_ONCE_MS,
    );

    // The key is refused; the bystander's session, on the same upstream server, goes on.
    expectError(
      await t.inject({
        method: 'POST',
        url: new URL(url).pathname,
        headers: session,
        payload: call(8, 'echo', { text: 'x' }),
      }),
      401,
      'invalid_api_key',
    );
    const ok = await rawRpc(bystander.url, call(9, 'echo', { text: 'still here' }), kept);
    expect(ok.json().result.content[0].text).toBe('echo: still here');
    expect(upstream.deleted).not.toContain(keptUpstream);
  });
});

describe.each(Object.keys(REVOCATIONS) as Revocation[])('MCP gateway without a session: %s', (how) => {
  it('fails a session-less call in flight at once and ends its upstream session', async () => {
    const { tenant, url } = await setup();
    const minted = await mintKey(t, tenant);
    const before = upstream.calls.slow ?? 0;
    const sessionsBefore = upstreamSessions();
    const inFlight = rawRpc(url, call(7, 'slow', { ms: 30_000 }), keyHeader(minted.key));
    await waitFor(() => (upstream.calls.slow ?? 0) > before, 'the call to reach the upstream');
    const opened = [...upstreamSessions()].find((id) => !sessionsBefore.has(id))!;

    await revoke(t, how, tenant, minted.id);
    // Failed by the revocation, not by the upstream answering 30 s later.
    const answer = await Promise.race([
      inFlight,
      new Promise<never>((_, reject) => setTimeout(() => reject(new Error('still in flight')), AT_ONCE_MS)),
    ]);
    expect(answer.json()).toMatchObject({ id: 7, error: { code: -32603 } });
    await waitFor(() => upstream.deleted.includes(opened), 'the upstream session to end', AT_ONCE_MS);
  });
});

describe('MCP gateway: a revoked key of one project', () => {
  it("leaves the sessions of the organization's other keys alone", async () => {
    const { tenant, url } = await setup();
    const minted = await mintKey(t, tenant);
    const { session: revoked, upstreamId: revokedUpstream } = await openSession(url, keyHeader(minted.key));
    const kept = await rawSession(url, keyHeader(tenant.apiKey));
    await revoke(t, 'revoking the key', tenant, minted.id);
    await waitFor(
      () => upstream.deleted.includes(revokedUpstream),
      'the upstream session to end',
      AT_ONCE_MS,
    );
    const ok = await rawRpc(url, call(1, 'echo', { text: 'kept' }), kept);
    expect(ok.json().result.content[0].text).toBe('echo: kept');
    // The revoked key's session id is unknown even to a valid key now (it is another key's anyway).
    const gone = await rawRpc(url, call(2, 'echo', { text: 'x' }), {
      ...keyHeader(tenant.apiKey),
      'mcp-session-id': revoked['mcp-session-id']!,
    });
    expect(gone.status).toBe(404);
  });
});

describe('MCP gateway: a key revoked after its request was authenticated', () => {
  /** The next authentication answers as the key was, then the key is revoked before the route goes on. */
  function revokeRightAfterAuthentication(
    tenant: Awaited<ReturnType<typeof createTenant>>,
    minted: { id: string; key: string },
  ) {
    const keys = t.ctx.keys;
    const authenticate = keys.authenticate;
    keys.authenticate = async (raw) => {
      // Only the request of this key (another stream's heartbeat may authenticate meanwhile).
      if (raw !== minted.key) return authenticate.call(keys, raw);
      keys.authenticate = authenticate;
      const principal = await authenticate.call(keys, raw);
      await revoke(t, 'revoking the key', tenant, minted.id);
      return principal;
    };
    return () => {
      keys.authenticate = authenticate;
    };
  }

  it('opens no session: initialize answers 401 and no upstream session is opened', async () => {
    const { tenant, url } = await setup();
    const minted = await mintKey(t, tenant);
    const before = upstreamSessions();
    const restore = revokeRightAfterAuthentication(tenant, minted);
    try {
      const res = await rawRpc(url, initialize('late'), keyHeader(minted.key));
      expect(res.status).toBe(401);
      expect(res.json().error.code).toBe('invalid_api_key');
      expect(res.headers.get('mcp-session-id')).toBeNull();
    } finally {
      restore();
    }
    expect(upstreamSessions()).toEqual(before);
  });

  it('forwards no session-less call: it answers 401, records nothing and opens no upstream session', async () => {
    const { tenant, url } = await setup();
    const minted = await mintKey(t, tenant);
    const before = upstream.calls.echo ?? 0;
    const sessionsBefore = upstreamSessions();
    const restore = revokeRightAfterAuthentication(tenant, minted);
    try {
      const res = await rawRpc(url, call(3, 'echo', { text: 'late' }), keyHeader(minted.key));
      expect(res.status).toBe(401);
      expect(res.json().error.code).toBe('invalid_api_key');
    } finally {
      restore();
    }
    expect(upstream.calls.echo ?? 0).toBe(before);
    expect(upstreamSessions()).toEqual(sessionsBefore);
    expect(await recorded(tenant)).toEqual([]);
  });

  it('ends a GET stream opened meanwhile at once', async () => {
    const { tenant, url } = await setup();
    const minted = await mintKey(t, tenant);
    const restore = revokeRightAfterAuthentication(tenant, minted);
    try {
      const feed = await fetch(url, { headers: keyHeader(minted.key) });
      expect(feed.status).toBe(200);
      // readEvents returns at the end of the stream and throws past its deadline.
      await readEvents(feed, () => false, AT_ONCE_MS);
    } finally {
      restore();
    }
  });
});

describe('MCP gateway: a key whose check fails (the store) after initialize opened its session', () => {
  /** The next authentication of `key` answers (the request's own), the one after (the re-check) throws. */
  function failRecheck(key: string) {
    const keys = t.ctx.keys;
    const authenticate = keys.authenticate;
    let seen = 0;
    keys.authenticate = async (raw) => {
      // Only the requests of this key (another stream's heartbeat may authenticate meanwhile).
      if (raw !== key || ++seen === 1) return authenticate.call(keys, raw);
      keys.authenticate = authenticate;
      throw new StoreUnavailableError('the database did not answer within 6000 ms');
    };
    return () => {
      keys.authenticate = authenticate;
    };
  }

  it('ends that session only, and answers 503, not 500', async () => {
    const { tenant, url } = await setup();
    const minted = await mintKey(t, tenant);
    // The key's session opened before, which must go on.
    const { session: kept, upstreamId: keptUpstream } = await openSession(url, keyHeader(minted.key));
    const before = upstreamSessions();
    const create = vi.spyOn(McpSessions.prototype, 'create');
    const restore = failRecheck(minted.key);
    let res: Awaited<ReturnType<typeof rawRpc>>;
    let created: ReturnType<McpSessions['create']>[];
    try {
      res = await rawRpc(url, initialize('unchecked'), keyHeader(minted.key));
    } finally {
      restore();
      created = create.mock.results.map((r) => r.value);
      create.mockRestore();
    }
    // The API's answer to a store that does not answer: the client may retry.
    expect(res.status).toBe(503);
    expect(res.json().error).toEqual({
      code: 'service_unavailable',
      message: 'The store is not answering; retry',
    });
    expect(res.headers.get('mcp-session-id')).toBeNull();
    // The session initialize created is ended (it never reached the upstream); nothing else is.
    expect(created).toHaveLength(1);
    expect((created[0] as GatewaySession).closed).toBe(true);
    expect(upstreamSessions()).toEqual(before);
    const ok = await rawRpc(url, call(1, 'echo', { text: 'kept' }), kept);
    expect(ok.json().result.content[0].text).toBe('echo: kept');
    expect(upstream.deleted).not.toContain(keptUpstream);
  });
});

describe('MCP gateway: a key revoked while a session-less call opens its upstream session', () => {
  it('does not send the call, and records it as not forwarded', async () => {
    let initializing!: () => void;
    const reached = new Promise<void>((resolve) => {
      initializing = resolve;
    });
    let answerInitialize!: () => void;
    const held = new Promise<void>((resolve) => {
      answerInitialize = resolve;
    });
    // It never answers a request but initialize (none should reach it); initialize waits for the test.
    const gated = await startHostileUpstream(
      () => {},
      async () => {
        initializing();
        await held;
      },
    );
    try {
      const tenant = await createTenant(t);
      const slug = `rev-${++n}`;
      await createUpstream(t, tenant, { name: slug, slug, url: gated.url, timeoutMs: 60_000 });
      const minted = await mintKey(t, tenant);
      const answer = rawRpc(`${t.url}/v1/mcp/${slug}`, call(5, 'echo', { text: 'x' }), keyHeader(minted.key));
      await reached;
      await revoke(t, 'revoking the key', tenant, minted.id);
      answerInitialize();
      const res = await answer;
      expect(res.json()).toMatchObject({
        id: 5,
        error: { code: -32603, message: `Not forwarded to upstream "${slug}": the API key was revoked` },
      });
      expect(await recorded(tenant)).toEqual([
        {
          tool_name: 'echo',
          decision: 'allow',
          reason: expect.stringContaining('not forwarded: the API key was revoked'),
        },
      ]);
      expect(gated.requests.filter((m) => m.method !== 'initialize')).toEqual([]);
    } finally {
      answerInitialize();
      await gated.close();
    }
  });
});
