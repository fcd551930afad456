import type { ServerResponse } from 'node:http';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { AppContext } from '../context.js';
import { AppError } from '../lib/errors.js';
import type { JwtVerifier } from '../lib/jwt.js';
import { type Recheck, streamAccess } from './access.js';
import { type CheckRound, OneCheckAtATime } from './checks.js';
import type { Frames, StreamClient, StreamHolder } from './hub.js';
import type { StreamOptions } from './options.js';

const StreamQuery = Type.Object({
  types: Type.Optional(Type.String({ maxLength: 2000 })),
  apiKey: Type.Optional(Type.String()),
  organizationId: Type.Optional(Type.String()),
});

/** `types=a,b` → {a, b}; absent or empty → null (everything). */
export function parseTypes(value: string | undefined): Set<string> | null {
  const types = (value ?? '')
    .split(',')
    .map((t) => t.trim())
    .filter((t) => t !== '');
  return types.length > 0 ? new Set(types) : null;
}

/** The longest a client is given to read what is left when its stream ends (see close). */
const CLOSE_GRACE_MAX_MS = 5000;

/**
 * The one SSE writer of the service (event streams and MCP streams). Writes never wait: a client
 * that still has more than maxBufferedBytes unsent when new events come is too slow and is dropped.
 *
 * Only what the client had a chance to read counts. The response keeps the socket corked until the
 * tick ends, so the writes of one tick (one event, a replay, the messages that waited for a stream)
 * leave together and are judged together, by the backlog found before the first of them: judged
 * after them, one event over the limit (an MCP message may be 8 MiB) or a replay over it (up to
 * 4 MiB) would drop even a client reading as fast as it can. While a client reads such a large
 * burst, what is left of it does not count against the events after it (a ping, a progress
 * notification), only more than maxBufferedBytes on top of it; a large burst must find the one
 * before it gone. Memory per client stays within about twice maxBufferedBytes plus one large burst.
 *
 * A heartbeat writes a `:ping` comment and re-checks the credentials; a rejected re-check (a store
 * hiccup) keeps the stream.
 */
export class SseWriter {
  private ended = false;
  private readonly checks = new OneCheckAtATime();
  private readonly endListeners: (() => void)[] = [];
  /** The writes of this tick: the backlog before them, what they added, what was left of the last large burst. */
  private burst: { before: number; added: number; largeLeft: number } | null = null;
  /**
   * The last burst larger than maxBufferedBytes and what was written after it, in the units of
   * `writableLength`: data leaves in order, so of what is unsent the last `afterLarge` came after it
   * and at most `large` before those is left of it.
   */
  private large = 0;
  private afterLarge = 0;

  constructor(
    private readonly res: ServerResponse,
    private readonly maxBufferedBytes: number,
  ) {
    res.on('close', () => this.finish());
  }

  /** Sends the status and headers; the stream is open from here on. */
  open(headers: Record<string, string>): void {
    this.res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      'x-accel-buffering': 'no',
      connection: 'keep-alive',
      ...headers,
    });
    // Nagle would hold small event frames back; events should leave at once.
    this.res.socket?.setNoDelay(true);
  }

  /** Closed, by us or underneath us (possibly before the close listener was attached). */
  get gone(): boolean {
    return this.ended || this.res.destroyed || this.res.writableEnded;
  }

  /** Writes one raw chunk (whole frames); false when the stream is gone or was dropped as too slow. */
  write(chunk: string): boolean {
    if (this.gone) return false;
    let burst = this.burst;
    if (!burst) {
      const unsent = this.res.writableLength;
      const largeLeft = Math.min(this.large, Math.max(0, unsent - this.afterLarge));
      // The client reads slower than events arrive; holding more would grow memory without bound.
      if (unsent - largeLeft > this.maxBufferedBytes) return this.drop();
      burst = this.burst = { before: unsent, added: 0, largeLeft };
      process.nextTick(() => this.endBurst());
    }
    const before = this.res.writableLength;
    this.res.write(chunk);
    burst.added += Math.max(0, this.res.writableLength - before);
    if (burst.added > this.maxBufferedBytes && burst.before > this.maxBufferedBytes) return this.drop();
    return true;
  }

  /**
   * One event: `id:` line (when given: what a client sends back as Last-Event-ID to resume),
   * `event:` line (omitted for the default type "message"), then the data line.
   */
  event(data: string, type?: string, id?: string): boolean {
    const head = (id !== undefined ? `id: ${id}\n` : '') + (type ? `event: ${type}\n` : '');
    return this.write(`${head}data: ${data}\n\n`);
  }

  heartbeat(recheck: () => Promise<boolean>): void {
    this.ping();
    this.recheck(recheck);
  }

  /** The keep-alive comment alone. */
  ping(): void {
    this.write(':ping\n\n');
  }

  /** Checks the credentials again (one check at a time); the stream ends when they no longer hold. */
  recheck(recheck: () => Promise<boolean>): void {
    if (this.gone) return;
    this.checks.run(async () => {
      if (!this.gone && !(await recheck())) this.close();
    });
  }

  /** Runs once when the stream ends, whoever ended it. */
  onEnd(listener: () => void): void {
    // A client that left before the listener was added ends the stream now (its close event is past).
    if (this.gone) this.finish();
    if (this.ended) listener();
    else this.endListeners.push(listener);
  }

  close(): void {
    if (this.gone) {
      this.finish();
      return;
    }
    const unsent = this.res.writableLength;
    this.res.end();
    this.finish();
    // A client that stopped reading would hold the shutdown open; give it a moment, then cut: a
    // second per maxBufferedBytes still unsent (at least one, at most CLOSE_GRACE_MAX_MS, which keeps
    // a shutdown within what docs/deploy.md asks for), so that a client reading a large last event
    // (an MCP answer may be 8 MiB) at a modest pace still gets it whole. Once everything left, the
    // connection stays (it may be kept alive for further requests).
    const grace = Math.min(CLOSE_GRACE_MAX_MS, 1000 * Math.max(1, Math.ceil(unsent / this.maxBufferedBytes)));
    const cut = setTimeout(() => this.res.destroy(), grace).unref();
    this.res.once('finish', () => clearTimeout(cut));
  }

  private drop(): false {
    this.res.destroy();
    this.finish();
    return false;
  }

  private endBurst(): void {
    const burst = this.burst;
    this.burst = null;
    if (!burst) return;
    if (burst.added > this.maxBufferedBytes) {
      this.large = burst.added;
      this.afterLarge = 0;
    } else if (burst.largeLeft > 0) this.afterLarge += burst.added;
    else this.large = 0;
  }

  private finish(): void {
    if (this.ended) return;
    this.ended = true;
    for (const l of this.endListeners.splice(0)) l();
  }
}

/** A /v1/events/stream connection as the hub sees it, written through SseWriter. */
export class SseClient implements StreamClient {
  readonly kind = 'sse';

  constructor(
    private readonly writer: SseWriter,
    readonly types: ReadonlySet<string> | null,
    readonly recheck: Recheck,
    readonly holder?: StreamHolder,
  ) {}

  get gone(): boolean {
    return this.writer.gone;
  }

  send(frames: Frames): void {
    this.writer.write(frames.sse);
  }

  heartbeat(): void {
    this.writer.ping();
  }

  checkCredentials(round?: CheckRound): void {
    this.writer.recheck(() => this.recheck(round));
  }

  close(): void {
    this.writer.close();
  }
}

const STREAM_SCOPES = ['api', 'approvals:resolve', 'policy-drafts:approve'] as const;

export const sseRoutes: FastifyPluginAsyncTypebox<{
  ctx: AppContext;
  jwt: JwtVerifier;
  options: StreamOptions;
}> = async (app, { ctx, jwt, options }) => {
  app.get(
    '/v1/events/stream',
    {
      // A HEAD would open a stream with no body: not offered.
      exposeHeadRoute: false,
      // Reviewer keys (a chat bot relaying people's clicks) watch for what they are asked to decide.
      config: { auth: 'any', queryApiKey: true, plainUnauthorized: true, scopes: STREAM_SCOPES },
      // Runs after authentication. A WebSocket handshake here would be taken by the websocket
      // plugin, which accepts it only to close it and logs the URL, an `apiKey` in it included.
      onRequest: async (req) => {
        if (req.ws) {
          throw new AppError(
            'validation_failed',
            'GET /v1/events/stream is a Server-Sent Events stream and does not upgrade; WebSockets connect to /ws',
          );
        }
      },
      schema: {
        querystring: StreamQuery,
        response: {
          200: {
            description: 'Server-Sent Events: one event per service event, heartbeat comments',
            content: { 'text/event-stream': { schema: Type.String() } },
          },
        },
      },
    },
    async (req, reply) => {
      const access = await streamAccess(ctx, jwt, req, req.query.organizationId);
      reply.hijack();
      const writer = new SseWriter(reply.raw, options.maxBufferedBytes);
      writer.open({ 'x-request-id': req.id });
      const client = new SseClient(writer, parseTypes(req.query.types), access.recheck, access.holder);
      writer.onEnd(() => ctx.streams.remove(client));
      writer.write(':ok\n\n');
      ctx.streams.set(client, [access.organizationId]);
      if (client.gone) ctx.streams.remove(client);
      // A revocation or sign-out that came while the credentials were being checked found no stream
      // to end: they are checked once more now that the stream can be found.
      else writer.recheck(access.recheck);
    },
  );
};
