import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { useTestApp } from '../../../test/fixture.js';
import { createTenant, type Tenant } from '../../../test/helpers.js';
import { createUpstream, rawRpc, rawSession } from '../../../test/mcp-helpers.js';
import { SseClient, waitFor } from '../../../test/streams.js';

/**
 * Large SSE traffic through the gateway, over real sockets: one event up to the 8 MiB message bound,
 * and a replay up to the 4 MiB replay bound, reach a client that reads; a client that stops reading
 * is still dropped once more than 1 MiB waits for it.
 */

/** An SDK MCP server with two tools: `report` (progress, then a result) and `log` (logging notifications). */
async function startUpstream(): Promise<{ url: string; close(): Promise<void> }> {
  const transports = new Map<string, StreamableHTTPServerTransport>();
  const build = () => {
    const server = new McpServer(
      { name: 'size-upstream', version: '1.0.0' },
      { capabilities: { logging: {} } },
    );
    server.registerTool(
      'report',
      {
        description:
          '`progress` progress notifications of `progressBytes` each, then a text of `resultBytes`',
        inputSchema: { progress: z.number(), progressBytes: z.number(), resultBytes: z.number() },
      },
      async ({ progress, progressBytes, resultBytes }, extra) => {
        const progressToken = extra._meta?.progressToken;
        for (let i = 1; i <= progress && progressToken !== undefined; i++)
          await extra.sendNotification({
            method: 'notifications/progress',
            params: { progressToken, progress: i, message: 'p'.repeat(progressBytes) },
          });
        return { content: [{ type: 'text', text: 'r'.repeat(resultBytes) }] };
      },
    );
    server.registerTool(
      'log',
      {
        description: '`count` logging notifications of `bytes` each',
        inputSchema: { count: z.number(), bytes: z.number() },
      },
      async ({ count, bytes }, extra) => {
        for (let i = 1; i <= count; i++)
          await extra.sendNotification({
            method: 'notifications/message',
            params: { level: 'info', data: { i, text: 'l'.repeat(bytes) } },
          });
        return { content: [{ type: 'text', text: `logged ${count}` }] };
      },
    );
    return server;
  };
  const readJson = async (req: IncomingMessage) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const text = Buffer.concat(chunks).toString('utf8');
    return text === '' ? undefined : JSON.parse(text);
  };
  const http: Server = createServer(async (req, res) => {
    const id = req.headers['mcp-session-id'];
    let transport = typeof id === 'string' ? transports.get(id) : undefined;
    if (!transport) {
      const created = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (sid) => {
          transports.set(sid, created);
        },
      });
      transport = created;
      await build().connect(created);
    }
    await transport.handleRequest(req, res, req.method === 'POST' ? await readJson(req) : undefined);
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(http.address() as AddressInfo).port}/mcp`,
    close: async () => {
      for (const t of transports.values()) await t.close();
      http.closeAllConnections();
      await new Promise((r) => http.close(r));
    },
  };
}

let upstream: Awaited<ReturnType<typeof startUpstream>>;
let tenant: Tenant;
let url: string;
const open: SseClient[] = [];

const t = useTestApp({}, { listen: true });
beforeAll(async () => {
  upstream = await startUpstream();
  tenant = await createTenant(t);
  await createUpstream(t, tenant, { name: 'size', slug: 'size', url: upstream.url, timeoutMs: 20_000 });
  url = `${t.url}/v1/mcp/size`;
});
afterAll(async () => {
  for (const c of open) c.close();
  await upstream.close();
});

const key = () => ({ 'x-service-api-key': tenant.apiKey });
const STREAM = 'application/json, text/event-stream';

const session = () => rawSession(url, key(), 's');

const report = (id: number, args: { progress: number; progressBytes: number; resultBytes: number }) => ({
  jsonrpc: '2.0',
  id,
  method: 'tools/call',
  params: { name: 'report', arguments: args, _meta: { progressToken: `tok-${id}` } },
});

async function post(headers: Record<string, string>, body: unknown): Promise<SseClient> {
  const c = await SseClient.post(url, body, { ...headers, accept: STREAM });
  open.push(c);
  return c;
}

async function get(headers: Record<string, string>): Promise<SseClient> {
  const c = await SseClient.open(url, { ...headers, accept: 'text/event-stream' });
  open.push(c);
  return c;
}

type Answer = {
  id?: number;
  method?: string;
  params?: { data?: { i: number } };
  result?: { content: { text: string }[] };
};
const data = (e: { data: unknown }) => e.data as Answer;
const resultText = (events: { data: unknown }[], id: number) =>
  events.map(data).find((d) => d.id === id)?.result?.content[0]?.text;

describe('MCP gateway: large streamed answers and replays', () => {
  it('delivers a streamed POST answer whose response is close to the 8 MiB message bound', async () => {
    const headers = await session();
    for (const [id, resultBytes] of [
      [1, 1_500_000],
      [2, 8_000_000],
    ] as const) {
      const call = await post(headers, report(id, { progress: 1, progressBytes: 10, resultBytes }));
      await waitFor(() => call.ended, `the answer stream of ${resultBytes} bytes to end`, 20_000);
      expect(call.status).toBe(200);
      expect(call.headers['content-type']).toMatch(/^text\/event-stream/);
      expect(call.events.map((e) => data(e).method ?? data(e).id)).toEqual(['notifications/progress', id]);
      expect(resultText(call.events, id)).toHaveLength(resultBytes);
    }
  });

  it('replays a POST answer stream of about 3.5 MB on resumption, then ends', {
    timeout: 70_000,
  }, async () => {
    const headers = await session();
    const call = await post(
      headers,
      report(3, { progress: 10, progressBytes: 150_000, resultBytes: 2_000_000 }),
    );
    // As long as the other waits here: the app, the upstream and the client share this process.
    const first = await call.waitForEvent(() => true, 'the first progress event', 20_000);
    call.close();
    // Wait for the whole answer to be recorded: a second resumption after the response replays nothing.
    const resumed = await get({ ...headers, 'last-event-id': first.id! });
    await waitFor(() => resumed.ended, 'the replay to end', 20_000);
    expect(resumed.status).toBe(200);
    const progress = resumed.events.filter((e) => data(e).method === 'notifications/progress');
    expect(progress).toHaveLength(9);
    expect(resultText(resumed.events, 3)).toHaveLength(2_000_000);
    // The same again, now entirely from the log (the response was already sent).
    const again = await get({ ...headers, 'last-event-id': first.id! });
    await waitFor(() => again.ended, 'the second replay to end', 20_000);
    expect(again.events.map((e) => e.id)).toEqual(resumed.events.map((e) => e.id));
  });

  it("replays about 3 MB of a session's GET stream on resumption, and the stream goes on", async () => {
    const headers = await session();
    const stream = await get(headers);
    const hello = await stream.waitForEvent(() => true, 'notifications/session');
    const logged = await rawRpc(
      url,
      {
        jsonrpc: '2.0',
        id: 4,
        method: 'tools/call',
        params: { name: 'log', arguments: { count: 20, bytes: 150_000 } },
      },
      { ...headers, accept: 'application/json' },
    );
    expect(logged.json().result.content[0].text).toBe('logged 20');
    await waitFor(
      () => stream.events.filter((e) => data(e).method === 'notifications/message').length === 20,
      'the logging messages on the GET stream',
    );
    const resumed = await get({ ...headers, 'last-event-id': hello.id! });
    await waitFor(
      () => resumed.events.filter((e) => data(e).method === 'notifications/message').length === 20,
      'the replayed logging messages',
      20_000,
    );
    expect(resumed.events.map((e) => e.id)).toEqual(stream.events.slice(1).map((e) => e.id));
    await waitFor(() => stream.ended, 'the replaced connection to close');
    expect(resumed.ended).toBe(false);
  });

  it('still drops a GET stream whose client stops reading once more than 1 MiB waits for it', async () => {
    const headers = await session();
    const stream = await get(headers);
    await stream.waitForEvent(() => true, 'notifications/session');
    stream.res!.pause();
    // 12 MB: more than the kernel's socket buffers and our 1 MiB together.
    const logged = await rawRpc(
      url,
      {
        jsonrpc: '2.0',
        id: 5,
        method: 'tools/call',
        params: { name: 'log', arguments: { count: 80, bytes: 150_000 } },
      },
      { ...headers, accept: 'application/json' },
    );
    expect(logged.json().result.content[0].text).toBe('logged 80');
    stream.res!.resume();
    await waitFor(() => stream.ended, 'the dropped stream to end', 20_000);
    expect(stream.events.filter((e) => data(e).method === 'notifications/message').length).toBeLessThan(80);
    // The session goes on: the messages that waited for a stream (several MB) all come on the next one.
    const next = await get(headers);
    expect(next.status).toBe(200);
    await next.waitForEvent((e) => data(e).params?.data?.i === 80, 'the last logging message', 20_000);
    expect(next.ended).toBe(false);
    const ping = await rawRpc(url, { jsonrpc: '2.0', id: 6, method: 'ping' }, headers);
    expect(ping.json()).toEqual({ jsonrpc: '2.0', id: 6, result: {} });
  });

  it('a JSON-only client gets an answer of 8 MB as JSON', async () => {
    const headers = await session();
    const res = await rawRpc(url, report(7, { progress: 1, progressBytes: 10, resultBytes: 8_000_000 }), {
      ...headers,
      accept: 'application/json',
    });
    expect(res.status).toBe(200);
    expect(res.json().result.content[0].text).toHaveLength(8_000_000);
  });
});
