import type { FastifyInstance, FastifyRequest } from 'fastify';
import WebSocket from 'ws';
import type { AppContext } from '../context.js';
import { AppError } from '../lib/errors.js';
import { type JwtVerifier, KeySourceError } from '../lib/jwt.js';
import { bearerToken, keySourceUnavailable } from '../plugins/auth.js';
import { tokenStillValid, userOrganizations } from './access.js';
import { type CheckRound, OneCheckAtATime } from './checks.js';
import type { Frames, StreamClient } from './hub.js';
import type { StreamOptions } from './options.js';

/** Close codes: 1001 = server going away, 1008 = policy violation (credentials no longer valid). */
const GOING_AWAY = 1001;
const POLICY_VIOLATION = 1008;

/** One WebSocket. Like SSE, sending never waits: past the buffer limit the client is dropped. */
export class WsClient implements StreamClient {
  readonly kind = 'ws';
  readonly types = null;
  /** Answered the last ping; a client still silent at the next heartbeat is terminated. */
  alive = true;
  private readonly checks = new OneCheckAtATime();

  constructor(
    private readonly socket: WebSocket,
    private readonly maxBufferedBytes: number,
    /**
     * Re-validates the token and re-reads memberships (shared within a round of checks); null =
     * credentials no longer valid.
     */
    private readonly refresh: (round?: CheckRound) => Promise<string[] | null>,
    private readonly onOrganizations: (orgs: string[]) => void,
  ) {
    socket.on('pong', () => {
      this.alive = true;
    });
  }

  get gone(): boolean {
    return this.socket.readyState === WebSocket.CLOSED;
  }

  send(frames: Frames): void {
    if (this.socket.readyState !== WebSocket.OPEN) return;
    this.socket.send(frames.ws);
    // A full buffer also holds back a close frame, so a too-slow client is cut, not closed.
    if (this.socket.bufferedAmount > this.maxBufferedBytes) this.socket.terminate();
  }

  /** The ping; the credentials are re-checked after it (EventHub.heartbeat). */
  heartbeat(): void {
    if (!this.alive) {
      this.socket.terminate();
      return;
    }
    this.alive = false;
    if (this.socket.readyState === WebSocket.OPEN) this.socket.ping();
  }

  /** Re-validates the token and re-reads the memberships (one check at a time: OneCheckAtATime). */
  checkCredentials(round?: CheckRound): void {
    // Closing (terminated at a heartbeat, or closed) is as good as gone: nothing is delivered any more.
    if (this.socket.readyState !== WebSocket.OPEN) return;
    this.checks.run(async () => {
      if (this.gone) return;
      const orgs = await this.refresh(round);
      if (orgs === null) this.socket.close(POLICY_VIOLATION, 'token expired or no longer valid');
      else this.onOrganizations(orgs);
    });
  }

  close(reason: string): void {
    this.socket.close(GOING_AWAY, reason);
    // The closing handshake needs the peer; one that does not answer must not hold the shutdown.
    setTimeout(() => this.socket.terminate(), 1000).unref();
  }
}

/**
 * @fastify/websocket's error handler. A client's mistakes (a frame over the 64 KiB limit, bad UTF-8,
 * a protocol error, a dropped connection) are logged at info without a stack, so no client can write
 * error-level lines; `ws` has already closed with the matching code (1009, 1007, 1002). Anything else
 * is ours.
 */
export function wsErrorHandler(error: Error, socket: WebSocket, request: FastifyRequest): void {
  const code = (error as NodeJS.ErrnoException).code ?? '';
  if (code.startsWith('WS_ERR_') || CONNECTION_ERRORS.has(code)) {
    request.log.info({ code, reason: error.message }, 'websocket client error');
    return;
  }
  request.log.error({ err: error }, 'websocket error');
  socket.terminate();
}

const CONNECTION_ERRORS = new Set(['ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'ECONNABORTED']);

interface Admitted {
  userId: string;
  token: string;
  organizations: string[];
}

function tokenOf(request: FastifyRequest): string | null {
  const q = (request.query as Record<string, unknown> | undefined)?.token;
  if (typeof q === 'string' && q !== '') return q;
  return bearerToken(request);
}

/**
 * GET /ws?token=<JWT>. The token is checked in onRequest, before the upgrade: a bad or missing token
 * gets a plain HTTP 401 envelope and never a WebSocket. Events of every organization the user belongs
 * to are delivered; memberships are re-read at every heartbeat (once per user, whatever the number of
 * its connections: EventHub.heartbeat), so an organization the user joins later is delivered from
 * the next heartbeat's check on, and one the user leaves stops.
 */
export async function wsRoutes(
  app: FastifyInstance,
  { ctx, jwt, options }: { ctx: AppContext; jwt: JwtVerifier; options: StreamOptions },
): Promise<void> {
  const admitted = new WeakMap<FastifyRequest, Admitted>();

  app.route({
    method: 'GET',
    url: '/ws',
    config: { auth: 'none' },
    schema: {
      summary: 'Service events over WebSocket',
      description:
        'Authenticates with a user token in `?token=`; without a valid one the upgrade answers 401.',
      response: { 101: { description: 'Switching Protocols: one JSON frame per service event' } },
      // Checked by the route itself (no token, a bad one; a request that is no upgrade).
      documented: { errors: ['unauthorized', 'validation_failed'] },
    },
    onRequest: async (req) => {
      const token = tokenOf(req);
      if (!token) throw new AppError('unauthorized', 'A user token is required: connect to /ws?token=<JWT>');
      let userId: string;
      try {
        userId = (await jwt.verify(token)).sub;
      } catch (err) {
        // The token could not be checked, which says nothing against it: retry, as on every route.
        if (err instanceof KeySourceError) throw keySourceUnavailable(req, err);
        throw new AppError('unauthorized', `Invalid token: ${(err as Error).message}`);
      }
      req.principal = { kind: 'user', userId };
      admitted.set(req, { userId, token, organizations: await userOrganizations(ctx, userId) });
    },
    handler: async () => {
      throw new AppError('validation_failed', 'GET /ws needs a WebSocket upgrade (Upgrade: websocket)');
    },
    wsHandler: (socket, req) => {
      const who = admitted.get(req)!;
      const client: WsClient = new WsClient(
        socket,
        options.maxBufferedBytes,
        async (round) =>
          (await tokenStillValid(jwt, who.token, who.userId))
            ? userOrganizations(ctx, who.userId, round)
            : null,
        (orgs) => {
          if (socket.readyState === WebSocket.OPEN) ctx.streams.set(client, orgs);
        },
      );
      socket.on('close', () => ctx.streams.remove(client));
      // No subscription protocol: whatever a client sends is ignored.
      socket.on('message', () => {});
      if (socket.readyState === WebSocket.OPEN) ctx.streams.set(client, who.organizations);
    },
  });
}
