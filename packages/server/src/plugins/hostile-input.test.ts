import { connect } from 'node:net';
import { beforeAll, describe, expect, it, vi } from 'vitest';
import { setTier } from '../../test/approvals.js';
import { useTestApp } from '../../test/fixture.js';
import { asUser, createTenant, expectError, keyHeader, type Tenant } from '../../test/helpers.js';
import { WsClient, waitFor } from '../../test/streams.js';
import { bodyJsonProblem, MAX_BODY_DEPTH, MAX_JSON_DEPTH } from '../lib/json.js';
import { MAX_PARAM_LENGTH } from './errors.js';

let a: Tenant;
const t = useTestApp({}, { listen: true });
beforeAll(async () => {
  a = await createTenant(t);
  await setTier(t, a, 'team');
});

const json = { 'content-type': 'application/json' };
const raw = (method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE', url: string, payload?: string) =>
  t.inject({
    method,
    url,
    headers: { ...asUser(a), ...json },
    ...(payload === undefined ? {} : { payload }),
  });
const DEEP = `${'['.repeat(10_000)}${']'.repeat(10_000)}`;

describe('bodyJsonProblem', () => {
  it('bounds depth per field, and finds Infinity and lone surrogates anywhere', () => {
    let ok: unknown = 1;
    for (let i = 0; i < MAX_JSON_DEPTH; i++) ok = [ok];
    expect(bodyJsonProblem({ f: ok })).toBeNull();
    expect(bodyJsonProblem({ f: [ok] })).toBe(`body/f is nested deeper than ${MAX_JSON_DEPTH} levels`);
    // A body that is an array (a batch) names the field of its item, which has the same bound.
    expect(bodyJsonProblem(JSON.parse(DEEP), MAX_BODY_DEPTH + 1)).toBe(
      `body/0/0 is nested deeper than ${MAX_JSON_DEPTH} levels`,
    );
    expect(bodyJsonProblem([{ f: ok }], MAX_BODY_DEPTH + 1)).toBeNull();
    // A field whose name holds a slash counts its levels as any other.
    expect(bodyJsonProblem({ 'a/b': [ok] })).toBe(`body/a/b is nested deeper than ${MAX_JSON_DEPTH} levels`);
    expect(bodyJsonProblem([{ 'a/b': [ok] }], MAX_BODY_DEPTH + 1)).toBe(
      `body/0/a/b is nested deeper than ${MAX_JSON_DEPTH} levels`,
    );
    expect(bodyJsonProblem({ a: [{ b: Number.NEGATIVE_INFINITY }] })).toMatch(
      /^body\/a\/0\/b is a number outside/,
    );
    expect(bodyJsonProblem({ a: { b: 'x\ud800' } })).toMatch(/^body\/a\/b is not well-formed Unicode/);
    expect(bodyJsonProblem({ a: { 'k\udc00': 1 } })).toMatch(/^body\/a has a key that is not well-formed/);
    expect(bodyJsonProblem({ a: ['\u0000'] })).toMatch(/^body\/a\/0 contains U\+0000/);
    // A well-formed pair is fine; so are -0, tiny numbers and big integers.
    expect(bodyJsonProblem({ s: '\ud83d\ude00', n: [-0, 1e-320, 2 ** 60, Number.MAX_VALUE] })).toBeNull();
    expect(MAX_BODY_DEPTH).toBe(MAX_JSON_DEPTH + 1);
  });
});

describe('deeply nested bodies answer 400 before any recursive code runs', () => {
  const routes: [string, string, 'POST' | 'PUT'][] = [
    ['POST', '/v1/policies', 'POST'],
    ['PUT', '/v1/policies/deep_tool', 'PUT'],
    ['POST', '/v1/policies/deep_tool/validate', 'POST'],
    ['POST', '/v1/tools/register', 'POST'],
    ['POST', '/v1/tools/sync', 'POST'],
    ['POST', '/v1/policy-drafts', 'POST'],
  ].map(([m, u]) => [m!, u!, m as 'POST' | 'PUT']);

  for (const [, url, method] of routes) {
    it(`${method} ${url}: 10,000 levels as the body, and inside one field`, async () => {
      expectError(await raw(method, url, DEEP), 400, 'validation_failed');
      const inField = await raw(
        method,
        url,
        `{"toolName":"deep_tool","constraints":[{"argumentName":${DEEP}}],"tools":${DEEP}}`,
      );
      expectError(inField, 400, 'validation_failed');
      expect(inField.json().error.message).toMatch(
        /^body\/(constraints|tools) is nested deeper than 64 levels$/,
      );
    });
  }

  it('changes nothing', async () => {
    const policies = await t.inject({ method: 'GET', url: '/v1/policies', headers: asUser(a) });
    const tools = await t.inject({ method: 'GET', url: '/v1/tools', headers: asUser(a) });
    expect(policies.json().data).toEqual([]);
    expect(tools.json().data).toEqual([]);
  });

  it('gives each item of a batch of client decisions the bound a single one has', async () => {
    const nested = (levels: number) => `${'['.repeat(levels - 1)}{}${']'.repeat(levels - 1)}`;
    const item = (levels: number) =>
      `{"tool_name":"deep_log","arguments":{"a":${nested(levels - 1)}},"decision":"allow","mode":"deterministic","latency_ms":1,"source":"client"}`;
    const post = (payload: string) =>
      t.inject({
        method: 'POST',
        url: '/v1/decisions',
        headers: { ...keyHeader(a.apiKey), ...json },
        payload,
      });
    expect((await post(item(MAX_JSON_DEPTH))).statusCode).toBe(201);
    expect((await post(`[${item(2)},${item(MAX_JSON_DEPTH)}]`)).statusCode).toBe(201);
    const deeper = await post(`[${item(2)},${item(MAX_JSON_DEPTH + 1)}]`);
    expectError(deeper, 400, 'validation_failed');
    expect(deeper.json().error.message).toBe(
      `body/1/arguments is nested deeper than ${MAX_JSON_DEPTH} levels`,
    );
    expect((await post(item(MAX_JSON_DEPTH + 1))).json().error.message).toBe(
      `body/arguments is nested deeper than ${MAX_JSON_DEPTH} levels`,
    );
  });

  it('answers a too-deep JSON-RPC message with -32600 and its id', async () => {
    const res = await t.inject({
      method: 'POST',
      url: '/v1/mcp/charter',
      headers: { ...keyHeader(a.apiKey), ...json },
      payload: `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"svc_register_tools","arguments":{"tools":${DEEP}}}}`,
    });
    expect(res.statusCode).toBe(400);
    expect(res.json()).toMatchObject({ id: 7, error: { code: -32600 } });
  });
});

describe('numbers outside the double range', () => {
  it('POST /v1/approvals with 1e999 answers 400 naming the field, and opens nothing', async () => {
    const res = await raw('POST', '/v1/approvals', '{"toolName":"x","arguments":{"amount":1e999}}');
    expectError(res, 400, 'validation_failed');
    expect(res.json().error.message).toMatch(/^body\/arguments\/amount is a number outside/);
    const pending = await t.inject({ method: 'GET', url: '/v1/approvals/pending', headers: asUser(a) });
    expect(pending.json().data).toEqual([]);
  });

  it('answers the same on validate and decisions (one rule wherever JSON enters)', async () => {
    for (const url of ['/v1/tools/validate', '/v1/decisions']) {
      const res = await t.inject({
        method: 'POST',
        url,
        headers: { ...keyHeader(a.apiKey), ...json },
        payload: '{"tool_name":"x","arguments":{"amount":-1e999},"decision":"allow"}',
      });
      expectError(res, 400, 'validation_failed');
      expect(res.json().error.message).toMatch(/^body\/arguments\/amount is a number outside/);
    }
  });

  it('a draft rule value of 1e999 is refused, never stored as null', async () => {
    const body = (value: string) =>
      `{"name":"n","projectId":"${a.projectId}","createdByAgentId":"agent","rules":[{"id":"r1","action":"block",` +
      `"tools":["pay"],"conditions":[{"field":"amount","operator":"greater_than","value":${value}}],"severity":"high"}]}`;
    const res = await raw('POST', '/v1/policy-drafts', body('1e999'));
    expectError(res, 400, 'validation_failed');
    expect(res.json().error.message).toMatch(/^body\/rules\/0\/conditions\/0\/value is a number outside/);
    const created = await raw('POST', '/v1/policy-drafts', body('200'));
    expect(created.statusCode).toBe(201);
    const id = created.json().data.id;
    const patched = await raw(
      'PATCH',
      `/v1/policy-drafts/${id}`,
      '{"rules":[{"id":"r1","action":"block","tools":["pay"],"conditions":[{"field":"amount","operator":"greater_than","value":1e999}],"severity":"high"}]}',
    );
    expectError(patched, 400, 'validation_failed');
    const read = await raw('GET', `/v1/policy-drafts/${id}`);
    expect(read.json().data.rules[0].conditions[0].value).toBe(200);
  });
});

describe('bad encodings', () => {
  it('a body that is not UTF-8 answers 400 invalid_json', async () => {
    const res = await t.inject({
      method: 'POST',
      url: '/v1/policies',
      headers: { ...asUser(a), ...json },
      payload: Buffer.concat([Buffer.from('{"toolName":"a'), Buffer.from([0xff, 0xfe]), Buffer.from('"}')]),
    });
    expectError(res, 400, 'invalid_json');
  });

  it('prototype keys answer 400 invalid_json and pollute nothing', async () => {
    for (const body of [
      '{"toolName":"p","__proto__":{"polluted":true}}',
      '{"constructor":{"prototype":{"polluted":true}}}',
    ]) {
      expectError(await raw('POST', '/v1/policies', body), 400, 'invalid_json');
    }
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it('a lone surrogate in a name answers 400 instead of being stored as another name', async () => {
    const res = await raw('POST', '/v1/policies', '{"toolName":"pay\\ud800"}');
    expectError(res, 400, 'validation_failed');
    expect(res.json().error.message).toMatch(/^body\/toolName is not well-formed Unicode/);
  });

  it('U+0000 answers 400 wherever it enters: path, query and body (PostgreSQL text cannot hold it)', async () => {
    for (const url of [
      '/v1/organizations/slug/%00',
      '/v1/approvals/a%00b',
      '/v1/mcp/upstreams?projectId=%00',
    ]) {
      const res = await t.inject({ method: 'GET', url, headers: asUser(a) });
      expectError(res, 400, 'validation_failed');
      expect(res.json().error.message).toMatch(/%00/);
    }
    const body = await t.inject({
      method: 'POST',
      url: '/v1/tools/validate',
      headers: keyHeader(a.apiKey),
      payload: { tool_name: 'x', arguments: { data: 'a\u0000b' } },
    });
    expectError(body, 400, 'validation_failed');
    expect(body.json().error.message).toBe(
      'body/arguments/data contains U+0000 (NUL), which no stored value may hold',
    );
    const key = await raw('POST', '/v1/api-keys', `{"name":"k","projectId":"p\\u0000"}`);
    expectError(key, 400, 'validation_failed');
  });

  for (const path of ['/v1/policies/%ff', '/v1/policies/%', '/v1/policies/%C0%AE', '/v1/nothing/%E0%A4%A']) {
    it(`a malformed percent-encoding (${path}) answers 400 in the envelope`, async () => {
      const res = await t.inject({ method: 'GET', url: path, headers: asUser(a) });
      expectError(res, 400, 'validation_failed');
      expect(res.json().error.message).toBe('The path is not valid percent-encoded UTF-8');
      expect(res.headers['x-request-id']).toBeTruthy();
    });
  }
});

describe('path parameters reach every stored name', () => {
  const names = [
    'a'.repeat(150),
    'b'.repeat(200),
    // 200 UTF-16 units, 800 bytes of UTF-8 and 2400 characters once percent-encoded.
    '\u{1F600}'.repeat(100),
    'pay/../x?y#z%25 ü',
  ];
  for (const name of names) {
    it(`a policy and tool named ${JSON.stringify(name.slice(0, 24))}… (${name.length}) can be read, updated, (de)activated and deleted`, async () => {
      const p = `/v1/policies/${encodeURIComponent(name)}`;
      const reg = await t.inject({
        method: 'POST',
        url: '/v1/tools/register',
        headers: asUser(a),
        payload: { tools: [{ name, parameters: [{ name: 'amount', type: 'number', maximum: 5 }] }] },
      });
      expect(reg.statusCode, reg.body).toBe(200);
      const tool = await t.inject({
        method: 'GET',
        url: `/v1/tools/${encodeURIComponent(name)}`,
        headers: asUser(a),
      });
      expect(tool.statusCode, tool.body).toBe(200);
      const read = await t.inject({ method: 'GET', url: p, headers: asUser(a) });
      expect(read.statusCode, read.body).toBe(200);
      expect(read.json().toolName).toBe(name);
      const put = await t.inject({ method: 'PUT', url: p, headers: asUser(a), payload: { constraints: [] } });
      expect(put.json().version).toBe(2);
      for (const action of ['deactivate', 'activate']) {
        const res = await t.inject({ method: 'POST', url: `${p}/${action}`, headers: asUser(a) });
        expect(res.statusCode, res.body).toBe(200);
      }
      const dry = await t.inject({ method: 'POST', url: `${p}/validate`, headers: asUser(a), payload: {} });
      expect(dry.statusCode, dry.body).toBe(200);
      expect((await t.inject({ method: 'DELETE', url: p, headers: asUser(a) })).statusCode).toBe(200);
      expectError(await t.inject({ method: 'GET', url: p, headers: asUser(a) }), 404, 'not_found');
      const del = await t.inject({
        method: 'DELETE',
        url: `/v1/tools/${encodeURIComponent(name)}`,
        headers: asUser(a),
      });
      expect(del.statusCode).toBe(200);
    });
  }

  it('a 201-character name answers 400 from the route, a parameter past the router limit 400 too', async () => {
    expectError(await raw('GET', `/v1/policies/${'a'.repeat(201)}`), 400, 'validation_failed');
    const res = await raw('GET', `/v1/policies/${'a'.repeat(MAX_PARAM_LENGTH + 1)}`);
    expectError(res, 400, 'validation_failed');
    expect(res.json().error.message).toBe(`A path parameter is longer than ${MAX_PARAM_LENGTH} characters`);
  });
});

/** Sends raw bytes over TCP and returns everything the server wrote before it closed. */
function rawHttp(request: string): Promise<string> {
  const { hostname, port } = new URL(t.url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname, () => socket.write(request));
    let out = '';
    socket.on('data', (chunk) => {
      out += chunk;
    });
    socket.on('close', () => resolve(out));
    socket.on('error', reject);
  });
}

describe('requests the HTTP parser refuses', () => {
  const envelope = (answer: string) => JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4));

  it('a malformed header answers 400 in the envelope', async () => {
    const answer = await rawHttp('GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n');
    expect(answer).toMatch(/^HTTP\/1\.1 400 /);
    expect(envelope(answer)).toEqual({
      error: { code: 'validation_failed', message: 'Malformed HTTP request' },
    });
  });

  it('headers over 16 KiB answer 431 headers_too_large in the envelope', async () => {
    const answer = await rawHttp(`GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: ${'a'.repeat(20_000)}\r\n\r\n`);
    expect(answer).toMatch(/^HTTP\/1\.1 431 /);
    expect(envelope(answer).error.code).toBe('headers_too_large');
  });

  it('a broken request line answers 400, and the server keeps serving', async () => {
    const answer = await rawHttp('G\u0000T / HTTP/1.1\r\n\r\n');
    expect(envelope(answer).error.code).toBe('validation_failed');
    expect((await fetch(`${t.url}/healthz`)).status).toBe(200);
  });
});

describe('WebSocket client mistakes', () => {
  it('a frame over 64 KiB closes with 1009 and logs at info, never at error', async () => {
    const info = vi.spyOn(t.app.log, 'info');
    const error = vi.spyOn(t.app.log, 'error');
    const c = await WsClient.open(`${t.url.replace(/^http/, 'ws')}/ws?token=${encodeURIComponent(a.token)}`);
    c.ws.send('x'.repeat(64 * 1024 + 1));
    await waitFor(() => c.closed, 'closed');
    expect(c.closeCode).toBe(1009);
    expect(error).not.toHaveBeenCalled();
    expect(info).toHaveBeenCalledWith(
      expect.objectContaining({ code: 'WS_ERR_UNSUPPORTED_MESSAGE_LENGTH' }),
      'websocket client error',
    );
    // The API is unaffected.
    expect((await t.inject({ method: 'GET', url: '/healthz' })).statusCode).toBe(200);
  });
});

describe('GET /v1/mcp/upstreams?projectId=', () => {
  it("answers 404 for another organization's project, for users and keys", async () => {
    const b = await createTenant(t);
    for (const headers of [asUser(a), keyHeader(a.apiKey)]) {
      expectError(
        await t.inject({ method: 'GET', url: `/v1/mcp/upstreams?projectId=${b.projectId}`, headers }),
        404,
        'not_found',
      );
      expectError(
        await t.inject({ method: 'GET', url: '/v1/mcp/upstreams?projectId=unknown', headers }),
        404,
        'not_found',
      );
      const own = await t.inject({
        method: 'GET',
        url: `/v1/mcp/upstreams?projectId=${a.projectId}`,
        headers,
      });
      expect(own.json()).toEqual({ data: [] });
    }
  });
});
