import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, describe, expect, it } from 'vitest';
import { useTestApp } from '../../../test/fixture.js';
import { asUser, createTenant, expectError, keyHeader, type Tenant } from '../../../test/helpers.js';
import { rawRpc } from '../../../test/mcp-helpers.js';
import type { Clock } from '../../lib/clock.js';

const clients: Client[] = [];

const t = useTestApp({}, { listen: true });
afterAll(async () => {
  await Promise.all(clients.map((c) => c.close().catch(() => {})));
});

async function charterClient(tenant: Tenant): Promise<Client> {
  const client = new Client({ name: 'charter-test', version: '1.0.0' });
  await client.connect(
    new StreamableHTTPClientTransport(new URL(`${t.url}/v1/mcp/charter`), {
      requestInit: { headers: { authorization: `Bearer ${tenant.apiKey}` } },
    }),
  );
  clients.push(client);
  return client;
}

const TOOLS = [
  {
    name: 'send_email',
    description: 'Sends an email',
    parameters: [
      { name: 'to', type: 'string', required: true },
      { name: 'priority', type: 'string', enum: ['low', 'high'] },
    ],
  },
  { name: 'get_weather', arguments: [{ name: 'city', type: 'string', required: true }] },
];

describe('POST /v1/mcp/charter', () => {
  it('lists the five native tools with input schemas to an SDK client', async () => {
    const tenant = await createTenant(t);
    const client = await charterClient(tenant);
    expect(client.getServerVersion()?.name).toBe('svc-charter');
    const { tools } = await client.listTools();
    expect(tools.map((x) => x.name)).toEqual([
      'svc_charter_turn',
      'svc_charter_chat',
      'svc_charter_compile',
      'svc_list_tools',
      'svc_register_tools',
    ]);
    for (const tool of tools) expect(tool.inputSchema.type).toBe('object');
    const turn = tools[0]!.inputSchema.properties as Record<
      string,
      { enum?: string[]; anyOf?: { const: string }[] }
    >;
    expect(JSON.stringify(turn.mode)).toMatch(/auto.*chat.*compile/);
  });

  it('registers tools only after a person approves the verification, then lists them', async () => {
    const tenant = await createTenant(t);
    const client = await charterClient(tenant);
    const proposed = await client.callTool({ name: 'svc_register_tools', arguments: { tools: TOOLS } });
    expect(proposed.isError).toBeFalsy();
    const sc = proposed.structuredContent as {
      verification: { required: boolean; id: string; linkUrl: string };
    };
    expect(sc).toMatchObject({
      success: true,
      registered_tools: [],
      pending_tools: ['send_email', 'get_weather'],
      verification: { required: true, status: 'pending' },
    });
    expect(sc.verification.linkUrl.startsWith(`${t.config.baseUrl}/charter/verify/`)).toBe(true);
    // The review reads the starter policy that goes live: `to` is required, so not every call passes.
    const review = await t.inject({
      method: 'GET',
      url: `/v1/charter/verifications/${sc.verification.id}`,
      headers: asUser(tenant),
    });
    const email = review.json().changes.find((c: { toolName: string }) => c.toolName === 'send_email');
    expect(email.proposed.constraints).toEqual(
      expect.arrayContaining([expect.objectContaining({ argumentName: 'to', required: true })]),
    );
    // Nor are its rules taken for redundant ones: they are what enforces the declared enum.
    expect(email.proposed.constraints).toEqual(
      expect.arrayContaining([expect.objectContaining({ argumentName: 'priority', enum: ['low', 'high'] })]),
    );
    expect(email.analysis.findings).toEqual([]);
    expect(email.analysis.examples.map((e: { decision: string }) => e.decision)).toContain('deny');
    expect(email.quality.issues.join(' ')).not.toMatch(/constrains nothing/);
    // Nothing is live before approval.
    const before = await t.inject({ method: 'GET', url: '/v1/tools', headers: keyHeader(tenant.apiKey) });
    expect(before.json().data).toEqual([]);
    const approved = await t.inject({
      method: 'POST',
      url: `/v1/charter/verifications/${sc.verification.id}/approve`,
      headers: asUser(tenant),
    });
    expect(approved.statusCode).toBe(200);
    expect(approved.json()).toMatchObject({
      status: 'approved',
      applied: [{ toolName: 'send_email' }, { toolName: 'get_weather' }],
    });

    const viaRest = await t.inject({
      method: 'GET',
      url: '/v1/tools/send_email',
      headers: keyHeader(tenant.apiKey),
    });
    expect(viaRest.json()).toMatchObject({
      name: 'send_email',
      arguments: [
        { name: 'to', type: 'string', required: true },
        { name: 'priority', type: 'string', enum: ['low', 'high'] },
      ],
    });
    const policy = await t.inject({
      method: 'GET',
      url: '/v1/policies/send_email',
      headers: keyHeader(tenant.apiKey),
    });
    expect(policy.statusCode).toBe(200);

    const listed = await client.callTool({ name: 'svc_list_tools', arguments: {} });
    const data = listed.structuredContent as { tools: { name: string; arguments: unknown[] }[] };
    expect(data.tools.map((x) => x.name)).toEqual(['get_weather', 'send_email']);
    expect(data.tools[0]!.arguments).toEqual([{ name: 'city', type: 'string', required: true }]);
    expect(JSON.parse((listed.content as { text: string }[])[0]!.text)).toEqual(data);

    // Another organization sees none of them.
    const other = await charterClient(await createTenant(t));
    const empty = await other.callTool({ name: 'svc_list_tools', arguments: {} });
    expect(empty.structuredContent).toEqual({ tools: [] });
  });

  it('applies a registration only over the state it showed: no starter policy nobody saw', async () => {
    const tenant = await createTenant(t);
    const client = await charterClient(tenant);
    const propose = async () => {
      const res = await client.callTool({ name: 'svc_register_tools', arguments: { tools: [TOOLS[0]] } });
      return (res.structuredContent as { verification: { id: string } }).verification.id;
    };
    const approve = (id: string) =>
      t.inject({ method: 'POST', url: `/v1/charter/verifications/${id}/approve`, headers: asUser(tenant) });
    const policyOf = () =>
      t.inject({ method: 'GET', url: '/v1/policies/send_email', headers: keyHeader(tenant.apiKey) });

    // Proposed while send_email has a policy: no starter policy is shown. The policy is then deleted.
    const created = await t.inject({
      method: 'POST',
      url: '/v1/policies',
      headers: keyHeader(tenant.apiKey),
      payload: { toolName: 'send_email', constraints: [{ argumentName: 'to', regex: '@example\\.com$' }] },
    });
    expect(created.statusCode).toBe(201);
    const first = await propose();
    const shown = await t.inject({
      method: 'GET',
      url: `/v1/charter/verifications/${first}`,
      headers: keyHeader(tenant.apiKey),
    });
    expect(shown.json().changes).toEqual([]);
    const deleted = await t.inject({
      method: 'DELETE',
      url: '/v1/policies/send_email',
      headers: keyHeader(tenant.apiKey),
    });
    expect(deleted.statusCode).toBeLessThan(300);
    const refused = await approve(first);
    expectError(refused, 409, 'conflict');
    expect((await policyOf()).statusCode).toBe(404);
    const tools = await t.inject({ method: 'GET', url: '/v1/tools', headers: keyHeader(tenant.apiKey) });
    expect(tools.json().data).toEqual([]);
    // Still pending: nothing was resolved.
    const after = await t.inject({
      method: 'GET',
      url: `/v1/charter/verifications/${first}`,
      headers: keyHeader(tenant.apiKey),
    });
    expect(after.json().status).toBe('pending');

    // Proposed while send_email is new (its starter policy shown), then given a policy of its own.
    const second = await propose();
    const written = await t.inject({
      method: 'POST',
      url: '/v1/policies',
      headers: keyHeader(tenant.apiKey),
      payload: { toolName: 'send_email', constraints: [] },
    });
    expect(written.statusCode).toBe(201);
    expectError(await approve(second), 409, 'conflict');

    // A fresh proposal over the state as it is now applies.
    const third = await propose();
    const ok = await approve(third);
    expect(ok.statusCode).toBe(200);
    expect(ok.json()).toMatchObject({ status: 'approved', applied: [] });
  });

  it('reports invalid registrations as tool errors and saves nothing', async () => {
    const tenant = await createTenant(t);
    const client = await charterClient(tenant);
    for (const args of [
      {},
      { tools: [] },
      { tools: [{ name: 'x' }] },
      { tools: [{ name: 'x', parameters: [{ name: 'a', type: 'date' }] }] },
      { tools: [{ name: 'x', parameters: [], arguments: [] }] },
      // The same names as POST /v1/tools/register: no control characters, not "." or "..".
      { tools: [{ name: 'line\nbreak', parameters: [] }] },
      { tools: [{ name: '..', parameters: [] }] },
      { tools: [{ name: 'x', parameters: [{ name: 'tab\there', type: 'string' }] }] },
      {
        tools: [
          { name: 'x', parameters: [] },
          { name: 'x', parameters: [] },
        ],
      },
    ]) {
      const res = await client.callTool({ name: 'svc_register_tools', arguments: args });
      expect(res.isError, JSON.stringify(args)).toBe(true);
    }
    const tools = await t.inject({ method: 'GET', url: '/v1/tools', headers: keyHeader(tenant.apiKey) });
    expect(tools.json().data).toEqual([]);
  });

  it('refuses a registration whose starter policy would hold more than 64 patterns, and opens nothing', async () => {
    const tenant = await createTenant(t);
    const client = await charterClient(tenant);
    const parameters = Array.from({ length: 65 }, (_, i) => ({
      name: `p${i}`,
      type: 'string',
      pattern: `^x${i}$`,
    }));
    const res = await client.callTool({
      name: 'svc_register_tools',
      arguments: { tools: [{ name: 'patterned', parameters }] },
    });
    expect(res.isError).toBe(true);
    const text = (res.content as { text: string }[])[0]!.text;
    expect(text).toContain('the starter policy of tool "patterned" cannot be saved');
    expect(text).toContain('at most 64 patterns');
    const h = keyHeader(tenant.apiKey);
    expect(
      (await t.inject({ method: 'GET', url: '/v1/charter/verifications', headers: h })).json().data,
    ).toEqual([]);
    const ok = await client.callTool({
      name: 'svc_register_tools',
      arguments: { tools: [{ name: 'patterned', parameters: parameters.slice(0, 64) }] },
    });
    expect(ok.isError).toBeFalsy();
  });

  it('compiles and chats through the charter tools, with verification on policy changes', async () => {
    const tenant = await createTenant(t);
    const client = await charterClient(tenant);
    const reg = await client.callTool({ name: 'svc_register_tools', arguments: { tools: TOOLS } });
    const regId = (reg.structuredContent as { verification: { id: string } }).verification.id;
    await t.inject({
      method: 'POST',
      url: `/v1/charter/verifications/${regId}/approve`,
      headers: asUser(tenant),
    });

    const compiled = await client.callTool({
      name: 'svc_charter_compile',
      arguments: { message: 'send_email priority must be low' },
    });
    expect(compiled.isError).toBeFalsy();
    const result = compiled.structuredContent as {
      conversationId: string;
      verification: { required: boolean; linkUrl: string };
      changes: { toolName: string; proposed: { constraints: unknown[] } }[];
    };
    expect(result.verification).toMatchObject({ required: true });
    expect(result.changes[0]!.toolName).toBe('send_email');
    expect((compiled.content as { text: string }[])[0]!.text).toContain(result.verification.linkUrl);

    const chat = await client.callTool({
      name: 'svc_charter_chat',
      arguments: { message: 'What is the policy of send_email?', conversationId: result.conversationId },
    });
    expect(chat.structuredContent).toMatchObject({ mode: 'chat', verification: { required: false } });

    const turn = await client.callTool({
      name: 'svc_charter_turn',
      arguments: { message: 'Block send_email priority high', mode: 'compile' },
    });
    expect(turn.structuredContent, JSON.stringify(turn.structuredContent)).toMatchObject({
      mode: 'compile',
      verification: { required: true },
    });

    const refused = await client.callTool({
      name: 'svc_charter_compile',
      arguments: { message: 'make it safe' },
    });
    expect(refused.structuredContent).toMatchObject({ verification: { required: false }, changes: [] });
    const bad = await client.callTool({
      name: 'svc_charter_turn',
      arguments: { message: 'x', mode: 'shout' },
    });
    expect(bad.isError).toBe(true);

    const unknown = await client.callTool({ name: 'svc_nope', arguments: {} }).then(
      () => null,
      (e: unknown) => e,
    );
    expect(unknown).toBeInstanceOf(McpError);
    expect((unknown as McpError).code).toBe(-32602);
  });

  it('speaks bare JSON-RPC, refuses malformed messages and GET, and needs an API key', async () => {
    const tenant = await createTenant(t);
    const url = `${t.url}/v1/mcp/charter`;
    const list = await rawRpc(url, { jsonrpc: '2.0', id: 1, method: 'tools/list' }, keyHeader(tenant.apiKey));
    expect(list.json().result.tools).toHaveLength(5);
    const unknownMethod = await rawRpc(
      url,
      { jsonrpc: '2.0', id: 2, method: 'resources/list' },
      keyHeader(tenant.apiKey),
    );
    expect(unknownMethod.json()).toMatchObject({ id: 2, error: { code: -32601 } });
    const bad = await rawRpc(url, { jsonrpc: '2.0', method: 5 }, keyHeader(tenant.apiKey));
    expect(bad.status).toBe(400);
    expect(bad.json().error.code).toBe(-32600);
    const get = await fetch(url, { headers: keyHeader(tenant.apiKey) });
    expect(get.status).toBe(405);
    expect(get.headers.get('allow')).toBe('POST');
    expect((await rawRpc(url, { jsonrpc: '2.0', id: 1, method: 'tools/list' })).status).toBe(401);
    const user = await rawRpc(
      url,
      { jsonrpc: '2.0', id: 1, method: 'tools/list' },
      { authorization: `Bearer ${tenant.token}` },
    );
    expect(user.status).toBe(403);
  });
});

describe('rate limit of POST /v1/mcp/charter', () => {
  // A fixed clock keeps the per-minute window from rolling over during the test.
  const clock: Clock = { now: () => new Date('2026-11-21T12:00:30.000Z') };
  const limited = useTestApp({}, { clock });

  it("counts against the key's budget of /v1/charter/*: 60 requests a minute, the 61st answers 429", async () => {
    const tenant = await createTenant(limited);
    const list = () =>
      limited.inject({
        method: 'POST',
        url: '/v1/mcp/charter',
        headers: { ...keyHeader(tenant.apiKey), accept: 'application/json' },
        payload: { jsonrpc: '2.0', id: 1, method: 'tools/list' },
      });
    let last = await list();
    for (let i = 1; i < 60; i++) last = await list();
    expect(last.statusCode).toBe(200);
    expect(last.json().result.tools).toHaveLength(5);
    expect(last.headers['x-ratelimit-limit']).toBe('60');
    expect(last.headers['x-ratelimit-remaining']).toBe('0');
    const over = await list();
    expectError(over, 429, 'rate_limit_exceeded');
    expect(over.headers['retry-after']).toBe('30');
    // The same budget as /v1/charter/*.
    const rest = await limited.inject({
      method: 'GET',
      url: '/v1/charter/verifications',
      headers: keyHeader(tenant.apiKey),
    });
    expectError(rest, 429, 'rate_limit_exceeded');
    // Another key has a budget of its own.
    const other = await createTenant(limited);
    const fresh = await limited.inject({
      method: 'POST',
      url: '/v1/mcp/charter',
      headers: { ...keyHeader(other.apiKey), accept: 'application/json' },
      payload: { jsonrpc: '2.0', id: 1, method: 'tools/list' },
    });
    expect(fresh.statusCode).toBe(200);
    expect(fresh.headers['x-ratelimit-remaining']).toBe('59');
  });
});
