import type { ServerResponse } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useTestApp } from './fixture.js';
import { asUser, createTenant, type Tenant } from './helpers.js';
import { type HostileUpstream, type Received, startHostileUpstream } from './hostile-upstream.js';
import { storedReceipt } from './ledger.js';
import { createUpstream, putPolicy, rawRpc, rawSession, setTier } from './mcp-helpers.js';

/**
 * Clients and upstreams that push JSON-RPC to its edges: concurrent calls of one session against a
 * session limit, ids of every JSON type, batches, clients that leave mid-call, approvals presented
 * in ways the upstream reads differently.
 */
let upstream: HostileUpstream;
let tenant: Tenant;
let url: string;
/** Calls whose answers wait until the test releases them, by tool name. */
const held: { msg: Received; res: ServerResponse }[] = [];

const answer = (msg: Received, res: ServerResponse, text = String(msg.params?.name)) =>
  res
    .writeHead(200, { 'content-type': 'application/json' })
    .end(JSON.stringify({ jsonrpc: '2.0', id: msg.id, result: { content: [{ type: 'text', text }] } }));

const t = useTestApp({}, { listen: true });
beforeAll(async () => {
  upstream = await startHostileUpstream((msg, res) => {
    if (msg.method === 'tools/call' && msg.params?.name === 'sample') {
      // A server request on the call's answer stream; the response once the client answered it.
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const ask = { jsonrpc: '2.0', id: `srv-${msg.id}`, method: 'sampling/createMessage', params: {} };
      res.write(`event: message\ndata: ${JSON.stringify(ask)}\n\n`);
      const wait = setInterval(() => {
        const got = upstream.answers.find((a) => a.id === ask.id);
        if (!got) return;
        clearInterval(wait);
        const result = { content: [{ type: 'text', text: JSON.stringify(got.result) }] };
        res.end(`event: message\ndata: ${JSON.stringify({ jsonrpc: '2.0', id: msg.id, result })}\n\n`);
      }, 10);
      res.on('close', () => clearInterval(wait));
      return;
    }
    if (msg.method === 'tools/call' && msg.params?.name === 'hold') {
      held.push({ msg, res });
      return;
    }
    answer(msg, res);
  });
  tenant = await createTenant(t);
  await createUpstream(t, tenant, { name: 'adv', slug: 'adv', url: upstream.url, timeoutMs: 10_000 });
  url = `${t.url}/v1/mcp/adv`;
});
afterAll(async () => {
  await upstream.close();
});

const key = () => ({ 'x-service-api-key': tenant.apiKey });
const call = (id: unknown, name: string, args: Record<string, unknown> = {}, extra = {}) => ({
  jsonrpc: '2.0',
  id,
  method: 'tools/call',
  params: { name, arguments: args, ...extra },
});
const toolCalls = (name: string) =>
  upstream.requests.filter((r) => r.method === 'tools/call' && r.params?.name === name);

async function until(cond: () => boolean, ms = 5000) {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe('MCP gateway: concurrent calls of one session', () => {
  it('forwards exactly maxCalls of many concurrent calls of one session', async () => {
    await putPolicy(t, tenant.orgId, 'limited', {
      mode: 'deterministic',
      constraints: [],
      sessionConstraints: { maxCalls: 2 },
    });
    const session = await rawSession(url, key());
    const answers = await Promise.all(
      Array.from({ length: 8 }, (_, i) => rawRpc(url, call(i + 1, 'limited'), session)),
    );
    const codes = answers.map((a) => a.json().error?.code ?? 'ok');
    expect(codes.filter((c) => c === 'ok')).toHaveLength(2);
    expect(codes.filter((c) => c === -32001)).toHaveLength(6);
    expect(toolCalls('limited')).toHaveLength(2);
  });

  it('refuses a second request with an id in flight, and keeps 1 and "1" apart', async () => {
    const session = await rawSession(url, key());
    const before = toolCalls('hold').length;
    const first = rawRpc(url, call(1, 'hold'), session);
    await until(() => toolCalls('hold').length === before + 1);
    const dup = await rawRpc(url, call(1, 'hold'), session);
    expect(dup.json()).toMatchObject({ id: 1, error: { code: -32600 } });
    const other = await rawRpc(url, call('1', 'echo'), session);
    expect(other.json()).toMatchObject({ id: '1', result: { content: [{ text: 'echo' }] } });
    for (const h of held.splice(0)) answer(h.msg, h.res);
    expect((await first).json()).toMatchObject({ id: 1, result: { content: [{ text: 'hold' }] } });
    expect(toolCalls('hold')).toHaveLength(before + 1);
  });
});

describe('MCP gateway: ids and batches', () => {
  it('refuses ids that are not strings or safe integers, and batches, forwarding nothing', async () => {
    const session = await rawSession(url, key());
    const before = upstream.requests.length;
    // Past 2^53-1 an id may arrive rounded (and is answered in another notation): refused too.
    for (const id of [null, 1.5, true, { a: 1 }, [1], 1e21, 2 ** 53]) {
      const res = await rawRpc(url, call(id, 'echo'), session);
      expect(res.status).toBe(400);
      expect(res.json()).toMatchObject({ id: null, error: { code: -32600 } });
    }
    const batch = await rawRpc(
      url,
      [call(1, 'echo'), { jsonrpc: '2.0', id: 2, method: 'tools/list' }],
      session,
    );
    expect(batch.status).toBe(400);
    expect(upstream.requests.length).toBe(before);
    for (const id of [0, -1, Number.MAX_SAFE_INTEGER, -Number.MAX_SAFE_INTEGER, '', 'x'.repeat(1000)]) {
      const res = await rawRpc(url, call(id, 'echo'), session);
      expect(res.status).toBe(200);
      expect(res.json()).toMatchObject({ id, result: { content: [{ text: 'echo' }] } });
    }
  });
});

describe('MCP gateway: params the upstream could read otherwise', () => {
  it('forwards exactly the name and arguments it checked when a key is repeated', async () => {
    const session = await rawSession(url, key());
    const body =
      '{"jsonrpc":"2.0","id":"dup","method":"tools/call","params":{"name":"harmless","arguments":{"to":"a","to":"b"},"name":"twice"}}';
    const res = await rawRpc(url, body, session);
    expect(res.json()).toMatchObject({ id: 'dup', result: { content: [{ text: 'twice' }] } });
    const decided = await t.store.db
      .selectFrom('decisions')
      .selectAll()
      .where('receipt_id', '=', res.json().result._meta.veto_receipt.receipt_id)
      .executeTakeFirstOrThrow();
    const sent = toolCalls('twice').at(-1)!;
    expect(toolCalls('harmless')).toHaveLength(0);
    expect(sent.params).toEqual({ name: 'twice', arguments: { to: 'b' } });
    expect(decided.tool_name).toBe('twice');
  });
});

describe('MCP gateway: a client that leaves mid-call', () => {
  it('still records the call as it ran, with its result bound', async () => {
    const session = await rawSession(url, key());
    const before = toolCalls('hold').length;
    const abort = new AbortController();
    const gone = fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json', ...session },
      body: JSON.stringify(call('leave', 'hold', { n: 1 })),
      signal: abort.signal,
    }).catch(() => null);
    await until(() => toolCalls('hold').length === before + 1);
    abort.abort();
    await gone;
    await new Promise((r) => setTimeout(r, 50));
    for (const h of held.splice(0)) answer(h.msg, h.res);
    const recorded = () =>
      t.store.db
        .selectFrom('decisions')
        .selectAll()
        .where('organization_id', '=', tenant.orgId)
        .where('tool_name', '=', 'hold')
        .orderBy('created_at', 'desc')
        .executeTakeFirst();
    let row = await recorded();
    const deadline = Date.now() + 5000;
    while (!row && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 20));
      row = await recorded();
    }
    expect(row?.decision).toBe('allow');
    expect(row?.reason).not.toMatch(/failed|not forwarded/);
    expect(await storedReceipt(t, row!.receipt_id)).toHaveProperty('result_hash');
  });
});

describe('MCP gateway: approvals presented in a call', () => {
  it('uses an approval only for the tool and arguments it was granted for', async () => {
    await setTier(t, tenant.orgId, 'team');
    await putPolicy(t, tenant.orgId, 'pay', {
      mode: 'deterministic',
      constraints: [{ argumentName: 'amount', enabled: true, maximum: 100, action: 'require_approval' }],
    });
    const session = await rawSession(url, key());
    const asked = await rawRpc(url, call(1, 'pay', { amount: 500 }), session);
    expect(asked.json().error.code).toBe(-32002);
    const approvalId = asked.json().error.data.approvalId as string;
    const resolved = await t.inject({
      method: 'POST',
      url: `/v1/approvals/${approvalId}/resolve`,
      headers: asUser(tenant),
      payload: { action: 'approve' },
    });
    expect(resolved.statusCode).toBe(200);
    const before = toolCalls('pay').length;
    // In the arguments it is just an argument (another call than the approved one).
    const inArgs = await rawRpc(url, call(2, 'pay', { amount: 500, approval_id: approvalId }), session);
    expect(inArgs.json().error.code).toBe(-32002);
    const otherArgs = await rawRpc(
      url,
      call(3, 'pay', { amount: 900 }, { _meta: { approval_id: approvalId } }),
      session,
    );
    expect(otherArgs.json().error.code).toBe(-32001);
    expect(toolCalls('pay')).toHaveLength(before);
    const ok = await rawRpc(
      url,
      call(4, 'pay', { amount: 500 }, { _meta: { approval_id: approvalId } }),
      session,
    );
    expect(ok.json()).toMatchObject({ id: 4, result: { content: [{ text: 'pay' }] } });
    const again = await rawRpc(
      url,
      call(5, 'pay', { amount: 500 }, { _meta: { approval_id: approvalId } }),
      session,
    );
    expect(again.json().error.code).toBe(-32001);
    expect(toolCalls('pay')).toHaveLength(before + 1);
  });
});

describe('MCP gateway: server requests and resumption across sessions', () => {
  it('forwards only the answer of the session the request was sent to, once', async () => {
    const a = await rawSession(url, key());
    const b = await rawSession(url, key());
    const res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...a },
      body: JSON.stringify(call('s1', 'sample')),
    });
    expect(res.headers.get('content-type')).toMatch(/event-stream/);
    const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
    let text = '';
    while (!text.includes('sampling/createMessage')) {
      const r = await reader.read();
      if (r.done) throw new Error(`the stream ended before the server request: ${text}`);
      text += r.value;
    }
    const m = /id: (\S+)\n(?:event: \S+\n)?data: (.*sampling.*)\n/.exec(text)!;
    const ask = JSON.parse(m[2]!);
    const answerOf = (who: string) => ({ jsonrpc: '2.0', id: ask.id, result: { who } });
    // Another session of the same key answers first: dropped. So is a resumption of A's stream from B.
    expect((await rawRpc(url, answerOf('b'), b)).status).toBe(202);
    const resumed = await fetch(url, {
      headers: { ...b, accept: 'text/event-stream', 'last-event-id': m[1]! },
    });
    expect(resumed.status).toBe(409);
    await resumed.body?.cancel();
    await new Promise((r) => setTimeout(r, 100));
    expect(upstream.answers.filter((x) => x.id === ask.id)).toHaveLength(0);
    expect((await rawRpc(url, answerOf('a'), a)).status).toBe(202);
    expect((await rawRpc(url, answerOf('a-again'), a)).status).toBe(202);
    while (!text.includes('"id":"s1"')) {
      const r = await reader.read();
      if (r.done) break;
      text += r.value;
    }
    expect(text).toContain('{\\"who\\":\\"a\\"}');
    await new Promise((r) => setTimeout(r, 100));
    expect(upstream.answers.filter((x) => x.id === ask.id).map((x) => x.result)).toEqual([{ who: 'a' }]);
  });
});
