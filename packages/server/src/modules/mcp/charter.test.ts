import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTenant, createTestApp, keyHeader, type Tenant, type TestApp } from '../../../test/helpers.js';
import { rawRpc } from '../../../test/mcp-helpers.js';

let t: TestApp;
let base: string;
const clients: Client[] = [];

beforeAll(async () => {
  t = await createTestApp();
  base = await t.app.listen({ port: 0, host: '127.0.0.1' });
});
afterAll(async () => {
  await Promise.all(clients.map((c) => c.close().catch(() => {})));
  await t.close();
});

async function charterClient(tenant: Tenant): Promise<Client> {
  const client = new Client({ name: 'charter-test', version: '1.0.0' });
  await client.connect(
    new StreamableHTTPClientTransport(new URL(`${base}/v1/mcp/charter`), {
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

  it('registers tools as POST /v1/tools/register does and lists them', async () => {
    const tenant = await createTenant(t);
    const client = await charterClient(tenant);
    const registered = await client.callTool({ name: 'svc_register_tools', arguments: { tools: TOOLS } });
    expect(registered.isError).toBeFalsy();
    expect(registered.structuredContent).toMatchObject({
      success: true,
      registered_tools: ['send_email', 'get_weather'],
      message: expect.stringMatching(/Registered 2 tools/),
      verification: { required: false },
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

  it('reports invalid registrations as tool errors and saves nothing', async () => {
    const tenant = await createTenant(t);
    const client = await charterClient(tenant);
    for (const args of [
      {},
      { tools: [] },
      { tools: [{ name: 'x' }] },
      { tools: [{ name: 'x', parameters: [{ name: 'a', type: 'date' }] }] },
      { tools: [{ name: 'x', parameters: [], arguments: [] }] },
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

  it('says the policy assistant is unavailable instead of inventing an answer', async () => {
    const client = await charterClient(await createTenant(t));
    for (const name of ['svc_charter_turn', 'svc_charter_chat', 'svc_charter_compile']) {
      const res = await client.callTool({
        name,
        arguments: { message: 'block payments over 100 USD', mode: 'compile' },
      });
      expect(res.isError).toBe(true);
      expect((res.content as { text: string }[])[0]!.text).toMatch(/not available in this version/);
      expect(res.structuredContent).toBeUndefined();
    }
    const unknown = await client.callTool({ name: 'svc_nope', arguments: {} }).then(
      () => null,
      (e: unknown) => e,
    );
    expect(unknown).toBeInstanceOf(McpError);
    expect((unknown as McpError).code).toBe(-32602);
  });

  it('speaks bare JSON-RPC, refuses malformed messages and GET, and needs an API key', async () => {
    const tenant = await createTenant(t);
    const url = `${base}/v1/mcp/charter`;
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
