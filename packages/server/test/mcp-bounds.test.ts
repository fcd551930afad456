import { monitorEventLoopDelay } from 'node:perf_hooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_UPSTREAM_LIMITS } from '../src/modules/mcp/model.js';
import { useTestApp } from './fixture.js';
import { createTenant, type Tenant } from './helpers.js';
import {
  deepResult,
  type HostileUpstream,
  sseEvent,
  sseMessages,
  startHostileSseUpstream,
  startHostileUpstream,
} from './hostile-upstream.js';
import { storedReceipt } from './ledger.js';
import { createUpstream, gatewayClient, rawRpc, rawSession } from './mcp-helpers.js';
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

describe('MCP gateway on an upstream that floods its client with requests', () => {
  // A tenant of its own: its calls do not count against the others' rate limit.
  let own: Tenant;
  const FLOOD = 3000;
  const roots = (i: number) => ({ jsonrpc: '2.0', id: `r${i}`, method: 'roots/list' });
  let streamable: HostileUpstream;
  let sse: HostileUpstream;
  beforeAll(async () => {
    own = await createTenant(t);
    // The call is answered with requests only, on a stream left open: the upstream never stops.
    streamable = await startHostileUpstream((msg, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      if (msg.params?.name !== 'flood') {
        res.end(sseEvent({ jsonrpc: '2.0', id: msg.id, result: { content: [] } }));
        return;
      }
      let text = '';
      for (let i = 0; i < FLOOD; i++) text += sseEvent(roots(i));
      res.write(text);
    });
    sse = await startHostileSseUpstream((msg, send) => {
      if (msg.params?.name !== 'flood') send({ jsonrpc: '2.0', id: msg.id, result: { content: [] } });
      else send(Array.from({ length: FLOOD }, (_, i) => sseEvent(roots(i))).join(''));
    });
    await createUpstream(t, own, { name: 'flood', slug: 'flood', url: streamable.url, timeoutMs: 5000 });
    await createUpstream(t, own, {
      name: 'flood-sse',
      slug: 'flood-sse',
      transport: 'mcp-sse',
      url: sse.url,
      timeoutMs: 5000,
    });
  });
  afterAll(async () => {
    await streamable.close();
    await sse.close();
  });

  it.each([
    ['Streamable HTTP', 'flood'],
    ['HTTP+SSE', 'flood-sse'],
  ])(
    'ends the upstream session past 100 waiting requests, in a session and without, over %s',
    async (_name, slug) => {
      const upstream = slug === 'flood' ? streamable : sse;
      upstream.resetMax();
      const url = `${t.url}/v1/mcp/${slug}`;
      const key = { 'x-service-api-key': own.apiKey };
      // In a session: the requests go to the client on the call's answer stream; 100 may wait for it.
      const session = await rawSession(url, key);
      const inSession = await rawRpc(url, call('s', 'flood', {}), session);
      const messages = sseMessages(inSession.text);
      expect(messages.filter((m) => m.method === 'roots/list').length).toBeLessThanOrEqual(100);
      const response = messages.at(-1) as { id: string; error: { code: number; message: string } };
      expect(response).toMatchObject({ id: 's', error: { code: -32603 } });
      expect(response.error.message).toMatch(/more than 100 requests that wait for an answer/);
      // Only that session ended.
      expect((await rawRpc(url, call('next', 'echo', {}), session)).status).toBe(404);
      // Session-less: the requests are refused; 100 refusals may wait to be sent.
      const bare = await rawRpc(url, call('b', 'flood', {}), key);
      expect(bare.json()).toMatchObject({ id: 'b', error: { code: -32603 } });
      expect(bare.json().error.message).toMatch(/more than 100 requests that wait for an answer/);
      for (const id of [
        (response.error as { data?: { decisionId: string } }).data!.decisionId,
        bare.json().error.data.decisionId,
      ]) {
        expect((await decision(id)).reason).toMatch(
          /upstream call failed: .*more than 100 requests that wait/,
        );
      }
      // Never a connection per answer.
      expect(upstream.connections().max).toBeLessThan(20);
      expect(upstream.answers.length).toBeLessThanOrEqual(100);
      expect((await fetch(`${t.url}/healthz`)).status).toBe(200);
      // The upstream works for new sessions.
      const fresh = await rawSession(url, key);
      expect((await rawRpc(url, call('ok', 'echo', {}), fresh)).json()).toMatchObject({
        id: 'ok',
        result: {},
      });
    },
  );
});

describe('MCP gateway on answers that are not JSON', () => {
  // A tenant of its own: its calls do not count against the others' rate limit.
  let own: Tenant;
  let hostile: HostileUpstream;
  beforeAll(async () => {
    own = await createTenant(t);
    hostile = await startHostileUpstream((msg, res) => {
      const name = msg.method === 'tools/call' ? msg.params?.name : msg.method;
      if (name === 'html' || name === 'resources/list')
        res.writeHead(200, { 'content-type': 'text/html' }).end('<html>busy</html>');
      else if (name === 'not-json')
        res.writeHead(200, { 'content-type': 'application/json' }).end('{"jsonrpc":');
      else if (name === 'no-type') res.writeHead(200).end('ok');
      else if (name === 'no-response')
        res
          .writeHead(200, { 'content-type': 'application/json' })
          .end(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/message', params: {} }));
      else
        res
          .writeHead(200, { 'content-type': 'application/json' })
          .end(JSON.stringify({ jsonrpc: '2.0', id: msg.id, result: { content: [] } }));
    });
    await createUpstream(t, own, { name: 'not-json', slug: 'not-json', url: hostile.url });
  });
  afterAll(() => hostile.close());

  it('fails that request with "upstream sent an invalid answer", records the call, and the session goes on', async () => {
    const url = `${t.url}/v1/mcp/not-json`;
    const key = { 'x-service-api-key': own.apiKey };
    const session = await rawSession(url, key);
    const cases: [string, RegExp][] = [
      ['html', /its content type is text\/html, not application\/json or text\/event-stream/],
      ['no-type', /its content type is missing/],
      ['not-json', /it is not JSON/],
      ['no-response', /it holds no response to the request/],
    ];
    let id = 0;
    for (const [tool, problem] of cases) {
      for (const headers of [session, key]) {
        const res = await rawRpc(url, call(++id, tool, {}), headers);
        expect(res.status, tool).toBe(200);
        // The notification of `no-response` goes to the client first, so that answer is a stream.
        const body = res.headers.get('content-type')?.startsWith('text/event-stream')
          ? (sseMessages(res.text).at(-1) as ReturnType<typeof res.json>)
          : res.json();
        expect(body, tool).toMatchObject({ id, error: { code: -32603 } });
        expect(body.error.message, tool).toMatch(
          /^Upstream "not-json" failed: upstream sent an invalid answer: /,
        );
        expect(body.error.message, tool).toMatch(problem);
        const row = await decision(body.error.data.decisionId);
        expect(row.decision).toBe('allow');
        expect(row.reason, tool).toMatch(/upstream call failed: upstream sent an invalid answer: /);
      }
    }
    const list = await rawRpc(url, { jsonrpc: '2.0', id: 'list', method: 'resources/list' }, session);
    expect(list.json()).toMatchObject({ id: 'list', error: { code: -32603 } });
    expect(list.json().error.message).toMatch(
      /upstream sent an invalid answer: its content type is text\/html/,
    );
    // The session survived every one of them.
    expect((await rawRpc(url, call('ok', 'echo', {}), session)).json()).toMatchObject({
      id: 'ok',
      result: {},
    });
  });
});

describe('MCP gateway on upstream error messages the stores cannot hold', () => {
  // A tenant of its own: its calls do not count against the others' rate limit.
  let own: Tenant;
  let hostile: HostileUpstream;
  const MESSAGES: Record<string, string> = {
    nul: 'bad\u0000thing',
    surrogate: 'bad\ud800thing',
    low: 'x\udc00',
  };
  beforeAll(async () => {
    own = await createTenant(t);
    hostile = await startHostileUpstream((msg, res) => {
      const message = MESSAGES[String(msg.params?.name)] ?? 'plain';
      res
        .writeHead(200, { 'content-type': 'application/json' })
        .end(
          JSON.stringify({ jsonrpc: '2.0', id: msg.id, error: { code: -32000, message, data: { k: 1 } } }),
        );
    });
    await createUpstream(t, own, { name: 'unstorable', slug: 'unstorable', url: hostile.url });
  });
  afterAll(() => hostile.close());

  it('records the failed call with the message escaped and answers the upstream error with its receipt', async () => {
    const url = `${t.url}/v1/mcp/unstorable`;
    const key = { 'x-service-api-key': own.apiKey };
    const session = await rawSession(url, key);
    const escaped: Record<string, string> = {
      nul: 'bad\\u0000thing',
      surrogate: 'bad\\ud800thing',
      low: 'x\\udc00',
    };
    for (const [tool, message] of Object.entries(MESSAGES)) {
      for (const headers of [session, key]) {
        const body = (await rawRpc(url, call(tool, tool, {}), headers)).json();
        // The client gets the upstream's own error, unchanged, with the receipt of the recorded run.
        expect(body.error, tool).toMatchObject({ code: -32000, message, data: { k: 1 } });
        const recorded = body.error.data._meta.veto_decision;
        expect(body.error.data._meta.veto_receipt, tool).toBeDefined();
        const row = await decision(recorded.decisionId);
        expect(row.decision).toBe('allow');
        expect(row.reason, tool).toContain(
          `upstream call failed: upstream answered error -32000: ${escaped[tool]}`,
        );
        const receipt = await storedReceipt(t, row.receipt_id);
        expect(receipt.reason, tool).toBe(row.reason);
      }
    }
  });
});

describe('MCP gateway on answers nested millions deep within the size bound', () => {
  // A tenant of its own: its calls do not count against the others' rate limit.
  let own: Tenant;
  // 8 MB: within the 8 MiB message bound, but JSON.parse would take seconds of the event loop.
  const LEVELS = 4_000_000;
  let streamable: HostileUpstream;
  let sse: HostileUpstream;
  beforeAll(async () => {
    own = await createTenant(t);
    streamable = await startHostileUpstream((msg, res) => {
      const name = msg.params?.name;
      if (name === 'deep-json')
        res.writeHead(200, { 'content-type': 'application/json' }).end(deepResult(msg.id, LEVELS));
      else if (name === 'deep-sse')
        res.writeHead(200, { 'content-type': 'text/event-stream' }).end(sseEvent(deepResult(msg.id, LEVELS)));
      else
        res
          .writeHead(200, { 'content-type': 'application/json' })
          .end(JSON.stringify({ jsonrpc: '2.0', id: msg.id, result: { content: [] } }));
    });
    sse = await startHostileSseUpstream((msg, send) => {
      if (msg.params?.name === 'deep-sse') send(sseEvent(deepResult(msg.id, LEVELS)));
      else send({ jsonrpc: '2.0', id: msg.id, result: { content: [] } });
    });
    await createUpstream(t, own, { name: 'deep', slug: 'deep', url: streamable.url });
    await createUpstream(t, own, {
      name: 'deep-sse',
      slug: 'deep-sse',
      transport: 'mcp-sse',
      url: sse.url,
    });
  });
  afterAll(async () => {
    await streamable.close();
    await sse.close();
  });

  it.each([
    ['a JSON answer', 'deep', 'deep-json'],
    ['an SSE answer', 'deep', 'deep-sse'],
    ['an HTTP+SSE event', 'deep-sse', 'deep-sse'],
  ])(
    'refuses %s before parsing it: the call fails at once, the event loop is not held and the session goes on',
    async (_what, slug, tool) => {
      const url = `${t.url}/v1/mcp/${slug}`;
      const key = { 'x-service-api-key': own.apiKey };
      const session = await rawSession(url, key);
      const loop = monitorEventLoopDelay({ resolution: 10 });
      loop.enable();
      const started = Date.now();
      const answers = [
        await rawRpc(url, call('in', tool, {}), session),
        await rawRpc(url, call('bare', tool, {}), key),
      ];
      loop.disable();
      // Not at timeoutMs (30 s): when the answer came.
      expect(Date.now() - started).toBeLessThan(10_000);
      // JSON.parse of one such answer holds the loop for seconds; the scan of its text, a few dozen ms.
      expect(loop.max / 1e6).toBeLessThan(1000);
      for (const res of answers) {
        const body = res.json();
        expect(body.error).toMatchObject({ code: -32603 });
        expect(body.error.message).toMatch(/upstream message nested deeper than 128 levels/);
        expect((await decision(body.error.data.decisionId)).reason).toMatch(
          /upstream call failed: upstream message nested deeper than 128 levels/,
        );
      }
      expect((await rawRpc(url, call('ok', 'echo', {}), session)).json()).toMatchObject({
        id: 'ok',
        result: {},
      });
    },
  );
});
