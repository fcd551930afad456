/**
 * The gateway bench's upstream: a real MCP server (the official SDK's McpServer) with one trivial tool,
 * served over Streamable HTTP in its stateless JSON form: every POST carries one JSON-RPC message and
 * gets one JSON answer, no session, GET answers 405. GET /health answers 200 once it listens.
 *
 * Why not the SDK's StreamableHTTPServerTransport: in stateless mode it needs a fresh server and
 * transport per request, about 5 ms of CPU on a small machine, so at 200 calls/s the bench would
 * measure the upstream's queue instead of the gateway. This transport keeps the upstream near zero.
 */
import { createServer, type IncomingMessage } from 'node:http';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';

type Id = string | number;

/** One SDK server for every request; request ids are made unique inside and restored outside. */
class JsonPostTransport implements Transport {
  onmessage?: (message: JSONRPCMessage) => void;
  onclose?: () => void;
  onerror?: (error: Error) => void;
  private next = 0;
  private readonly waiting = new Map<number, { id: Id; resolve: (m: JSONRPCMessage) => void }>();

  async start(): Promise<void> {}

  async close(): Promise<void> {
    this.onclose?.();
  }

  async send(message: JSONRPCMessage): Promise<void> {
    // Answers only; server-initiated notifications have nowhere to go without a stream.
    if (!('id' in message) || 'method' in message) return;
    const w = this.waiting.get(message.id as number);
    if (!w) return;
    this.waiting.delete(message.id as number);
    w.resolve({ ...message, id: w.id } as JSONRPCMessage);
  }

  handle(message: JSONRPCMessage): Promise<JSONRPCMessage | null> {
    if (!('method' in message) || !('id' in message)) {
      this.onmessage?.(message);
      return Promise.resolve(null);
    }
    const internal = ++this.next;
    return new Promise((resolve) => {
      this.waiting.set(internal, { id: message.id, resolve });
      this.onmessage?.({ ...message, id: internal });
    });
  }
}

const server = new McpServer({ name: 'bench-upstream', version: '1.0.0' });
server.registerTool('echo', { inputSchema: { text: z.string() } }, async ({ text }) => ({
  content: [{ type: 'text', text }],
}));
const transport = new JsonPostTransport();
await server.connect(transport);

async function readJson(req: IncomingMessage): Promise<JSONRPCMessage> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return JSON.parse(Buffer.concat(chunks).toString('utf8'));
}

const port = Number(process.env.PORT ?? 0);
const http = createServer(async (req, res) => {
  if (req.url === '/health') return void res.writeHead(200).end('ok');
  if (req.url !== '/mcp' || req.method !== 'POST') return void res.writeHead(405, { allow: 'POST' }).end();
  try {
    const answer = await transport.handle(await readJson(req));
    if (!answer) return void res.writeHead(202).end();
    const out = JSON.stringify(answer);
    res
      .writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(out) })
      .end(out);
  } catch (err) {
    if (!res.headersSent) res.writeHead(400).end(String(err));
  }
});
http.listen(port, '127.0.0.1');
process.on('SIGTERM', () => http.close(() => process.exit(0)));
