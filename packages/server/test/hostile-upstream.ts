import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * MCP upstreams without the SDK that do what no SDK server would: flood the client with requests,
 * never answer, keep answer streams open, answer with something that is not JSON or nested
 * millions deep. They count their connections, so tests can tell what the gateway holds open.
 */

/** A JSON-RPC message as an upstream receives it. */
export interface Received {
  id?: string | number;
  method?: string;
  params?: { name?: unknown; [k: string]: unknown };
  [k: string]: unknown;
}

export interface HostileUpstream {
  url: string;
  /** Connections open now, and the most that were open at once since the last `resetMax`. */
  connections(): { open: number; max: number };
  resetMax(): void;
  /** Messages without a method it received: answers to its own requests. */
  answers: Received[];
  /** Notifications it received. */
  notifications: Received[];
  /** Requests it received (initialize included), in order. */
  requests: Received[];
  close(): Promise<void>;
}

/** One SSE event carrying a message (a string is sent as it is). */
export const sseEvent = (m: unknown): string =>
  `event: message\ndata: ${typeof m === 'string' ? m : JSON.stringify(m)}\n\n`;

/** A JSON text of `levels` nested arrays in a result: 2 bytes a level (8 MB for 4,000,000). */
export const deepResult = (id: string | number | undefined, levels: number): string =>
  `{"jsonrpc":"2.0","id":${JSON.stringify(id)},"result":{"deep":${'['.repeat(levels)}${']'.repeat(levels)}}}`;

const INITIALIZE_RESULT = {
  protocolVersion: '2025-06-18',
  capabilities: { tools: {} },
  serverInfo: { name: 'hostile-upstream', version: '1.0.0' },
};

async function readBody(req: IncomingMessage): Promise<Received | undefined> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  const text = Buffer.concat(chunks).toString('utf8');
  return text === '' ? undefined : (JSON.parse(text) as Received);
}

async function listen(server: Server, handler: Omit<HostileUpstream, 'url' | 'close'>, path: string) {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  return {
    ...handler,
    url: `http://127.0.0.1:${port}${path}`,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

function counting(server: Server) {
  let open = 0;
  let max = 0;
  server.on('connection', (socket) => {
    open++;
    max = Math.max(max, open);
    socket.once('close', () => open--);
  });
  return {
    connections: () => ({ open, max }),
    resetMax: () => {
      max = open;
    },
  };
}

/**
 * Streamable HTTP, issuing no session id: initialize is answered (once `beforeInitialize` has
 * resolved), notifications and responses get 202, GET 405, DELETE 200; every other request goes to
 * `answer`, which writes the response (or not).
 */
export async function startHostileUpstream(
  answer: (msg: Received, res: ServerResponse) => void,
  beforeInitialize?: () => Promise<void>,
): Promise<HostileUpstream> {
  const answers: Received[] = [];
  const notifications: Received[] = [];
  const requests: Received[] = [];
  const server = createServer(async (req, res) => {
    if (req.method !== 'POST') {
      res.writeHead(req.method === 'DELETE' ? 200 : 405).end();
      return;
    }
    const msg = await readBody(req);
    if (!msg || typeof msg.method !== 'string' || msg.id === undefined) {
      if (msg && typeof msg.method === 'string') notifications.push(msg);
      else if (msg) answers.push(msg);
      res.writeHead(202).end();
      return;
    }
    requests.push(msg);
    if (msg.method === 'initialize') {
      await beforeInitialize?.();
      res
        .writeHead(200, { 'content-type': 'application/json' })
        .end(JSON.stringify({ jsonrpc: '2.0', id: msg.id, result: INITIALIZE_RESULT }));
      return;
    }
    answer(msg, res);
  });
  return listen(server, { ...counting(server), answers, notifications, requests }, '/mcp');
}

/**
 * HTTP+SSE (`mcp-sse`): GET /sse is the session's stream, POST /messages?sessionId= answers 202 and
 * the response goes on the stream. initialize is answered; every other request goes to `answer`,
 * with the function that writes a message (or raw text) on the stream.
 */
export async function startHostileSseUpstream(
  answer: (msg: Received, send: (m: unknown) => void) => void,
): Promise<HostileUpstream> {
  const answers: Received[] = [];
  const notifications: Received[] = [];
  const requests: Received[] = [];
  const streams = new Map<string, ServerResponse>();
  const server = createServer(async (req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    if (req.method === 'GET' && url.pathname === '/sse') {
      const id = randomUUID();
      streams.set(id, res);
      res.on('close', () => streams.delete(id));
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      res.write(`event: endpoint\ndata: /messages?sessionId=${id}\n\n`);
      return;
    }
    const stream = streams.get(url.searchParams.get('sessionId') ?? '');
    if (req.method !== 'POST' || url.pathname !== '/messages' || !stream) {
      res.writeHead(404).end();
      return;
    }
    const msg = await readBody(req);
    res.writeHead(202).end('Accepted');
    if (!msg) return;
    if (typeof msg.method !== 'string') answers.push(msg);
    else if (msg.id === undefined) notifications.push(msg);
    else requests.push(msg);
    if (typeof msg.method !== 'string' || msg.id === undefined) return;
    if (msg.method === 'initialize')
      stream.write(sseEvent({ jsonrpc: '2.0', id: msg.id, result: INITIALIZE_RESULT }));
    else answer(msg, (m) => stream.write(typeof m === 'string' ? m : sseEvent(m)));
  });
  return listen(server, { ...counting(server), answers, notifications, requests }, '/sse');
}

/** The messages of an SSE body (the `data` of each event), parsed. */
export function sseMessages(text: string): Record<string, unknown>[] {
  return text
    .split('\n\n')
    .map((block) =>
      block
        .split('\n')
        .filter((l) => l.startsWith('data:'))
        .map((l) => l.slice(l.startsWith('data: ') ? 6 : 5))
        .join('\n'),
    )
    .filter((data) => data !== '')
    .map((data) => JSON.parse(data) as Record<string, unknown>);
}
