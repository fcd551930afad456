import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useTestApp } from '../../../test/fixture.js';
import { createTenant, type Tenant } from '../../../test/helpers.js';
import { createUpstream, putPolicy, rawRpc, rawSession, readEvents } from '../../../test/mcp-helpers.js';
import { type McpUpstream, startMcpUpstream, startRawUpstream } from '../../../test/mcp-upstream.js';

let upstream: McpUpstream;

const t = useTestApp({}, { listen: true });
beforeAll(async () => {
  upstream = await startMcpUpstream({ transport: 'streamable' });
});
afterAll(async () => {
  await upstream.close();
});

let n = 0;
async function setup(extra: Record<string, unknown> = {}) {
  const tenant = await createTenant(t);
  const slug = `proto-${++n}`;
  const created = await createUpstream(t, tenant, { name: slug, slug, url: upstream.url, ...extra });
  return { tenant, slug, id: created.id, url: `${t.url}/v1/mcp/${slug}` };
}

const key = (tenant: Tenant) => ({ 'x-service-api-key': tenant.apiKey });
/** The tools of the decisions recorded in the tenant's organization. */
const toolsRecorded = async (tenant: Tenant) =>
  (
    await t.store.db
      .selectFrom('decisions')
      .select('tool_name')
      .where('organization_id', '=', tenant.orgId)
      .execute()
  ).map((r) => r.tool_name);
const initialize = (id: number) => ({
  jsonrpc: '2.0',
  id,
  method: 'initialize',
  params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } },
});
const call = (id: number | string, name: string, args: Record<string, unknown>) => ({
  jsonrpc: '2.0',
  id,
  method: 'tools/call',
  params: { name, arguments: args },
});

describe('MCP data plane over plain HTTP', () => {
  it('serves bare tools/list and tools/call without initialize (stateless use)', async () => {
    const { tenant, url } = await setup();
    const list = await rawRpc(url, { jsonrpc: '2.0', id: 1, method: 'tools/list' }, key(tenant));
    expect(list.status).toBe(200);
    expect(list.headers.get('content-type')).toMatch(/application\/json/);
    expect(list.json()).toMatchObject({ jsonrpc: '2.0', id: 1, result: { tools: expect.any(Array) } });

    const res = await rawRpc(url, call('c-1', 'echo', { text: 'bare' }), {
      authorization: `Bearer ${tenant.apiKey}`,
    });
    expect(res.status).toBe(200);
    const body = res.json();
    expect(body.id).toBe('c-1');
    expect(body.result.content).toEqual([{ type: 'text', text: 'echo: bare' }]);
    expect(body.result._meta.veto_receipt.receipt_hash).toMatch(/^sha256:/);
    const row = await t.store.db
      .selectFrom('decisions')
      .select('context')
      .where('receipt_id', '=', body.result._meta.veto_receipt.receipt_id)
      .executeTakeFirstOrThrow();
    // A session-less request is in no policy session; its receipt still names the request.
    expect(JSON.parse(row.context)).toEqual({ source: 'mcp', upstream: expect.any(String) });
    const receipt = await t.store.db
      .selectFrom('receipts')
      .select('payload')
      .where('receipt_id', '=', body.result._meta.veto_receipt.receipt_id)
      .executeTakeFirstOrThrow();
    expect(JSON.parse(receipt.payload).connection_id).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('denies a session-limited tool called without a session, as validate does without context.session_id', async () => {
    const { tenant, url } = await setup();
    await putPolicy(t, tenant.orgId, 'echo', {
      mode: 'deterministic',
      constraints: [],
      sessionConstraints: { maxCalls: 100 },
    });
    const before = upstream.calls.echo ?? 0;
    for (const id of [1, 2]) {
      const res = await rawRpc(url, call(id, 'echo', { text: 'x' }), key(tenant));
      expect(res.json()).toMatchObject({ id, error: { code: -32001 } });
      expect(res.json().error.data.reason).toMatch(/context\.session_id is required/);
    }
    expect(upstream.calls.echo ?? 0).toBe(before);
  });

  it('answers as an SSE stream when the client accepts only text/event-stream', async () => {
    const { tenant, url } = await setup();
    const res = await rawRpc(url, call(7, 'echo', { text: 'sse' }), {
      ...key(tenant),
      accept: 'text/event-stream',
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/text\/event-stream/);
    const data = /^data: (.*)$/m.exec(res.text)![1]!;
    expect(JSON.parse(data)).toMatchObject({
      id: 7,
      result: { content: [{ type: 'text', text: 'echo: sse' }] },
    });
  });

  it('answers malformed JSON-RPC with HTTP 400 and -32600 (-32700 for a body that is not JSON)', async () => {
    const { tenant, url } = await setup();
    const bad: unknown[] = [
      [],
      [{ jsonrpc: '2.0', id: 1, method: 'ping' }],
      { id: 1, method: 'ping' },
      { jsonrpc: '1.0', id: 1, method: 'ping' },
      { jsonrpc: '2.0', id: 1 },
      { jsonrpc: '2.0', id: 1, method: '' },
      { jsonrpc: '2.0', id: 1, method: 'tools/call', params: [1, 2] },
      { jsonrpc: '2.0', id: null, method: 'ping' },
      { jsonrpc: '2.0', id: 1.5, method: 'ping' },
      // Past 2^53-1 JSON.parse rounds: answered, the id would not be the one sent.
      { jsonrpc: '2.0', id: 2 ** 53, method: 'ping' },
      { jsonrpc: '2.0', id: -(2 ** 53), method: 'ping' },
      { jsonrpc: '2.0', id: 1e30, method: 'ping' },
      'just a string',
    ];
    for (const body of bad) {
      const res = await rawRpc(url, JSON.stringify(body), key(tenant));
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.json().error.code, JSON.stringify(body)).toBe(-32600);
      expect(res.json().jsonrpc).toBe('2.0');
    }
    const rounded = await rawRpc(url, '{"jsonrpc":"2.0","id":9007199254740993,"method":"ping"}', key(tenant));
    expect(rounded.status).toBe(400);
    expect(rounded.json()).toMatchObject({ id: null, error: { code: -32600 } });
    const largest = await rawRpc(
      url,
      { jsonrpc: '2.0', id: Number.MAX_SAFE_INTEGER, method: 'ping' },
      key(tenant),
    );
    expect(largest.status).toBe(200);
    expect(largest.json().id).toBe(Number.MAX_SAFE_INTEGER);
    const notJson = await rawRpc(url, '{"jsonrpc":', key(tenant));
    expect(notJson.status).toBe(400);
    expect(notJson.json()).toMatchObject({ id: null, error: { code: -32700 } });
    // A well-formed request whose tools/call params are unusable: answered in JSON-RPC, with its id.
    const badParams = await rawRpc(
      url,
      { jsonrpc: '2.0', id: 3, method: 'tools/call', params: {} },
      key(tenant),
    );
    expect(badParams.status).toBe(200);
    expect(badParams.json()).toMatchObject({ id: 3, error: { code: -32600 } });
    const badArgs = await rawRpc(
      url,
      { ...call(4, 'echo', {}), params: { name: 'echo', arguments: [] } },
      key(tenant),
    );
    expect(badArgs.json()).toMatchObject({ id: 4, error: { code: -32600 } });
    let deep: Record<string, unknown> = {};
    for (let i = 0; i < 100; i++) deep = { d: deep };
    const tooDeep = await rawRpc(url, call(5, 'echo', deep), key(tenant));
    expect(tooDeep.json()).toMatchObject({ id: 5, error: { code: -32600 } });
  });

  it('answers a __proto__ or constructor.prototype key with HTTP 400 and -32600 carrying the id, calling nothing', async () => {
    const { tenant, url } = await setup();
    const before = upstream.calls.echo ?? 0;
    const bodies: [string, string | number | null][] = [
      [
        '{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x","__proto__":{"admin":true}}}}',
        9,
      ],
      [
        '{"jsonrpc":"2.0","id":"c-1","method":"tools/call","params":{"name":"echo","arguments":{"constructor":{"prototype":{"admin":true}}}}}',
        'c-1',
      ],
      // An id only under the forbidden key is no id of the message.
      ['{"jsonrpc":"2.0","__proto__":{"id":3},"method":"ping"}', null],
      ['{"__proto__":{},"jsonrpc":"2.0","id":1.5,"method":"ping"}', null],
    ];
    for (const [body, id] of bodies) {
      const res = await rawRpc(url, body, key(tenant));
      expect(res.status, body).toBe(400);
      expect(res.json(), body).toMatchObject({ jsonrpc: '2.0', id, error: { code: -32600 } });
      expect(res.json().error.message).toMatch(/__proto__ or constructor\.prototype/);
    }
    // Not JSON at all is still a parse error.
    const notJson = await rawRpc(url, '{"jsonrpc":"2.0","id":9,"__proto__":', key(tenant));
    expect(notJson.json()).toMatchObject({ id: null, error: { code: -32700 } });
    expect(upstream.calls.echo ?? 0).toBe(before);
    expect(({} as Record<string, unknown>).admin).toBeUndefined();
    expect(await toolsRecorded(tenant)).toEqual([]);
  });

  it('answers a body that is not UTF-8 with HTTP 400 and -32600 carrying the id, calling nothing', async () => {
    const { tenant, url } = await setup();
    const before = upstream.calls.echo ?? 0;
    const post = (body: Buffer) =>
      fetch(url, {
        method: 'POST',
        headers: { ...key(tenant), 'content-type': 'application/json', accept: 'application/json' },
        body,
      });
    // 0xFF 0xFE is no UTF-8: read as U+FFFD, the name checked and the one forwarded would be "echo\uFFFD\uFFFD".
    const bad = (id: string, tail: string) =>
      Buffer.concat([
        Buffer.from(`{"jsonrpc":"2.0","id":${id},"method":"tools/call","params":{"name":"echo`),
        Buffer.from([0xff, 0xfe]),
        Buffer.from(tail),
      ]);
    for (const [body, id] of [
      [bad('11', '","arguments":{"text":"x"}}}'), 11],
      [bad('"u-1"', '","arguments":{"text":"x"}}}'), 'u-1'],
    ] as const) {
      const res = await post(body);
      expect(res.status).toBe(400);
      expect(await res.json()).toMatchObject({
        jsonrpc: '2.0',
        id,
        error: { code: -32600, message: 'Invalid Request: body is not valid UTF-8' },
      });
    }
    // Not JSON either: still a parse error.
    const notJson = await post(bad('12', '"'));
    expect(notJson.status).toBe(400);
    expect(await notJson.json()).toMatchObject({ id: null, error: { code: -32700 } });
    expect(upstream.calls.echo ?? 0).toBe(before);
    expect(await toolsRecorded(tenant)).toEqual([]);
  });

  it('refuses a tools/call whose name validate would refuse (length, control characters), recording nothing', async () => {
    const { tenant, url } = await setup();
    const before = upstream.calls.echo ?? 0;
    const names: [number, string][] = [
      [1, 'echo\u0001'],
      [2, '\u001f'],
      [3, 'e'.repeat(201)],
      [4, 'e'.repeat(5000)],
    ];
    for (const [id, name] of names) {
      const res = await rawRpc(url, call(id, name, { text: 'x' }), key(tenant));
      expect(res.status).toBe(200);
      expect(res.json()).toMatchObject({ id, error: { code: -32600 } });
      expect(res.json().error.message).toMatch(/params\.name must be 1-200 characters/);
    }
    expect(upstream.calls.echo ?? 0).toBe(before);
    expect(await toolsRecorded(tenant)).toEqual([]);
    // 200 characters are a name: checked and forwarded (the fixture has no such tool).
    const longest = await rawRpc(url, call(5, 'e'.repeat(200), {}), key(tenant));
    expect(longest.json().id).toBe(5);
    expect(longest.json().error?.message ?? '').not.toMatch(/params\.name/);
    expect(await toolsRecorded(tenant)).toEqual(['e'.repeat(200)]);
  });

  it('passes any other method to the upstream, whose own answer (even -32601) comes back unchanged', async () => {
    const { tenant, url } = await setup();
    const templates = await rawRpc(
      url,
      { jsonrpc: '2.0', id: 1, method: 'resources/templates/list' },
      key(tenant),
    );
    expect(templates.json().id).toBe(1);
    const seen = upstream.headers.length;
    for (const method of ['tools/delete', 'logging/setLevel']) {
      const res = await rawRpc(
        url,
        { jsonrpc: '2.0', id: 2, method, params: { level: 'info' } },
        key(tenant),
      );
      expect(res.status, method).toBe(200);
      // The fixture declares no logging capability: the SDK server itself answers -32601.
      expect(res.json(), method).toMatchObject({ id: 2, error: { code: -32601 } });
      expect(res.json().error.message, method).toMatch(/not found/i);
    }
    expect(upstream.headers.length).toBeGreaterThan(seen);
  });

  it('accepts notifications and responses with 202 and no body', async () => {
    const { tenant, url } = await setup();
    const res = await rawRpc(url, { jsonrpc: '2.0', method: 'notifications/initialized' }, key(tenant));
    expect(res.status).toBe(202);
    expect(res.text).toBe('');
  });

  it('refuses a tools/call sent as a notification (no id) with HTTP 400, forwarding and recording nothing', async () => {
    const raw = await startRawUpstream(() => ({ result: {} }));
    try {
      const tenant = await createTenant(t);
      const slug = `proto-${++n}`;
      await createUpstream(t, tenant, { name: slug, slug, url: raw.url });
      const url = `${t.url}/v1/mcp/${slug}`;
      const session = await rawSession(url, key(tenant));
      const sneaked = { jsonrpc: '2.0', method: 'tools/call', params: { name: 'echo', arguments: {} } };
      for (const headers of [session, key(tenant)]) {
        const res = await rawRpc(url, sneaked, headers);
        expect(res.status).toBe(400);
        expect(res.json()).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: -32600 } });
      }
      // Notifications go upstream in order: once the next one arrived, the refused one would have too.
      const marker = { jsonrpc: '2.0', method: 'notifications/roots/list_changed' };
      expect((await rawRpc(url, marker, session)).status).toBe(202);
      const deadline = Date.now() + 5000;
      while (!raw.notified.includes(marker.method) && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 10));
      expect(raw.notified).toContain(marker.method);
      expect(raw.notified).not.toContain('tools/call');
      expect(raw.seen).toEqual([]);
      expect(await toolsRecorded(tenant)).toEqual([]);
    } finally {
      await raw.close();
    }
  });

  it('needs an API key: 401 without or with a bad one, 403 for a user token', async () => {
    const { tenant, url } = await setup();
    const ping = { jsonrpc: '2.0', id: 1, method: 'ping' };
    const none = await rawRpc(url, ping);
    expect(none.status).toBe(401);
    expect(none.json()).toMatchObject({ error: { code: 'unauthorized' } });
    const badKey = await rawRpc(url, ping, { 'x-service-api-key': 'svc_nope' });
    expect(badKey.status).toBe(401);
    expect(badKey.json()).toMatchObject({ error: { code: 'invalid_api_key' } });
    const badBearer = await rawRpc(url, ping, { authorization: 'Bearer svc_nope' });
    expect(badBearer.json()).toMatchObject({ error: { code: 'invalid_api_key' } });
    const user = await rawRpc(url, ping, { authorization: `Bearer ${tenant.token}` });
    expect(user.status).toBe(403);
    const stream = await fetch(url);
    expect(stream.status).toBe(401);
    expect(await stream.json()).toMatchObject({ error: { code: 'unauthorized' } });
    const charter = await rawRpc(`${t.url}/v1/mcp/charter`, ping);
    expect(charter.status).toBe(401);
  });

  it("keeps organizations apart: another organization's key cannot use or see the upstream", async () => {
    const a = await setup();
    const b = await createTenant(t);
    const before = upstream.calls.echo ?? 0;
    const res = await rawRpc(a.url, call(1, 'echo', { text: 'x' }), key(b));
    expect(res.status).toBe(404);
    expect(res.json()).toMatchObject({ error: { code: 'not_found' } });
    expect(upstream.calls.echo ?? 0).toBe(before);
    const init = await rawRpc(a.url, { jsonrpc: '2.0', id: 1, method: 'initialize', params: {} }, key(b));
    expect(init.status).toBe(404);
    const stream = await fetch(a.url, { headers: key(b) });
    expect(stream.status).toBe(404);
    await stream.body?.cancel();

    // Nor can it join a session of the owner.
    const owned = await rawRpc(
      a.url,
      { jsonrpc: '2.0', id: 1, method: 'initialize', params: {} },
      key(a.tenant),
    );
    const sid = owned.headers.get('mcp-session-id')!;
    const b2 = await createUpstream(t, b, { name: 'same', slug: a.slug, url: upstream.url });
    expect(b2.slug).toBe(a.slug);
    const joined = await rawRpc(a.url, call(2, 'echo', { text: 'x' }), { ...key(b), 'mcp-session-id': sid });
    expect(joined.status).toBe(404);
  });

  it("keeps a project's upstream to that project's keys", async () => {
    const { tenant, url } = await setup();
    const second = await t.inject({
      method: 'POST',
      url: '/v1/projects',
      headers: { authorization: `Bearer ${tenant.token}` },
      payload: { organizationId: tenant.orgId, name: 'Other' },
    });
    const slug = `scoped-${n}`;
    await createUpstream(t, tenant, { name: slug, slug, url: upstream.url, projectId: tenant.projectId });
    const scopedUrl = `${t.url}/v1/mcp/${slug}`;
    const own = await rawRpc(scopedUrl, { jsonrpc: '2.0', id: 1, method: 'ping' }, key(tenant));
    expect(own.json()).toEqual({ jsonrpc: '2.0', id: 1, result: {} });
    const other = await rawRpc(
      scopedUrl,
      { jsonrpc: '2.0', id: 1, method: 'ping' },
      {
        'x-service-api-key': second.json().apiKey,
      },
    );
    expect(other.status).toBe(404);
    // The organization-wide upstream serves both.
    const shared = await rawRpc(
      url,
      { jsonrpc: '2.0', id: 1, method: 'ping' },
      {
        'x-service-api-key': second.json().apiKey,
      },
    );
    expect(shared.status).toBe(200);
  });

  it('answers 404 for an unknown slug and 503 for a disabled upstream', async () => {
    const { tenant, id, url } = await setup();
    const unknown = await rawRpc(
      `${t.url}/v1/mcp/nope-nope`,
      { jsonrpc: '2.0', id: 1, method: 'ping' },
      key(tenant),
    );
    expect(unknown.status).toBe(404);
    await t.inject({
      method: 'PATCH',
      url: `/v1/mcp/upstreams/${id}`,
      headers: key(tenant),
      payload: { enabled: false },
    });
    const disabled = await rawRpc(url, call(1, 'echo', { text: 'x' }), key(tenant));
    expect(disabled.status).toBe(503);
    expect(disabled.json()).toMatchObject({ error: { code: 'service_unavailable' } });
  });

  it('issues a session on initialize, refuses unknown sessions with 404 and ends sessions on DELETE', async () => {
    const { tenant, slug, url } = await setup();
    const init = await rawRpc(
      url,
      {
        jsonrpc: '2.0',
        id: 1,
        method: 'initialize',
        params: {
          protocolVersion: '2025-03-26',
          capabilities: {},
          clientInfo: { name: 'raw', version: '1' },
        },
      },
      key(tenant),
    );
    expect(init.status).toBe(200);
    const sid = init.headers.get('mcp-session-id');
    expect(sid).toMatch(/^[0-9a-f-]{36}$/);
    // The upstream's own answer to the client's initialize; the session id is the gateway's.
    expect(init.json().result).toMatchObject({
      protocolVersion: '2025-03-26',
      capabilities: { tools: expect.any(Object), resources: expect.any(Object) },
      serverInfo: { name: 'fixture-upstream' },
    });
    expect(slug).toMatch(/^proto-/);
    const withSession = { ...key(tenant), 'mcp-session-id': sid! };
    const ok = await rawRpc(url, call(2, 'echo', { text: 's' }), withSession);
    expect(ok.status).toBe(200);
    const unknown = await rawRpc(url, call(3, 'echo', { text: 's' }), {
      ...key(tenant),
      'mcp-session-id': 'nope',
    });
    expect(unknown.status).toBe(404);
    const stream = await fetch(url, { headers: withSession });
    const del = await fetch(url, { method: 'DELETE', headers: withSession });
    expect(del.status).toBe(204);
    // Its event stream ends with it (readEvents returns at the end of the stream).
    const seen = await readEvents(stream, () => false);
    expect(JSON.parse(seen[0]!.data).params.sessionId).toBe(sid);
    const gone = await rawRpc(url, call(4, 'echo', { text: 's' }), withSession);
    expect(gone.status).toBe(404);
    const unversioned = await rawRpc(
      url,
      {
        jsonrpc: '2.0',
        id: 5,
        method: 'initialize',
        params: {
          protocolVersion: '1999-01-01',
          capabilities: {},
          clientInfo: { name: 'raw', version: '1' },
        },
      },
      key(tenant),
    );
    expect(unversioned.json().result.protocolVersion).toMatch(/^\d{4}-\d{2}-\d{2}$/);
    expect(unversioned.json().result.protocolVersion).not.toBe('1999-01-01');
  });

  it("answers 400 to an MCP-Protocol-Version other than the session's, or one it cannot speak without a session", async () => {
    const { tenant, url } = await setup();
    const init = await rawRpc(url, initialize(1), key(tenant));
    const sid = init.headers.get('mcp-session-id')!;
    expect(init.json().result.protocolVersion).toBe('2025-06-18');
    const inSession = (version: string) => ({
      ...key(tenant),
      'mcp-session-id': sid,
      'mcp-protocol-version': version,
    });
    const agreed = await rawRpc(url, call(2, 'echo', { text: 'a' }), inSession('2025-06-18'));
    expect(agreed.status).toBe(200);
    for (const version of ['1999-01-01', '2025-03-26']) {
      const other = await rawRpc(url, call(3, 'echo', { text: 'b' }), inSession(version));
      expect(other.status, version).toBe(400);
      expect(other.json().error).toMatchObject({ code: 'validation_failed' });
      expect(other.json().error.message).toContain('2025-06-18');
      const stream = await fetch(url, { headers: inSession(version) });
      expect(stream.status, version).toBe(400);
      await stream.body?.cancel();
    }
    const stateless = (version: string) => ({ ...key(tenant), 'mcp-protocol-version': version });
    expect((await rawRpc(url, call(4, 'echo', { text: 'c' }), stateless('2025-03-26'))).status).toBe(200);
    const unsupported = await rawRpc(url, call(5, 'echo', { text: 'd' }), stateless('1999-01-01'));
    expect(unsupported.status).toBe(400);
    expect(unsupported.json().error.message).toContain('not supported');
    // Nothing was forwarded or recorded for the refused calls.
    expect((await toolsRecorded(tenant)).length).toBe(2);
  });

  it('ends a session whose upstream configuration was changed through another instance', async () => {
    const { tenant, id, url } = await setup();
    const session = await rawSession(url, key(tenant));
    const list = { jsonrpc: '2.0', id: 1, method: 'tools/list' };
    expect((await rawRpc(url, list, session)).status).toBe(200);
    const deletedBefore = upstream.deleted.length;
    // What a PATCH on another instance leaves in the shared store (this instance is not told).
    await t.store.db
      .updateTable('mcp_upstreams')
      .set({ timeout_ms: 5000, updated_at: new Date(Date.now() + 60_000).toISOString() })
      .where('id', '=', id)
      .execute();
    // Within the directory's second, the session is gone: 404, and its upstream session ended.
    const deadline = Date.now() + 10_000;
    let status = 200;
    while (status === 200 && Date.now() < deadline) {
      status = (await rawRpc(url, list, session)).status;
      if (status === 200) await new Promise((r) => setTimeout(r, 50));
    }
    expect(status).toBe(404);
    while (upstream.deleted.length === deletedBefore && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 10));
    expect(upstream.deleted.length).toBe(deletedBefore + 1);
    // A new session runs with the configuration as it is now.
    const fresh = await rawSession(url, key(tenant));
    expect((await rawRpc(url, list, fresh)).status).toBe(200);
  });

  it('streams the session id and the decisions of the session on GET', async () => {
    const { tenant, url } = await setup();
    await putPolicy(t, tenant.orgId, 'pay', {
      mode: 'deterministic',
      constraints: [{ argumentName: 'amount', enabled: true, maximum: 10 }],
    });
    const init = await rawRpc(url, initialize(1), key(tenant));
    const sid = init.headers.get('mcp-session-id')!;
    const stream = await fetch(url, {
      headers: { ...key(tenant), 'mcp-session-id': sid, accept: 'text/event-stream' },
    });
    expect(stream.status).toBe(200);
    expect(stream.headers.get('content-type')).toMatch(/text\/event-stream/);
    // A call outside the session does not appear on it.
    await rawRpc(url, call(9, 'pay', { amount: 99 }), key(tenant));
    const denied = await rawRpc(url, call(2, 'pay', { amount: 99 }), {
      ...key(tenant),
      'mcp-session-id': sid,
    });
    expect(denied.json().error.code).toBe(-32001);
    const events = await readEvents(stream, (e) => e.some((x) => x.event === 'decision'));
    expect(JSON.parse(events[0]!.data)).toEqual({
      jsonrpc: '2.0',
      method: 'notifications/session',
      params: { sessionId: sid },
    });
    const decisions = events.filter((e) => e.event === 'decision').map((e) => JSON.parse(e.data));
    expect(decisions).toHaveLength(1);
    expect(decisions[0]).toMatchObject({
      type: 'decision',
      decision: 'deny',
      toolName: 'pay',
      sessionId: sid,
      decisionId: denied.json().error.data.decisionId,
      receipt: { receipt_hash: expect.stringMatching(/^sha256:/) },
    });
  });

  it('without a session, the stream follows every call of the key on the upstream', async () => {
    const { tenant, url } = await setup();
    const stream = await fetch(url, { headers: key(tenant) });
    expect(stream.headers.get('mcp-session-id')).toBeNull();
    const res = await rawRpc(url, call(1, 'echo', { text: 'watched' }), key(tenant));
    const events = await readEvents(stream, (e) => e.some((x) => x.event === 'decision'));
    expect(events.filter((e) => e.event !== 'decision')).toEqual([]);
    const decision = JSON.parse(events.find((e) => e.event === 'decision')!.data);
    expect(decision).toMatchObject({ decision: 'allow', toolName: 'echo' });
    expect(decision.receipt).toEqual(res.json().result._meta.veto_receipt);
  });

  it("bounds the key's open decision feeds: 409 past 16 until one ends", async () => {
    const { tenant, url } = await setup();
    const other = await setup();
    const feed = (headers: Record<string, string>, signal?: AbortSignal) =>
      fetch(url, { headers, ...(signal ? { signal } : {}) });
    const open: { res: Response; abort: AbortController }[] = [];
    for (let i = 0; i < 16; i++) {
      const abort = new AbortController();
      open.push({ res: await feed(key(tenant), abort.signal), abort });
    }
    expect(open.map((f) => f.res.status)).toEqual(Array(16).fill(200));
    const next = await feed(key(tenant));
    expect(next.status).toBe(409);
    expect(await next.json()).toEqual({
      error: {
        code: 'conflict',
        message:
          'At most 16 open decision feeds (GET without Mcp-Session-Id) per API key on this instance; close one first',
      },
    });
    // The bound is the key's, whatever the upstream.
    const second = await createUpstream(t, tenant, {
      name: `${n}-b`,
      slug: `proto-${n}-b`,
      url: upstream.url,
    });
    const elsewhere = await fetch(`${t.url}/v1/mcp/${second.slug}`, { headers: key(tenant) });
    expect(elsewhere.status).toBe(409);
    // A session's own stream is not a feed, and another key has its own.
    const session = await rawSession(url, key(tenant));
    const sessionStream = await fetch(url, { headers: session });
    expect(sessionStream.status).toBe(200);
    const otherFeed = await fetch(other.url, { headers: key(other.tenant) });
    expect(otherFeed.status).toBe(200);
    // A client that goes away frees its slot.
    open.shift()!.abort.abort();
    let again = await feed(key(tenant));
    for (const deadline = Date.now() + 5000; again.status === 409 && Date.now() < deadline; ) {
      await again.body?.cancel();
      await new Promise((r) => setTimeout(r, 20));
      again = await feed(key(tenant));
    }
    expect(again.status).toBe(200);
    expect((await feed(key(tenant))).status).toBe(409);
    for (const s of [again, sessionStream, otherFeed, ...open.map((f) => f.res)]) await s.body?.cancel();
  });
});
