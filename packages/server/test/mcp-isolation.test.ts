import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { LoggingMessageNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useTestApp } from './fixture.js';
import { createTenant, type Tenant } from './helpers.js';
import { type Everything, startEverything } from './mcp-everything.js';
import { createUpstream } from './mcp-helpers.js';

/**
 * Isolation through the gateway: every gateway session has an upstream session of its own, so
 * state an upstream keeps per session (logging toggles, resources created in the session) never
 * leaks between API keys, projects, or two sessions of one key.
 */
let everything: Everything;
let tenant: Tenant;
let otherProjectKey: string;
let url: string;
const open: Client[] = [];

const t = useTestApp({}, { listen: true });
beforeAll(async () => {
  everything = await startEverything('streamableHttp');
  tenant = await createTenant(t);
  const second = await t.inject({
    method: 'POST',
    url: '/v1/projects',
    headers: { authorization: `Bearer ${tenant.token}` },
    payload: { organizationId: tenant.orgId, name: 'Second' },
  });
  otherProjectKey = second.json().apiKey;
  // Organization-wide: both projects' keys reach the same upstream configuration.
  await createUpstream(t, tenant, { name: 'shared', slug: 'shared', url: everything.url, timeoutMs: 10_000 });
  url = `${t.url}/v1/mcp/shared`;
});
afterAll(async () => {
  await Promise.all(open.map((c) => c.close().catch(() => {})));
  await everything.stop();
});

async function session(apiKey: string) {
  const client = new Client({ name: 'iso', version: '1.0.0' });
  const logs: string[] = [];
  client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
    logs.push(String(n.params.data));
  });
  await client.connect(
    new StreamableHTTPClientTransport(new URL(url), {
      requestInit: { headers: { 'x-service-api-key': apiKey } },
    }),
  );
  open.push(client);
  return { client, logs };
}

const text = (r: unknown) =>
  ((r as { content: unknown }).content as { text?: string }[]).map((c) => c.text ?? '').join('\n');
const upstreamSession = (s: string) => /session ([0-9a-f-]{36})/.exec(s)?.[1];

describe.each([
  ['two keys of two projects', () => [tenant.apiKey, otherProjectKey]],
  ['two sessions of one key', () => [tenant.apiKey, tenant.apiKey]],
] as const)('MCP gateway isolation: %s', (_label, keys) => {
  it('gives each session its own upstream session: toggles and their notifications stay apart', async () => {
    const [ka, kb] = keys() as [string, string];
    const a = await session(ka);
    const b = await session(kb);
    const startedA = text(await a.client.callTool({ name: 'toggle-simulated-logging', arguments: {} }));
    const startedB = text(await b.client.callTool({ name: 'toggle-simulated-logging', arguments: {} }));
    // Both started (neither stopped the other's), each in an upstream session of its own.
    expect(startedA).toMatch(/^Started/);
    expect(startedB).toMatch(/^Started/);
    const sa = upstreamSession(startedA);
    const sb = upstreamSession(startedB);
    expect(sa).toBeDefined();
    expect(sa).not.toBe(sb);
    const deadline = Date.now() + 5000;
    while ((a.logs.length === 0 || b.logs.length === 0) && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 25));
    expect(a.logs.length).toBeGreaterThan(0);
    expect(a.logs.every((l) => !l.includes('SessionId') || l.includes(sa!))).toBe(true);
    expect(b.logs.every((l) => !l.includes('SessionId') || l.includes(sb!))).toBe(true);
    expect(text(await a.client.callTool({ name: 'toggle-simulated-logging', arguments: {} }))).toMatch(
      /^Stopped/,
    );
    expect(text(await b.client.callTool({ name: 'toggle-simulated-logging', arguments: {} }))).toMatch(
      /^Stopped/,
    );
  });

  it("never shows one session's resources to the other", async () => {
    const [ka, kb] = keys() as [string, string];
    const a = await session(ka);
    const b = await session(kb);
    const made = await a.client.callTool({
      name: 'gzip-file-as-resource',
      arguments: {
        name: 'secret.txt.gz',
        data: 'data:text/plain;base64,c2VjcmV0',
        outputType: 'resourceLink',
      },
    });
    const link = (made.content as { type: string; uri?: string }[]).find((c) => c.type === 'resource_link');
    expect(link?.uri).toBeDefined();
    const listedA = (await a.client.listResources()).resources.map((r) => r.uri);
    const listedB = (await b.client.listResources()).resources.map((r) => r.uri);
    expect(listedA).toContain(link!.uri);
    expect(listedB).not.toContain(link!.uri);
    await expect(b.client.readResource({ uri: link!.uri! })).rejects.toThrow();
    expect((await a.client.readResource({ uri: link!.uri! })).contents).toHaveLength(1);
  });
});

describe('MCP gateway session ownership', () => {
  it("refuses another key's session id with 404, and a session ended by its client is gone", async () => {
    const a = await session(tenant.apiKey);
    const transport = a.client.transport as StreamableHTTPClientTransport;
    const sid = transport.sessionId!;
    const post = (apiKey: string) =>
      fetch(url, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
          'x-service-api-key': apiKey,
          'mcp-session-id': sid,
        },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
      });
    expect((await post(otherProjectKey)).status).toBe(404);
    expect((await post(tenant.apiKey)).status).toBe(200);
    await transport.terminateSession();
    expect((await post(tenant.apiKey)).status).toBe(404);
  });
});
