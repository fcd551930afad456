import type { FastifyReply, FastifyRequest } from 'fastify';
import type { DecisionEnvelope } from './sessions.js';

export interface StreamOptions {
  sessionId: string;
  subscribe: (handler: (e: DecisionEnvelope) => void) => () => void;
  /** Keeps the session alive while its stream is open. */
  touch: () => void;
  /**
   * At every ping: may the stream go on (key still valid, upstream still there and enabled)? False
   * ends the stream; a rejection (a store hiccup) keeps it until the next ping.
   */
  recheck: () => Promise<boolean>;
}

export interface StreamLimits {
  /** `:ping` interval, and the pace of the credential re-check (15 s). */
  pingMs: number;
  /** Unsent bytes beyond which the client is too slow and is dropped (1 MiB, as /v1/events/stream). */
  maxBufferedBytes: number;
}

export const DEFAULT_STREAM_LIMITS: StreamLimits = { pingMs: 15_000, maxBufferedBytes: 1024 * 1024 };

/**
 * GET /v1/mcp/:upstreamSlug streams. They are tracked so that closing the app ends them instead of
 * waiting for their clients to leave.
 */
export class EventStreams {
  private readonly open = new Map<() => void, string>();

  constructor(private readonly limits: StreamLimits = DEFAULT_STREAM_LIMITS) {}

  start(req: FastifyRequest, reply: FastifyReply, o: StreamOptions): void {
    this.open.set(
      openEventStream(req, reply, o, this.limits, (end) => this.open.delete(end)),
      o.sessionId,
    );
  }

  /** Open streams (tests, monitoring). */
  get size(): number {
    return this.open.size;
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
 * follow as `event: decision`, which MCP clients skip and other consumers read. Comment pings every
 * 15 s, each followed by a re-check of the key and the upstream. Writes never wait: a client that
 * lets more than maxBufferedBytes pile up is dropped.
 */
function openEventStream(
  req: FastifyRequest,
  reply: FastifyReply,
  o: StreamOptions,
  limits: StreamLimits,
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
  let done = false;
  let checking = false;
  const write = (chunk: string) => {
    if (done || res.writableEnded || res.destroyed) return;
    res.write(chunk);
    if (res.writableLength > limits.maxBufferedBytes) {
      // The client reads slower than decisions arrive; holding more would grow memory without bound.
      end();
      res.destroy();
    }
  };
  const unsubscribe = o.subscribe((e) => write(`event: decision\ndata: ${JSON.stringify(e)}\n\n`));
  const ping = setInterval(() => {
    o.touch();
    write(':ping\n\n');
    if (done || checking) return;
    checking = true;
    o.recheck()
      .then((ok) => {
        if (!ok) end();
      })
      // A store hiccup keeps the stream; the next ping tries again.
      .catch(() => {})
      .finally(() => {
        checking = false;
      });
  }, limits.pingMs);
  ping.unref();
  const end = () => {
    if (done) return;
    done = true;
    clearInterval(ping);
    unsubscribe();
    onEnd(end);
    if (!res.writableEnded) res.end();
  };
  res.on('close', end);
  write(':ok\n\n');
  write(
    `data: ${JSON.stringify({ jsonrpc: '2.0', method: 'notifications/session', params: { sessionId: o.sessionId } })}\n\n`,
  );
  return end;
}
