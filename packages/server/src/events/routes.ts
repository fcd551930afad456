import type { IncomingMessage } from 'node:http';
import { ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import websocket from '@fastify/websocket';
import type { FastifyInstance } from 'fastify';
import type { AppContext } from '../context.js';
import type { JwtVerifier } from '../lib/jwt.js';
import { DEFAULT_STREAM_OPTIONS, type StreamOptions } from './options.js';
import { sseRoutes } from './sse.js';
import { wsErrorHandler, wsRoutes } from './ws.js';

/**
 * Real-time delivery: SSE at GET /v1/events/stream and WebSocket at GET /ws. Registered as an
 * encapsulated plugin, so @fastify/websocket's hooks apply to these routes only and leave the rest of
 * the API (auth, errors, the hot path) untouched.
 */
export async function eventRoutes(
  app: FastifyInstance,
  { ctx, jwt, streams }: { ctx: AppContext; jwt: JwtVerifier; streams?: Partial<StreamOptions> },
): Promise<void> {
  const options: StreamOptions = { ...DEFAULT_STREAM_OPTIONS, ...streams };
  const hub = ctx.streams;

  // One timer per transport for all connections, not one per connection.
  const timers = [
    setInterval(() => hub.heartbeat('sse'), options.sseHeartbeatMs),
    setInterval(() => hub.heartbeat('ws'), options.wsHeartbeatMs),
  ];
  for (const t of timers) t.unref();

  // A revoked key, a deleted organization or a signed-out session ends its streams at once, on
  // every instance (revocations from other instances arrive through the same calls).
  const unwatch = [
    ctx.keys.watchRevocations((r) => {
      if ('keyIds' in r) hub.endKeys(r.keyIds, 'the API key was revoked');
      else hub.endOrganization(r.organizationId, 'the organization was deleted');
    }),
    ctx.sessions.watchEnds((session) => hub.endSession(session, 'the session ended')),
  ];
  // Scale-out: revocations and sign-outs published while this instance's Redis subscriber was away
  // never arrive here. Once it is subscribed again every open stream re-checks its credentials, so
  // the streams they held end then, not at their next heartbeat (up to 30 s later).
  ctx.redis?.onReconnect(() => hub.checkCredentials());

  // Added before the websocket plugin so it runs first: clients get 1001 "going away", and the
  // server's close is not held open by streams that never end on their own.
  app.addHook('preClose', async () => {
    for (const t of timers) clearInterval(t);
    for (const u of unwatch) u();
    hub.close();
  });

  await app.register(websocket, { options: { maxPayload: 64 * 1024 }, errorHandler: wsErrorHandler });
  closeUnupgradedSockets(app);
  await app.register(sseRoutes, { ctx, jwt, options });
  await app.register(wsRoutes, { ctx, jwt, options });
}

/** How long an answered upgrade request's socket may take to flush its answer before it is cut. */
const UNUPGRADED_FLUSH_MS = 5000;

/**
 * The websocket plugin takes every HTTP request that carries `Upgrade` (on any path: `Upgrade: h2c`
 * from curl, a WebSocket aimed at a plain route, /ws refused with 401 or 400) and runs it through the
 * router over a socket the HTTP server no longer manages: no keep-alive timeout, no closing after the
 * answer, not even when the client has gone (the server allows half-open sockets). Left alone, each
 * such request would hold a connection for ever, and the server's close would wait for it. So a
 * request that is answered instead of upgraded has its connection closed once the answer is sent.
 */
function closeUnupgradedSockets(app: FastifyInstance): void {
  const upgraded = new WeakSet<IncomingMessage>();
  app.websocketServer.on('connection', (_ws: unknown, req: IncomingMessage) => upgraded.add(req));
  const onUpgrade = (req: IncomingMessage, socket: Duplex) => {
    // The answer the plugin has just attached to this socket (the listener above ran before this one).
    const res = (socket as { _httpMessage?: unknown })._httpMessage;
    if (!(res instanceof ServerResponse)) return;
    res.shouldKeepAlive = false;
    const close = () => {
      if (upgraded.has(req) || socket.destroyed) return;
      socket.once('finish', () => socket.destroy());
      socket.end();
      setTimeout(() => socket.destroy(), UNUPGRADED_FLUSH_MS).unref();
    };
    if (res.writableFinished) close();
    else res.once('finish', close);
  };
  app.server.on('upgrade', onUpgrade);
  // The plugin stops taking upgrades on close; a listener left here would take them instead.
  app.addHook('preClose', async () => {
    app.server.removeListener('upgrade', onUpgrade);
  });
}
