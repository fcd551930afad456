import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useTestApp } from '../../../test/fixture.js';
import {
  asUser,
  bearer,
  createTenant,
  expectError,
  keyHeader,
  type Tenant,
  withTestApp,
} from '../../../test/helpers.js';
import { type McpUpstream, startMcpUpstream } from '../../../test/mcp-upstream.js';

let streamable: McpUpstream;
let sse: McpUpstream;

const t = useTestApp();
beforeAll(async () => {
  streamable = await startMcpUpstream({ transport: 'streamable' });
  sse = await startMcpUpstream({ transport: 'sse' });
});
afterAll(async () => {
  await streamable.close();
  await sse.close();
});

const UNKNOWN = '00000000-0000-7000-8000-000000000000';
let n = 0;
const body = (extra: Record<string, unknown> = {}) => ({
  name: 'Files',
  slug: `files-${++n}`,
  url: 'http://127.0.0.1:9/mcp',
  ...extra,
});

const create = (tenant: Tenant, payload: Record<string, unknown>) =>
  t.inject({ method: 'POST', url: '/v1/mcp/upstreams', headers: keyHeader(tenant.apiKey), payload });

describe('MCP upstreams (control plane)', () => {
  it('creates with defaults and never shows header values', async () => {
    const tenant = await createTenant(t);
    const res = await create(
      tenant,
      body({ headers: { Authorization: 'Bearer top-secret', 'X-Team': 'a' } }),
    );
    expect(res.statusCode).toBe(201);
    const up = res.json();
    expect(up).toEqual({
      id: expect.stringMatching(/^[0-9a-f-]{36}$/),
      name: 'Files',
      slug: `files-${n}`,
      transport: 'mcp-streamable-http',
      url: 'http://127.0.0.1:9/mcp',
      timeoutMs: 30_000,
      enabled: true,
      projectId: null,
      headers: { Authorization: '***', 'X-Team': '***' },
      createdAt: expect.any(String),
      updatedAt: up.createdAt,
    });
    expect(res.body).not.toContain('top-secret');
    const got = await t.inject({ method: 'GET', url: `/v1/mcp/upstreams/${up.id}`, headers: asUser(tenant) });
    expect(got.json()).toEqual(up);
  });

  it('lists, filters by project, updates and deletes, with a user token or an API key', async () => {
    const tenant = await createTenant(t);
    const user = asUser(tenant);
    const a = (
      await t.inject({
        method: 'POST',
        url: '/v1/mcp/upstreams',
        headers: user,
        payload: body({ transport: 'mcp-sse' }),
      })
    ).json();
    const b = (
      await create(tenant, body({ projectId: tenant.projectId, timeoutMs: 100, enabled: false }))
    ).json();
    expect(b).toMatchObject({ projectId: tenant.projectId, timeoutMs: 100, enabled: false });

    const all = await t.inject({
      method: 'GET',
      url: '/v1/mcp/upstreams',
      headers: keyHeader(tenant.apiKey),
    });
    expect(all.json().data.map((u: { id: string }) => u.id)).toEqual([a.id, b.id]);
    const filtered = await t.inject({
      method: 'GET',
      url: `/v1/mcp/upstreams?projectId=${tenant.projectId}`,
      headers: user,
    });
    expect(filtered.json().data.map((u: { id: string }) => u.id)).toEqual([b.id]);

    const patched = await t.inject({
      method: 'PATCH',
      url: `/v1/mcp/upstreams/${a.id}`,
      headers: user,
      payload: {
        name: 'Renamed',
        slug: `renamed-${n}`,
        transport: 'mcp-streamable-http',
        url: 'https://mcp.example.com/mcp',
        timeoutMs: 120_000,
        enabled: false,
        headers: { 'X-Key': 'v' },
        projectId: tenant.projectId,
      },
    });
    expect(patched.statusCode).toBe(200);
    expect(patched.json()).toMatchObject({
      id: a.id,
      name: 'Renamed',
      slug: `renamed-${n}`,
      transport: 'mcp-streamable-http',
      url: 'https://mcp.example.com/mcp',
      timeoutMs: 120_000,
      enabled: false,
      headers: { 'X-Key': '***' },
      projectId: tenant.projectId,
    });
    const cleared = await t.inject({
      method: 'PATCH',
      url: `/v1/mcp/upstreams/${a.id}`,
      headers: keyHeader(tenant.apiKey),
      payload: { projectId: null, headers: {} },
    });
    expect(cleared.json()).toMatchObject({ projectId: null, headers: {}, name: 'Renamed' });

    const del = await t.inject({ method: 'DELETE', url: `/v1/mcp/upstreams/${a.id}`, headers: user });
    expect(del.json()).toEqual({ success: true });
    expectError(
      await t.inject({ method: 'DELETE', url: `/v1/mcp/upstreams/${a.id}`, headers: user }),
      404,
      'not_found',
    );
    expectError(
      await t.inject({ method: 'GET', url: `/v1/mcp/upstreams/${a.id}`, headers: user }),
      404,
      'not_found',
    );
  });

  it('refuses invalid configurations with 400 validation_failed', async () => {
    const tenant = await createTenant(t);
    const cases: Record<string, unknown>[] = [
      body({ transport: 'mcp-stdio', command: 'npx', args: ['server'] }),
      body({ transport: 'mcp-stdio' }),
      body({ command: 'node' }),
      body({ args: ['--stdio'] }),
      body({ command: 1 }),
      body({ transport: 'websocket' }),
      body({ url: 'ftp://example.com/mcp' }),
      body({ url: 'not a url' }),
      body({ url: 'http://user:pass@example.com/mcp' }),
      body({ url: undefined }),
      body({ timeoutMs: 99 }),
      body({ timeoutMs: 120_001 }),
      body({ timeoutMs: 1000.5 }),
      body({ slug: 'Not_A_Slug' }),
      body({ slug: 'x'.repeat(101) }),
      body({ slug: 'charter' }),
      body({ slug: 'upstreams' }),
      body({ name: '' }),
      body({ name: 'x'.repeat(101) }),
      body({ headers: { 'bad header': 'x' } }),
      body({ headers: { 'Content-Type': 'text/plain' } }),
      body({ headers: { 'Mcp-Session-Id': 'x' } }),
      body({ headers: { 'X-A': 'line\r\nInjected: 1' } }),
      body({ headers: { 'X-A': 1 } }),
      body({ enabled: 'yes' }),
      body({ unknownField: 1 }),
    ];
    for (const payload of cases) {
      const res = await create(tenant, payload);
      if (res.statusCode !== 400)
        throw new Error(`${JSON.stringify(payload)} → ${res.statusCode} ${res.body}`);
      expectError(res, 400, 'validation_failed');
    }
    const stdio = await create(tenant, body({ transport: 'mcp-stdio' }));
    expect(stdio.json().error.message).toMatch(/"mcp-stdio" is not supported/);
    const up = (await create(tenant, body())).json();
    for (const payload of [
      { transport: 'mcp-stdio' },
      { url: 'file:///etc/passwd' },
      { timeoutMs: 0 },
      { args: ['server'] },
      { command: 'node', args: [] },
    ]) {
      expectError(
        await t.inject({
          method: 'PATCH',
          url: `/v1/mcp/upstreams/${up.id}`,
          headers: keyHeader(tenant.apiKey),
          payload,
        }),
        400,
        'validation_failed',
      );
    }
    expectError(
      await t.inject({ method: 'GET', url: '/v1/mcp/upstreams', headers: bearer(tenant.token) }),
      400,
      'missing_organization',
    );
    expectError(await t.inject({ method: 'GET', url: '/v1/mcp/upstreams' }), 401, 'unauthorized');
  });

  it('takes an empty command and args (no process to start), as the spec lists them among the fields', async () => {
    const tenant = await createTenant(t);
    for (const extra of [
      { command: '', args: [] },
      { command: null, args: null },
    ]) {
      const res = await create(tenant, body(extra));
      expect(res.statusCode, res.body).toBe(201);
      const patched = await t.inject({
        method: 'PATCH',
        url: `/v1/mcp/upstreams/${res.json().id}`,
        headers: keyHeader(tenant.apiKey),
        payload: { ...extra, timeoutMs: 5000 },
      });
      expect(patched.statusCode, patched.body).toBe(200);
      expect(patched.json().timeoutMs).toBe(5000);
    }
  });

  it('answers 409 slug_taken for a slug in use in the organization, and 404 for an unknown project', async () => {
    const tenant = await createTenant(t);
    const first = (await create(tenant, body())).json();
    expectError(await create(tenant, body({ slug: first.slug })), 409, 'slug_taken');
    const second = (await create(tenant, body())).json();
    expectError(
      await t.inject({
        method: 'PATCH',
        url: `/v1/mcp/upstreams/${second.id}`,
        headers: keyHeader(tenant.apiKey),
        payload: { slug: first.slug },
      }),
      409,
      'slug_taken',
    );
    // Another organization may use the same slug.
    const other = await createTenant(t);
    expect((await create(other, body({ slug: first.slug }))).statusCode).toBe(201);
    expectError(await create(tenant, body({ projectId: UNKNOWN })), 404, 'not_found');
    expectError(await create(tenant, body({ projectId: other.projectId })), 404, 'not_found');
  });

  it("isolates organizations: another organization's upstream is not found", async () => {
    const a = await createTenant(t);
    const b = await createTenant(t);
    const up = (await create(a, body())).json();
    for (const headers of [keyHeader(b.apiKey), asUser(b)]) {
      for (const [method, url, payload] of [
        ['GET', `/v1/mcp/upstreams/${up.id}`, undefined],
        ['PATCH', `/v1/mcp/upstreams/${up.id}`, { name: 'pwned' }],
        ['DELETE', `/v1/mcp/upstreams/${up.id}`, undefined],
        ['POST', `/v1/mcp/upstreams/${up.id}/test`, undefined],
      ] as const) {
        expectError(
          await t.inject({ method, url, headers, ...(payload ? { payload } : {}) }),
          404,
          'not_found',
        );
      }
      const list = await t.inject({ method: 'GET', url: '/v1/mcp/upstreams', headers });
      expect(list.json().data).toEqual([]);
    }
    // b's user naming a's organization is not a member there.
    expectError(
      await t.inject({
        method: 'GET',
        url: '/v1/mcp/upstreams',
        headers: { ...bearer(b.token), 'x-organization-id': a.orgId },
      }),
      403,
      'authorization_error',
    );
    const still = await t.inject({
      method: 'GET',
      url: `/v1/mcp/upstreams/${up.id}`,
      headers: keyHeader(a.apiKey),
    });
    expect(still.json().name).toBe('Files');
  });

  it("keeps a project's API key out of other projects' upstreams", async () => {
    const tenant = await createTenant(t);
    // A second project of the same organization, with its own key.
    const other = (
      await t.inject({
        method: 'POST',
        url: '/v1/projects',
        headers: bearer(tenant.token),
        payload: { organizationId: tenant.orgId, name: 'Other' },
      })
    ).json();
    const otherKey = keyHeader(other.apiKey as string);
    const user = asUser(tenant);
    const mine = (await create(tenant, body({ projectId: tenant.projectId }))).json();
    const shared = (await create(tenant, body())).json();
    const theirs = (
      await t.inject({
        method: 'POST',
        url: '/v1/mcp/upstreams',
        headers: user,
        payload: body({ projectId: other._id, headers: { Authorization: 'Bearer theirs' } }),
      })
    ).json();
    expect(theirs.projectId).toBe(other._id);

    for (const [method, url, payload] of [
      ['GET', `/v1/mcp/upstreams/${theirs.id}`, undefined],
      ['PATCH', `/v1/mcp/upstreams/${theirs.id}`, { url: 'http://127.0.0.1:1/steal' }],
      ['PATCH', `/v1/mcp/upstreams/${theirs.id}`, { projectId: tenant.projectId }],
      ['DELETE', `/v1/mcp/upstreams/${theirs.id}`, undefined],
      ['POST', `/v1/mcp/upstreams/${theirs.id}/test`, undefined],
    ] as const) {
      expectError(
        await t.inject({ method, url, headers: keyHeader(tenant.apiKey), ...(payload ? { payload } : {}) }),
        404,
        'not_found',
      );
    }
    const list = await t.inject({
      method: 'GET',
      url: '/v1/mcp/upstreams',
      headers: keyHeader(tenant.apiKey),
    });
    expect(list.json().data.map((u: { id: string }) => u.id)).toEqual([mine.id, shared.id]);
    const filtered = await t.inject({
      method: 'GET',
      url: `/v1/mcp/upstreams?projectId=${other._id}`,
      headers: keyHeader(tenant.apiKey),
    });
    expect(filtered.json().data).toEqual([]);
    // A key binds upstreams to no project or its own, never to another one.
    expectError(await create(tenant, body({ projectId: other._id })), 404, 'not_found');
    expectError(
      await t.inject({
        method: 'PATCH',
        url: `/v1/mcp/upstreams/${shared.id}`,
        headers: keyHeader(tenant.apiKey),
        payload: { projectId: other._id },
      }),
      404,
      'not_found',
    );
    // The other project's key and the user still see and control it.
    const own = await t.inject({ method: 'GET', url: `/v1/mcp/upstreams/${theirs.id}`, headers: otherKey });
    expect(own.json().url).toBe('http://127.0.0.1:9/mcp');
    const all = await t.inject({ method: 'GET', url: '/v1/mcp/upstreams', headers: user });
    expect(all.json().data).toHaveLength(3);
    const otherList = await t.inject({ method: 'GET', url: '/v1/mcp/upstreams', headers: otherKey });
    expect(otherList.json().data.map((u: { id: string }) => u.id)).toEqual([shared.id, theirs.id]);
  });

  it('asks for the headers again when a PATCH moves the url to another origin', async () => {
    const tenant = await createTenant(t);
    const headers = keyHeader(tenant.apiKey);
    const up = (
      await create(
        tenant,
        body({ url: 'http://127.0.0.1:9/mcp', headers: { Authorization: 'Bearer s3cret' } }),
      )
    ).json();
    const patch = (payload: Record<string, unknown>) =>
      t.inject({ method: 'PATCH', url: `/v1/mcp/upstreams/${up.id}`, headers, payload });
    for (const url of ['http://127.0.0.2:9/mcp', 'https://127.0.0.1:9/mcp', 'http://127.0.0.1:10/mcp']) {
      const res = await patch({ url });
      expectError(res, 400, 'validation_failed');
      expect(res.json().error.message).toBe('headers must be re-supplied when the url origin changes');
    }
    // Same origin, another path: the headers stay.
    expect((await patch({ url: 'http://127.0.0.1:9/other' })).json()).toMatchObject({
      url: 'http://127.0.0.1:9/other',
      headers: { Authorization: '***' },
    });
    // Re-supplied (even as none), the move is allowed.
    expect((await patch({ url: 'http://127.0.0.2:9/mcp', headers: {} })).json()).toMatchObject({
      url: 'http://127.0.0.2:9/mcp',
      headers: {},
    });
    // Without stored headers there is nothing to protect.
    expect((await patch({ url: 'http://127.0.0.3:9/mcp' })).statusCode).toBe(200);
  });

  it('refuses link-local and cloud metadata addresses, allows loopback and private networks', async () => {
    const tenant = await createTenant(t);
    const refused = [
      'http://169.254.169.254/latest/meta-data',
      'http://169.254.1.2:8080/mcp',
      'http://2852039166/mcp',
      'http://[fe80::1]/mcp',
      'http://[fd00:ec2::254]/mcp',
      'http://[::ffff:169.254.169.254]/mcp',
      'http://metadata.google.internal/computeMetadata/v1',
      'http://METADATA.GOOGLE.INTERNAL./x',
      'http://100.100.100.200/latest',
    ];
    for (const url of refused) {
      const res = await create(tenant, body({ url }));
      expectError(res, 400, 'validation_failed');
      expect(res.json().error.message).toMatch(/SVC_MCP_ALLOW_PRIVATE_UPSTREAMS/);
    }
    const up = (await create(tenant, body())).json();
    expectError(
      await t.inject({
        method: 'PATCH',
        url: `/v1/mcp/upstreams/${up.id}`,
        headers: keyHeader(tenant.apiKey),
        payload: { url: 'http://169.254.169.254/' },
      }),
      400,
      'validation_failed',
    );
    for (const url of [
      'http://127.0.0.1:3000/mcp',
      'http://localhost:3000/mcp',
      'http://[::1]:3000/mcp',
      'http://10.0.0.5/mcp',
    ]) {
      expect((await create(tenant, body({ url }))).statusCode).toBe(201);
    }
  });

  it('lets the operator allow private upstreams with SVC_MCP_ALLOW_PRIVATE_UPSTREAMS', async () => {
    await withTestApp({ mcpAllowPrivateUpstreams: true }, async (open) => {
      const tenant = await createTenant(open);
      const res = await open.inject({
        method: 'POST',
        url: '/v1/mcp/upstreams',
        headers: keyHeader(tenant.apiKey),
        payload: body({ url: 'http://169.254.169.254/mcp' }),
      });
      expect(res.statusCode).toBe(201);
    });
  });
});

describe('POST /v1/mcp/upstreams/:id/test', () => {
  const test = (tenant: Tenant, id: string) =>
    t.inject({ method: 'POST', url: `/v1/mcp/upstreams/${id}/test`, headers: keyHeader(tenant.apiKey) });

  it('runs a real handshake and tools/list on both transports', async () => {
    const tenant = await createTenant(t);
    for (const [transport, url] of [
      ['mcp-streamable-http', streamable.url],
      ['mcp-sse', sse.url],
    ]) {
      const up = (await create(tenant, body({ transport, url }))).json();
      const res = await test(tenant, up.id);
      expect(res.statusCode).toBe(200);
      expect(res.json()).toEqual({
        ok: true,
        status: 200,
        latencyMs: expect.any(Number),
        message: expect.stringMatching(/fixture-upstream 1\.0\.0; 5 tools available/),
      });
    }
  });

  it('reports status 0 when nothing listens, and the HTTP status the upstream answered', async () => {
    const tenant = await createTenant(t);
    const down = (await create(tenant, body({ url: 'http://127.0.0.1:9/mcp' }))).json();
    const res = await test(tenant, down.id);
    expect(res.json()).toMatchObject({
      ok: false,
      status: 0,
      message: expect.stringMatching(/initialize failed/),
    });

    const guarded = await startMcpUpstream({ transport: 'streamable', requireToken: 'tok' });
    try {
      const up = (await create(tenant, body({ url: guarded.url }))).json();
      expect((await test(tenant, up.id)).json()).toMatchObject({ ok: false, status: 401 });
      await t.inject({
        method: 'PATCH',
        url: `/v1/mcp/upstreams/${up.id}`,
        headers: keyHeader(tenant.apiKey),
        payload: { headers: { 'x-upstream-token': 'tok' } },
      });
      expect((await test(tenant, up.id)).json()).toMatchObject({ ok: true, status: 200 });
    } finally {
      await guarded.close();
    }
  });

  it('gives up after timeoutMs when the upstream never answers', async () => {
    const silent = createServer(() => {
      // Accepts requests and never answers them.
    });
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', () => r()));
    try {
      const tenant = await createTenant(t);
      const port = (silent.address() as AddressInfo).port;
      const up = (await create(tenant, body({ url: `http://127.0.0.1:${port}/mcp`, timeoutMs: 200 }))).json();
      const started = Date.now();
      const res = await test(tenant, up.id);
      expect(Date.now() - started).toBeLessThan(2000);
      expect(res.json()).toMatchObject({ ok: false, status: 0, message: expect.stringMatching(/200 ms/) });
    } finally {
      silent.closeAllConnections();
      await new Promise((r) => silent.close(r));
    }
  });
});
