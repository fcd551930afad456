import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_UPSTREAM_LIMITS } from '../src/modules/mcp/model.js';
import { useTestApp } from './fixture.js';
import { createTenant, type Tenant } from './helpers.js';
import { storedReceipt } from './ledger.js';
import { createUpstream, gatewayClient, rawRpc } from './mcp-helpers.js';
import {
  type McpUpstream,
  RAW_STREAM_ENDS_EARLY,
  type RawAnswerFields,
  type RawUpstream,
  startMcpUpstream,
  startRawUpstream,
} from './mcp-upstream.js';

/**
 * Whatever an upstream answers to an allowed call, however deep or large, the call is recorded as
 * run and the client gets a JSON-RPC error with its request id: never an HTTP 500, never a call
 * that ran upstream without a decision on record.
 */
let upstream: McpUpstream;
let raw: RawUpstream;
let tenant: Tenant;

/** Answers no JSON-RPC peer may send: each must fail its request, never pass as a result. */
const MALFORMED: Record<string, RawAnswerFields> = {
  array: { result: [1, 2, 3] },
  string: { result: 'hello' },
  null: { result: null },
  none: {},
  both: { result: { content: [] }, error: { code: -32000, message: 'both' } },
  'error-string': { error: 'just a string' },
  'error-no-code': { error: { message: 'no code' } },
  'error-float-code': { error: { code: 1.5, message: 'not an integer' } },
  'error-number-message': { error: { code: -32000, message: 42 } },
};

const t = useTestApp({}, { listen: true });
beforeAll(async () => {
  upstream = await startMcpUpstream({ transport: 'streamable' });
  tenant = await createTenant(t);
  await createUpstream(t, tenant, { name: 'bounds', slug: 'bounds', url: upstream.url });
  raw = await startRawUpstream((what) => {
    if (what === 'tools/call:ok') return { result: { content: [{ type: 'text', text: 'ok' }] } };
    if (what === 'tools/call:fails') return { error: { code: -32000, message: 'boom', data: { why: 'x' } } };
    if (what === 'resources/list') return MALFORMED.string!;
    if (what === 'prompts/list') return MALFORMED.none!;
    if (what === 'tools/call:cut') return RAW_STREAM_ENDS_EARLY;
    return MALFORMED[what.replace('tools/call:', '')] ?? { result: {} };
  });
  await createUpstream(t, tenant, { name: 'raw', slug: 'raw', url: raw.url });
});
afterAll(async () => {
  await upstream.close();
  await raw.close();
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

describe('MCP gateway on malformed upstream answers', () => {
  it('records a tools/call answered with a result that is not an object, no result, both, or a malformed error as a failed run', async () => {
    const { client, sessionId } = await gatewayClient(t.url, 'raw', tenant.apiKey);
    const key = { 'x-service-api-key': tenant.apiKey };
    let id = 0;
    for (const tool of Object.keys(MALFORMED)) {
      for (const headers of [{ ...key, 'mcp-session-id': sessionId }, key]) {
        const res = await rawRpc(`${t.url}/v1/mcp/raw`, call(++id, tool, {}), headers);
        expect(res.status, tool).toBe(200);
        const body = res.json();
        expect(body, tool).toMatchObject({ id, error: { code: -32603 } });
        expect(body.error.message, tool).toMatch(/upstream sent an invalid answer/);
        const row = await decision(body.error.data.decisionId);
        expect(row.decision).toBe('allow');
        expect(row.reason, tool).toMatch(/upstream call failed: upstream sent an invalid answer: /);
        expect(await storedReceipt(t, row.receipt_id)).not.toHaveProperty('result_hash');
      }
    }
    expect(raw.seen.filter((w) => w === 'tools/call:array')).toHaveLength(2);
    // The connection is fine: the session goes on, and well-formed answers pass as before.
    const ok = await client.callTool({ name: 'ok', arguments: {} });
    expect(ok.content).toEqual([{ type: 'text', text: 'ok' }]);
    const own = await rawRpc(`${t.url}/v1/mcp/raw`, call('own', 'fails', {}), {
      ...key,
      'mcp-session-id': sessionId,
    });
    expect(own.json()).toMatchObject({
      id: 'own',
      error: { code: -32000, message: 'boom', data: { why: 'x' } },
    });
    await client.close();
  });

  it('fails a call whose answer stream ends before its response at once, and the session goes on', async () => {
    const { client, sessionId } = await gatewayClient(t.url, 'raw', tenant.apiKey);
    const headers = { 'x-service-api-key': tenant.apiKey, 'mcp-session-id': sessionId };
    const started = Date.now();
    const res = await rawRpc(`${t.url}/v1/mcp/raw`, call('cut', 'cut', {}), headers);
    // Not at the upstream's timeout (30 s by default): when the stream ended.
    expect(Date.now() - started).toBeLessThan(5000);
    const body = res.json();
    expect(body).toMatchObject({ id: 'cut', error: { code: -32603 } });
    expect(body.error.message).toMatch(/answer stream ended before its response/);
    const row = await decision(body.error.data.decisionId);
    expect(row.reason).toMatch(/upstream call failed: the upstream answer stream ended before its response/);
    // An upstream may end a stream on purpose (after a cancellation, or to be resumed): the session
    // is not over, only that call.
    const ok = await client.callTool({ name: 'ok', arguments: {} });
    expect(ok.content).toEqual([{ type: 'text', text: 'ok' }]);
    await client.close();
  });

  it('fails any other forwarded request answered malformed with -32603 and its id', async () => {
    const { client, sessionId } = await gatewayClient(t.url, 'raw', tenant.apiKey);
    const key = { 'x-service-api-key': tenant.apiKey };
    for (const method of ['resources/list', 'prompts/list']) {
      for (const headers of [{ ...key, 'mcp-session-id': sessionId }, key]) {
        const res = await rawRpc(`${t.url}/v1/mcp/raw`, { jsonrpc: '2.0', id: method, method }, headers);
        expect(res.status).toBe(200);
        expect(res.json(), method).toMatchObject({ id: method, error: { code: -32603 } });
        expect(res.json().error.message).toMatch(/upstream sent an invalid answer/);
      }
    }
    await client.close();
  });
});
