import type { ServerResponse } from 'node:http';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { AppContext } from '../context.js';
import type { JwtVerifier } from '../lib/jwt.js';
import { type Recheck, streamAccess } from './access.js';
import type { Frames, StreamClient } from './hub.js';
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

/** One SSE response. Writes never wait: past the buffer limit the client is too slow and is dropped. */
export class SseClient implements StreamClient {
  readonly kind = 'sse';
  private ended = false;
  private checking = false;

  constructor(
    private readonly res: ServerResponse,
    readonly types: ReadonlySet<string> | null,
    private readonly maxBufferedBytes: number,
    readonly recheck: Recheck,
  ) {}

  /** Closed underneath us (possibly before the close listener was attached). */
  get gone(): boolean {
    return this.res.destroyed || this.res.writableEnded;
  }

  private write(chunk: string): void {
    if (this.ended || this.res.destroyed) return;
    this.res.write(chunk);
    if (this.res.writableLength > this.maxBufferedBytes) {
      // The client reads slower than events arrive; holding more would grow memory without bound.
      this.ended = true;
      this.res.destroy();
    }
  }

  send(frames: Frames): void {
    this.write(frames.sse);
  }

  heartbeat(): void {
    this.write(':ping\n\n');
    if (this.checking || this.ended) return;
    this.checking = true;
    this.recheck()
      .then((ok) => {
        if (!ok) this.close();
      })
      // A store hiccup keeps the stream; the next heartbeat tries again.
      .catch(() => {})
      .finally(() => {
        this.checking = false;
      });
  }

  close(): void {
    if (this.ended) return;
    this.ended = true;
    this.res.end();
    // A client that stopped reading would hold the shutdown open; give it a moment, then cut.
    setTimeout(() => this.res.destroy(), 1000).unref();
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
      const res = reply.raw;
      res.writeHead(200, {
        'content-type': 'text/event-stream; charset=utf-8',
        'cache-control': 'no-cache',
        'x-accel-buffering': 'no',
        connection: 'keep-alive',
        'x-request-id': req.id,
      });
      // Nagle would hold small event frames back; events should leave at once.
      res.socket?.setNoDelay(true);
      const client = new SseClient(
        res,
        parseTypes(req.query.types),
        options.maxBufferedBytes,
        access.recheck,
      );
      res.on('close', () => ctx.streams.remove(client));
      res.write(':ok\n\n');
      ctx.streams.set(client, [access.organizationId]);
      if (client.gone) ctx.streams.remove(client);
    },
  );
};
