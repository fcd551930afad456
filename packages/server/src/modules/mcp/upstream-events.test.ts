import type { ServerResponse } from 'node:http';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  deepResult,
  type HostileUpstream,
  type Received,
  sseEvent,
  startHostileSseUpstream,
  startHostileUpstream,
} from '../../../test/hostile-upstream.js';
import { createHttpFetch } from './http-fetch.js';
import { DEFAULT_UPSTREAM_LIMITS } from './model.js';
import { openClient, probeUpstream, type UpstreamTarget } from './upstream-client.js';
import { type UpstreamMessage, UpstreamSession } from './upstream-session.js';

/**
 * How upstream sessions and the /test probe read what an upstream sends: batches (a message in them
 * nested too deep fails its request at once, as a message alone does; a batch that is not JSON is
 * refused as any such message is), and SSE streams whose lines end in CR, LF or CRLF.
 */
const http = createHttpFetch({ allowPrivate: true });
let streamable: HostileUpstream;
let sse: HostileUpstream;
/** What the HTTP+SSE upstream answers tools/list with (the probe's second step). */
let sseList: (id: Received['id']) => string;

const DEEP = 200;
const NOTE = { jsonrpc: '2.0', method: 'notifications/message', params: { level: 'info', data: 'x' } };
const later = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Writes `parts` of an answer one after another, `ms` apart, so that they arrive as separate chunks. */
async function trickle(write: (text: string) => void, parts: string[], ms = 50) {
  for (const [i, part] of parts.entries()) {
    if (i > 0) await later(ms);
    write(part);
  }
}

/**
 * One JSON-RPC result as two SSE data lines (the JSON split between them) ending in `end`, sent as
 * two chunks: the first ends with the CR of the first line end, the second starts with the rest.
 */
const splitResult = (id: Received['id'], end: string) => [
  `data: {"jsonrpc":"2.0",${end.slice(0, 1)}`,
  `${end.slice(1)}data: "id":${JSON.stringify(id)},"result":{"split":true}}${end}${end}`,
];

/** A response nested too deep, its data lines split as splitResult's (CRLF). */
const splitDeep = (id: Received['id']) => [
  `data: {"jsonrpc":"2.0","id":${JSON.stringify(id)},"result":{"x":${'['.repeat(DEEP)}\r`,
  `\ndata: ${']'.repeat(DEEP)}}}\r\n\r\n`,
];

beforeAll(async () => {
  streamable = await startHostileUpstream((msg, res: ServerResponse) => {
    const name = msg.method === 'tools/call' ? msg.params?.name : msg.method;
    const result = JSON.stringify({ jsonrpc: '2.0', id: msg.id, result: { content: [] } });
    if (name === 'trailing-comma')
      res.writeHead(200, { 'content-type': 'application/json' }).end(`[${deepResult(msg.id, DEEP)},]`);
    else if (name === 'cr' || name === 'crlf') {
      const end = name === 'cr' ? '\r' : '\r\n';
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.end(`event: message${end}data: ${result}${end}${end}`);
    } else if (name === 'cr-split' || name === 'crlf-split' || name === 'deep-split') {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.flushHeaders();
      const parts =
        name === 'deep-split' ? splitDeep(msg.id) : splitResult(msg.id, name === 'cr-split' ? '\r' : '\r\n');
      void trickle((t) => res.write(t), parts).then(() => res.end());
    } else if (name === 'tools/list')
      res.writeHead(200, { 'content-type': 'text/event-stream' }).end(sseEvent(deepResult(msg.id, DEEP)));
    else res.writeHead(200, { 'content-type': 'application/json' }).end(result);
  });
  sse = await startHostileSseUpstream((msg, send) => {
    const name = msg.method === 'tools/call' ? msg.params?.name : msg.method;
    const result = { jsonrpc: '2.0', id: msg.id, result: { content: [] } };
    if (name === 'deep-batch') send(sseEvent(`[${deepResult(msg.id, DEEP)},${JSON.stringify(NOTE)}]`));
    else if (name === 'deep-batch-trailing-comma') send(sseEvent(`[${deepResult(msg.id, DEEP)},]`));
    else if (name === 'batch') send(sseEvent([NOTE, result]));
    // Elements that are no messages, next to a notification and the response.
    else if (name === 'odd-batch') send(sseEvent([1, 'x', null, true, [NOTE], NOTE, result]));
    else if (name === 'cr') send(`event: message\rdata: ${JSON.stringify(result)}\r\r`);
    // The event ends on a CR alone in the middle of the chunk: the next one begins but does not end.
    else if (name === 'cr-then-more')
      send(`event: message\rdata: ${JSON.stringify(result)}\r\r: more to come\n`);
    else if (name === 'cr-split' || name === 'crlf-split')
      void trickle(send, splitResult(msg.id, name === 'cr-split' ? '\r' : '\r\n'));
    else if (name === 'deep-split') void trickle(send, splitDeep(msg.id));
    else if (name === 'tools/list') send(sseList(msg.id));
    else send(result);
  });
});
afterAll(async () => {
  await streamable.close();
  await sse.close();
  http.close();
});

const target = (transport: UpstreamTarget['transport'], url: string, timeoutMs: number): UpstreamTarget => ({
  id: 'u1',
  transport,
  url,
  headers: {},
  timeoutMs,
});

let open: UpstreamSession[] = [];
afterEach(async () => {
  await Promise.all(open.map((s) => s.close()));
  open = [];
});

/** An upstream session (Streamable HTTP on the gateway's own transport, or HTTP+SSE on the SDK's). */
async function session(transport: UpstreamTarget['transport'], timeoutMs = 5000) {
  const messages: UpstreamMessage[] = [];
  const url = transport === 'mcp-sse' ? sse.url : streamable.url;
  const { session } = await UpstreamSession.open(
    target(transport, url, timeoutMs),
    { allowPrivate: true, fetch: http.fetch, request: http.request, standaloneStream: false },
    DEFAULT_UPSTREAM_LIMITS,
    { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'test', version: '1' } },
    {
      message: (m) => {
        messages.push(m);
        return true;
      },
      closed: () => {},
    },
  );
  session.notify('notifications/initialized', undefined);
  open.push(session);
  const call = (name: string) => session.request('tools/call', { name, arguments: {} }).done;
  return { session, messages, call };
}

const TOO_DEEP = `upstream message nested deeper than ${DEFAULT_UPSTREAM_LIMITS.maxDepth} levels`;

describe('a batch over HTTP+SSE', () => {
  it('fails the request whose response in it is nested too deep at once, and delivers the rest', async () => {
    const { session: s, messages, call } = await session('mcp-sse');
    const started = Date.now();
    await expect(call('deep-batch')).rejects.toMatchObject({ kind: 'invalid', message: TOO_DEEP });
    // Not at timeoutMs (5 s): when the batch was read.
    expect(Date.now() - started).toBeLessThan(2500);
    expect(messages).toEqual([NOTE]);
    expect(s.closedReason).toBeNull();
    expect(await call('ok')).toEqual({ content: [] });
  });

  it('delivers each message of a batch within the bounds', async () => {
    const { messages, call } = await session('mcp-sse');
    expect(await call('batch')).toEqual({ content: [] });
    expect(messages).toEqual([NOTE]);
  });

  it('leaves out the elements that are not objects, unreported, and delivers the response next to them', async () => {
    const { session: s, messages, call } = await session('mcp-sse');
    expect(await call('odd-batch')).toEqual({ content: [] });
    expect(messages).toEqual([NOTE]);
    expect(s.closedReason).toBeNull();
    // The SDK's reader would drop each of them too, but as an error: none is reported.
    const client = await openClient(target('mcp-sse', sse.url, 5000), {
      allowPrivate: true,
      fetch: http.fetch,
    });
    const errors: Error[] = [];
    client.onerror = (err) => errors.push(err);
    try {
      expect(await client.callTool({ name: 'odd-batch', arguments: {} })).toEqual({ content: [] });
    } finally {
      await client.close();
    }
    expect(errors).toEqual([]);
  });

  it('refuses a batch that is not JSON (a trailing comma) as it refuses any message that is not', async () => {
    const { session: s, call } = await session('mcp-sse', 800);
    // Nothing in it can be read, so nothing answers the request: it ends at its timeout.
    await expect(call('deep-batch-trailing-comma')).rejects.toMatchObject({ kind: 'timeout' });
    expect(s.closedReason).toBeNull();
    expect(await call('ok')).toEqual({ content: [] });
  });
});

describe('a batch that is not JSON over Streamable HTTP', () => {
  it('fails its request as not JSON, not as too deep', async () => {
    const { call } = await session('mcp-streamable-http');
    await expect(call('trailing-comma')).rejects.toMatchObject({
      kind: 'invalid',
      message: expect.stringMatching(/^upstream sent an invalid answer: it is not JSON/),
    });
    expect(await call('ok')).toEqual({ content: [] });
  });
});

describe('the /test probe', () => {
  it.each([
    [
      'Streamable HTTP',
      'mcp-streamable-http' as const,
      (id: Received['id']) => sseEvent(deepResult(id, DEEP)),
    ],
    ['HTTP+SSE', 'mcp-sse' as const, (id: Received['id']) => sseEvent(deepResult(id, DEEP))],
    [
      'HTTP+SSE, in a batch',
      'mcp-sse' as const,
      (id: Received['id']) => sseEvent(`[${deepResult(id, DEEP)}]`),
    ],
  ])(
    'reports an SSE answer nested too deep as such over %s, not as a timeout',
    async (_what, transport, list) => {
      sseList = list;
      const url = transport === 'mcp-sse' ? sse.url : streamable.url;
      const result = await probeUpstream(target(transport, url, 5000), {
        allowPrivate: true,
        fetch: http.fetch,
      });
      expect(result).toMatchObject({ ok: false, message: `tools/list failed: ${TOO_DEEP}` });
      expect(result.latencyMs).toBeLessThan(2500);
    },
  );
});

describe('SSE lines', () => {
  it.each([
    ['Streamable HTTP', 'mcp-streamable-http' as const],
    ['HTTP+SSE', 'mcp-sse' as const],
  ])(
    'may end in CR alone, LF or CRLF, a CRLF split between chunks included, over %s',
    async (_what, transport) => {
      const { call } = await session(transport, 3000);
      if (transport === 'mcp-streamable-http') expect(await call('crlf')).toEqual({ content: [] });
      expect(await call('cr')).toEqual({ content: [] });
      if (transport === 'mcp-sse') expect(await call('cr-then-more')).toEqual({ content: [] });
      // A CR ending one chunk and the LF starting the next are one line end: no blank line between,
      // which would end the event halfway through its JSON.
      expect(await call('crlf-split')).toEqual({ split: true });
      expect(await call('cr-split')).toEqual({ split: true });
      // The same for the bounds: a message too deep is seen whole, and fails its request at once.
      await expect(call('deep-split')).rejects.toMatchObject({ kind: 'invalid', message: TOO_DEEP });
      expect(await call('ok')).toEqual({ content: [] });
    },
  );
});
