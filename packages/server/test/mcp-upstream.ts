import { randomUUID } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { SSEServerTransport } from '@modelcontextprotocol/sdk/server/sse.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { z } from 'zod';

/**
 * A real MCP server built with the official SDK, listening on 127.0.0.1, for tests and the bench.
 * Tools: echo {text}, pay {amount, currency?}, slow {ms}, deep {levels}, huge {bytes}. It counts tool calls and keeps the request
 * headers it saw, so tests can tell whether (and how) the gateway called it.
 */
export interface McpUpstream {
  url: string;
  port: number;
  /** Tool calls that reached a handler, by tool name. */
  calls: Record<string, number>;
  headers: IncomingHttpHeaders[];
  /** Session ids the gateway ended with DELETE (Streamable HTTP), in order. */
  deleted: string[];
  close(): Promise<void>;
}

export interface UpstreamOptions {
  transport: 'streamable' | 'sse';
  /** Streamable HTTP without sessions: a fresh server per request, JSON answers (the SDK's stateless pattern). */
  stateless?: boolean;
  port?: number;
  /** Answer 401 to requests that lack this header value (`x-upstream-token`). */
  requireToken?: string;
}

function buildServer(calls: Record<string, number>): McpServer {
  const server = new McpServer({ name: 'fixture-upstream', version: '1.0.0' });
  const count = (name: string) => {
    calls[name] = (calls[name] ?? 0) + 1;
  };
  server.registerTool(
    'echo',
    { description: 'Echoes its text', inputSchema: { text: z.string() } },
    async ({ text }) => {
      count('echo');
      return { content: [{ type: 'text', text: `echo: ${text}` }], _meta: { upstream: 'fixture' } };
    },
  );
  server.registerTool(
    'pay',
    { description: 'Pretends to pay', inputSchema: { amount: z.number(), currency: z.string().optional() } },
    async ({ amount, currency }) => {
      count('pay');
      return {
        content: [{ type: 'text', text: `paid ${amount} ${currency ?? 'USD'}` }],
        structuredContent: { paid: amount },
      };
    },
  );
  server.registerTool(
    'slow',
    { description: 'Answers after ms milliseconds', inputSchema: { ms: z.number() } },
    async ({ ms }, extra) => {
      count('slow');
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, ms);
        extra.signal.addEventListener('abort', () => {
          clearTimeout(timer);
          resolve();
        });
      });
      return { content: [{ type: 'text', text: `slept ${ms}` }] };
    },
  );
  server.registerTool(
    'deep',
    { description: 'Returns structured content nested `levels` deep', inputSchema: { levels: z.number() } },
    async ({ levels }) => {
      count('deep');
      let nested: Record<string, unknown> = { bottom: true };
      for (let i = 0; i < levels; i++) nested = { n: nested };
      return { content: [{ type: 'text', text: 'deep' }], structuredContent: nested };
    },
  );
  server.registerTool(
    'huge',
    { description: 'Returns a text of `bytes` bytes', inputSchema: { bytes: z.number() } },
    async ({ bytes }) => {
      count('huge');
      return { content: [{ type: 'text', text: 'x'.repeat(bytes) }] };
    },
  );
  server.registerResource('greeting', 'fixture://greeting', { mimeType: 'text/plain' }, async (uri) => ({
    contents: [{ uri: uri.href, text: 'hello from the fixture' }],
  }));
  return server;
}

async function readJson(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  const text = Buffer.concat(chunks).toString('utf8');
  return text === '' ? undefined : JSON.parse(text);
}

export async function startMcpUpstream(options: UpstreamOptions): Promise<McpUpstream> {
  const calls: Record<string, number> = {};
  const headers: IncomingHttpHeaders[] = [];
  const deleted: string[] = [];
  const sessions = new Map<string, { close(): Promise<void> }>();
  const streamable = new Map<string, StreamableHTTPServerTransport>();
  const sse = new Map<string, SSEServerTransport>();

  const http: Server = createServer(async (req, res) => {
    try {
      headers.push(req.headers);
      if (options.requireToken && req.headers['x-upstream-token'] !== options.requireToken) {
        res.writeHead(401, { 'content-type': 'application/json' }).end('{"error":"missing token"}');
        return;
      }
      const path = new URL(req.url ?? '/', 'http://x').pathname;
      if (path === '/health') {
        res.writeHead(200).end('ok');
        return;
      }
      if (options.transport === 'sse') {
        if (req.method === 'GET' && path === '/sse') {
          const transport = new SSEServerTransport('/messages', res);
          sse.set(transport.sessionId, transport);
          sessions.set(transport.sessionId, transport);
          res.on('close', () => sse.delete(transport.sessionId));
          await buildServer(calls).connect(transport);
          return;
        }
        if (req.method === 'POST' && path === '/messages') {
          const id = new URL(req.url ?? '/', 'http://x').searchParams.get('sessionId') ?? '';
          const transport = sse.get(id);
          if (!transport) res.writeHead(404).end('unknown session');
          else await transport.handlePostMessage(req, res);
          return;
        }
        res.writeHead(404).end();
        return;
      }
      if (path !== '/mcp') {
        res.writeHead(404).end();
        return;
      }
      if (options.stateless) {
        if (req.method !== 'POST') {
          res.writeHead(405, { allow: 'POST' }).end();
          return;
        }
        const transport = new StreamableHTTPServerTransport({
          sessionIdGenerator: undefined,
          enableJsonResponse: true,
        });
        const server = buildServer(calls);
        res.on('close', () => {
          void transport.close();
          void server.close();
        });
        await server.connect(transport);
        await transport.handleRequest(req, res, await readJson(req));
        return;
      }
      const id = req.headers['mcp-session-id'];
      if (req.method === 'DELETE' && typeof id === 'string' && streamable.has(id)) deleted.push(id);
      let transport = typeof id === 'string' ? streamable.get(id) : undefined;
      if (!transport) {
        if (typeof id === 'string') {
          res.writeHead(404, { 'content-type': 'application/json' }).end(
            JSON.stringify({
              jsonrpc: '2.0',
              id: null,
              error: { code: -32001, message: 'Session not found' },
            }),
          );
          return;
        }
        const created = new StreamableHTTPServerTransport({
          sessionIdGenerator: () => randomUUID(),
          onsessioninitialized: (sid) => {
            streamable.set(sid, created);
            sessions.set(sid, created);
          },
        });
        transport = created;
        await buildServer(calls).connect(created);
      }
      await transport.handleRequest(req, res, req.method === 'POST' ? await readJson(req) : undefined);
    } catch (err) {
      if (!res.headersSent) res.writeHead(500).end(String(err));
    }
  });

  await new Promise<void>((resolve, reject) => {
    http.once('error', reject);
    http.listen(options.port ?? 0, '127.0.0.1', () => resolve());
  });
  const port = (http.address() as AddressInfo).port;
  const path = options.transport === 'sse' ? '/sse' : '/mcp';
  return {
    url: `http://127.0.0.1:${port}${path}`,
    port,
    calls,
    headers,
    deleted,
    async close() {
      await Promise.all([...sessions.values()].map((s) => s.close().catch(() => {})));
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    },
  };
}

/**
 * What a RawUpstream answers to one request: the JSON-RPC fields after `jsonrpc` and `id`, as a
 * JSON body; or, for RAW_STREAM_ENDS_EARLY, an SSE answer stream that ends without its response.
 */
export type RawAnswerFields = Record<string, unknown>;

/** Answer with an SSE stream carrying one progress notification, then end it with no response. */
export const RAW_STREAM_ENDS_EARLY: RawAnswerFields = { streamEndsEarly: true };

export interface RawUpstream {
  url: string;
  /** Requests that reached it (initialize and notifications excluded), by method and tool name. */
  seen: string[];
  /** Notifications that reached it, by method. */
  notified: string[];
  close(): Promise<void>;
}

/**
 * A Streamable HTTP upstream without the SDK, which answers whatever it is told to, well-formed or
 * not: what no SDK server would send. `answer` gives the fields of the response to a request (a
 * tools/call is named `tools/call:<tool>`); initialize is answered properly, notifications 202,
 * GET 405. It issues no session id, so each gateway session runs on it alike.
 */
export async function startRawUpstream(answer: (what: string) => RawAnswerFields): Promise<RawUpstream> {
  const seen: string[] = [];
  const notified: string[] = [];
  const http: Server = createServer(async (req, res) => {
    if (req.method !== 'POST') {
      res.writeHead(req.method === 'DELETE' ? 200 : 405).end();
      return;
    }
    const msg = (await readJson(req)) as { id?: unknown; method?: string; params?: { name?: unknown } };
    if (msg.id === undefined || typeof msg.method !== 'string') {
      if (msg.id === undefined && typeof msg.method === 'string') notified.push(msg.method);
      res.writeHead(202).end();
      return;
    }
    if (msg.method === 'initialize') {
      res.writeHead(200, { 'content-type': 'application/json' }).end(
        JSON.stringify({
          jsonrpc: '2.0',
          id: msg.id,
          result: {
            protocolVersion: '2025-06-18',
            capabilities: { tools: {} },
            serverInfo: { name: 'raw-upstream', version: '1.0.0' },
          },
        }),
      );
      return;
    }
    const what = msg.method === 'tools/call' ? `tools/call:${String(msg.params?.name)}` : msg.method;
    seen.push(what);
    const fields = answer(what);
    if (fields === RAW_STREAM_ENDS_EARLY) {
      const progress = {
        jsonrpc: '2.0',
        method: 'notifications/message',
        params: { level: 'info', data: 'x' },
      };
      res
        .writeHead(200, { 'content-type': 'text/event-stream' })
        .end(`event: message\ndata: ${JSON.stringify(progress)}\n\n`);
      return;
    }
    res
      .writeHead(200, { 'content-type': 'application/json' })
      .end(JSON.stringify({ jsonrpc: '2.0', id: msg.id, ...fields }));
  });
  await new Promise<void>((resolve, reject) => {
    http.once('error', reject);
    http.listen(0, '127.0.0.1', () => resolve());
  });
  const port = (http.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    seen,
    notified,
    async close() {
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    },
  };
}
