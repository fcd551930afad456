import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_UPSTREAM_LIMITS } from '../src/modules/mcp/model.js';
import { useTestApp } from './fixture.js';
import { createTenant, type Tenant } from './helpers.js';
import { createUpstream, gatewayClient, rawRpc } from './mcp-helpers.js';
import { type McpUpstream, startMcpUpstream } from './mcp-upstream.js';

/**
 * Whatever an upstream answers to an allowed call, however deep or large, the call is recorded as
 * run and the client gets a JSON-RPC error with its request id: never an HTTP 500, never a call
 * that ran upstream without a decision on record.
 */
let upstream: McpUpstream;
let tenant: Tenant;

const t = useTestApp({}, { listen: true });
beforeAll(async () => {
  upstream = await startMcpUpstream({ transport: 'streamable' });
  tenant = await createTenant(t);
  await createUpstream(t, tenant, { name: 'bounds', slug: 'bounds', url: upstream.url });
});
afterAll(async () => {
  await upstream.close();
});

async function decision(id: string) {
  return t.store.db.selectFrom('decisions').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
}

async function decisionsOf(tool: string) {
  return t.store.db
    .selectFrom('decisions')
    .select('id')
    .where('organization_id', '=', tenant.orgId)
    .where('tool_name', '=', tool)
    .execute();
}

const call = (id: number | string, name: string, args: Record<string, unknown>) => ({
  jsonrpc: '2.0',
  id,
  method: 'tools/call',
  params: { name, arguments: args },
});

describe('MCP gateway bounds on upstream answers', () => {
  it('records a result nested 3000 levels deep as a failed run and answers a JSON-RPC error, in a session and without', async () => {
    const { client, sessionId } = await gatewayClient(t.url, 'bounds', tenant.apiKey);
    const key = { 'x-service-api-key': tenant.apiKey };
    const runsBefore = upstream.calls.deep ?? 0;
    const answers = [];
    for (let i = 0; i < 3; i++) {
      const inSession = await rawRpc(`${t.url}/v1/mcp/bounds`, call(`deep-${i}`, 'deep', { levels: 3000 }), {
        ...key,
        'mcp-session-id': sessionId,
      });
      const bare = await rawRpc(`${t.url}/v1/mcp/bounds`, call(100 + i, 'deep', { levels: 3000 }), key);
      answers.push([inSession, `deep-${i}`], [bare, 100 + i]);
    }
    for (const [res, id] of answers as [Awaited<ReturnType<typeof rawRpc>>, string | number][]) {
      expect(res.status).toBe(200);
      const body = res.json();
      expect(body.id).toBe(id);
      expect(body.error.code).toBe(-32603);
      expect(body.error.message).toMatch(/nested deeper than 128 levels/);
      const row = await decision(body.error.data.decisionId);
      expect(row.decision).toBe('allow');
      expect(row.reason).toMatch(/upstream call failed: upstream message nested deeper/);
    }
    // Every run upstream has its decision on record.
    expect((upstream.calls.deep ?? 0) - runsBefore).toBe(6);
    expect(await decisionsOf('deep')).toHaveLength(6);
    // A bounded result still passes, and the session survived the refused one.
    const ok = await client.callTool({ name: 'deep', arguments: { levels: 100 } });
    expect(ok.content).toEqual([{ type: 'text', text: 'deep' }]);
    await client.close();
  });

  it('records a result larger than the size bound as failed; the session then ends and a new one works', async () => {
    const { client, sessionId } = await gatewayClient(t.url, 'bounds', tenant.apiKey);
    const res = await rawRpc(
      `${t.url}/v1/mcp/bounds`,
      call(1, 'huge', { bytes: DEFAULT_UPSTREAM_LIMITS.maxMessageBytes + 1024 }),
      { 'x-service-api-key': tenant.apiKey, 'mcp-session-id': sessionId },
    );
    expect(res.status).toBe(200);
    const body = res.json();
    expect(body).toMatchObject({ id: 1, error: { code: -32603 } });
    expect(body.error.message).toMatch(/larger than 8388608 bytes/);
    expect((await decision(body.error.data.decisionId)).reason).toMatch(/upstream call failed/);
    // The upstream session was dropped with the oversized message; the client starts anew.
    const after = await rawRpc(`${t.url}/v1/mcp/bounds`, call(2, 'echo', { text: 'x' }), {
      'x-service-api-key': tenant.apiKey,
      'mcp-session-id': sessionId,
    });
    expect(after.status).toBe(404);
    await client.close().catch(() => {});
    const fresh = await gatewayClient(t.url, 'bounds', tenant.apiKey);
    const big = await fresh.client.callTool({ name: 'huge', arguments: { bytes: 1024 * 1024 } });
    expect((big.content as { text: string }[])[0]!.text).toHaveLength(1024 * 1024);
    await fresh.client.close();
  });
});
