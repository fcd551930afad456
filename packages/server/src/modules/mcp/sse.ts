import type { FastifyReply, FastifyRequest } from 'fastify';
import type { DecisionEnvelope } from './sessions.js';

const PING_MS = 15_000;

export interface StreamOptions {
  sessionId: string;
  subscribe: (handler: (e: DecisionEnvelope) => void) => () => void;
  /** Keeps the session alive while its stream is open. */
  touch: () => void;
}

/**
 * GET /v1/mcp/:upstreamSlug streams. They are tracked so that closing the app ends them instead of
 * waiting for their clients to leave.
 */
export class EventStreams {
  private readonly open = new Map<() => void, string>();

  start(req: FastifyRequest, reply: FastifyReply, o: StreamOptions): void {
    this.open.set(
      openEventStream(req, reply, o, (end) => this.open.delete(end)),
      o.sessionId,
    );
  }

  /** A session that ended (DELETE) ends its streams too. */
  endSession(sessionId: string): void {
    for (const [end, id] of [...this.open]) if (id === sessionId) end();
  }

  endAll(): void {
    for (const end of [...this.open.keys()]) end();
  }
}

/**
 * An SSE stream. The session id comes first as a JSON-RPC notification
 * (`notifications/session`, default event type, which MCP clients parse as a message); decisions
 * follow as `event: decision`, which MCP clients skip and other consumers read. Comment pings every 15 s.
 */
function openEventStream(
  req: FastifyRequest,
  reply: FastifyReply,
  o: StreamOptions,
  onEnd: (end: () => void) => void,
): () => void {
  reply.hijack();
  const res = reply.raw;
  res.writeHead(200, {
    'content-type': 'text/event-stream',
    'cache-control': 'no-cache, no-transform',
    connection: 'keep-alive',
    'x-accel-buffering': 'no',
    'mcp-session-id': o.sessionId,
    'x-request-id': req.id,
  });
  const write = (chunk: string) => {
    if (!res.writableEnded) res.write(chunk);
  };
  write(':ok\n\n');
  write(
    `data: ${JSON.stringify({ jsonrpc: '2.0', method: 'notifications/session', params: { sessionId: o.sessionId } })}\n\n`,
  );
  const unsubscribe = o.subscribe((e) => write(`event: decision\ndata: ${JSON.stringify(e)}\n\n`));
  const ping = setInterval(() => {
    o.touch();
    write(':ping\n\n');
  }, PING_MS);
  ping.unref();
  let done = false;
  const end = () => {
    if (done) return;
    done = true;
    clearInterval(ping);
    unsubscribe();
    onEnd(end);
    if (!res.writableEnded) res.end();
  };
  res.on('close', end);
  return end;
}
